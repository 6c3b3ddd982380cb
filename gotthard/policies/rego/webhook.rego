# The admission decision of the OPA bundle (`gotthard policy bundle`): input is the
# AdmissionReview the API server sends to a ValidatingAdmissionWebhook.
#
#   data.gotthard.webhook.main   the AdmissionReview response (also data.system.main,
#                                OPA's default decision for `POST /`)
#   data.gotthard.webhook.deny / .warn   the violations the constraints keep
#
# The pod policy runs as data.gotthard.webhook.pod, generated from pod*.rego with its
# input re-targeted to data.gotthard.review.pod; the constraints are constrain.rego's.
package gotthard.webhook

import rego.v1

import data.gotthard.constrain.split
import data.gotthard.review


# Only the kinds the pod policy judges (others are allowed).
verdict := split(data.gotthard.webhook.pod.deny, review.ctx) if review.is_pod_object

else := {"deny": set(), "warn": set()}

deny := verdict.deny

warn := verdict.warn

uid := object.get(review.request, "uid", "")

messages(vs) := sort([concat("", [v.rule, ": ", v.message]) | some v in vs])

response := {"uid": uid, "allowed": true, "warnings": messages(warn)} if count(deny) == 0

else := {
	"uid": uid,
	"allowed": false,
	"status": {"code": 403, "reason": "Forbidden", "message": concat("; ", messages(deny))},
	"warnings": messages(warn),
}

main := {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
