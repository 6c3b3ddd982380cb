# Constraints: which violations of the shipped policies count, and how.
#
# data.gotthard.constraints[RULE-ID] = {"enabled": bool, "mode": "enforce" | "warn",
#   "pss": bool, "include": {"namespaces": [ns]} (empty: every namespace),
#   "exempt": {"namespaces": [ns], "namespace_labels": [{"key", "value"}],
#   "images": [glob]}} is written by `gotthard` from the profile and
# [policies] of the site file (a rule missing there is enabled and enforced). Parameters
# are not read here: they are the site values the policies read (data.gotthard.site).
#
# Entry points, on the same input as the policy packages:
#   deny, warn                  the pod admission decision (Pod-shaped input)
#   verdict_<policy>            {"deny": [...], "warn": [...]} of each policy
# Operation: a Pod-shaped input may carry "review": {"operation", "kind", "old"} (the
# AdmissionReview it came from). DELETE and CONNECT are allowed; an UPDATE of an existing
# Pod is judged as Pod Security admission judges it: the PSS rules apply only when the
# update changes a container image or adds/removes containers, or when its old object is
# absent or unreadable (pod templates of workloads are always checked).
package gotthard.decision

import rego.v1

import data.gotthard.constrain.context
import data.gotthard.constrain.images_changed
import data.gotthard.constrain.split

review := object.get(input, "review", {})

# An UPDATE is insignificant only when its old object is readable (Python puts it in
# review.old only then: a pod spec with a container list) and no image or container list
# changed; an UPDATE whose old object is absent or unreadable is judged in full (fail
# closed). Other operations never read it.
significant_update := images_changed(object.get(input, "spec", null), old.spec) if {
	object.get(review, "operation", "") == "UPDATE"
	old := object.get(review, "old", null)
	is_object(old)
	is_object(old.spec)
	is_array(old.spec.containers)
} else := true

ctx := context(object.get(input, "metadata", {}), review, significant_update) if {
	is_object(input)
} else := context({}, {}, false)

deny := verdict_pod.deny

warn := verdict_pod.warn

verdict_pod := split(data.gotthard.admission.pod.deny, ctx)

verdict_storageclass := split(data.gotthard.admission.storageclass.deny, ctx)

verdict_mesh := split(data.gotthard.mesh.deny, ctx)

verdict_slurm_quota := split(data.gotthard.slurm.quota.deny, ctx)

verdict_kube_bench := split(data.gotthard.kube_bench.deny, ctx)
