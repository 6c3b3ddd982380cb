# The object under admission review as the pod policy's input: the Rego twin of the
# dispatch `gotthard policy eval` does in Python (engine.py: unwrap, _pod_from_workload,
# review_doc). Used by the OPA bundle's webhook (input: an AdmissionReview) and, with
# input.request re-targeted to input.review, by the Gatekeeper templates.
package gotthard.review

import rego.v1

object_or_empty(x) := x if is_object(x)

else := {}

request := object_or_empty(input.request)

obj := object_or_empty(object.get(request, "object", {}))

kind := object.get(obj, "kind", "")

operation := upper(object.get(request, "operation", "CREATE")) if is_string(object.get(request, "operation", null))

else := "CREATE"

# The kinds the pod policy judges, and the path of the pod spec in each.
pod_kinds := {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}

spec_path("Pod") := ["spec"]

spec_path("CronJob") := ["spec", "jobTemplate", "spec", "template", "spec"]

spec_path(k) := ["spec", "template", "spec"] if not k in {"Pod", "CronJob"}

is_pod_object if kind in pod_kinds

pod_shaped(o, ns) := {
	"kind": "Pod",
	"metadata": object.union(
		{
			"name": object.get(object_or_empty(object.get(o, "metadata", {})), "name", "<unnamed>"),
			"namespace": ns,
		},
		template_annotations(o),
	),
	"spec": object.get(o, spec_path(object.get(o, "kind", "")), null),
}

# The pod's own annotations (AppArmor profiles) are those of the pod template: the
# metadata beside the pod spec (a Pod's own metadata), when it has the key.
template_metadata_path(k) := array.concat(array.slice(spec_path(k), 0, count(spec_path(k)) - 1), ["metadata"])

template_annotations(o) := {"annotations": value} if {
	meta := object.get(o, template_metadata_path(object.get(o, "kind", "")), null)
	is_object(meta)
	some key, value in meta
	key == "annotations"
} else := {}

metadata := object_or_empty(object.get(obj, "metadata", {}))

# As `policy eval`: the object's namespace, else the request's, else "default".
request_namespace := ns if {
	ns := object.get(request, "namespace", null)
	ns
	ns != ""
} else := "default"

namespace := object.get(metadata, "namespace", request_namespace)

old := object.get(request, "oldObject", null)

object_or_null(x) if is_object(x)

object_or_null(null)

# The old object's pod spec at the path of its own kind (as `policy eval` reads it), only
# when it is readable: an object with a container list. An UPDATE whose old object is
# absent or unreadable is judged in full (fail closed).
old_spec := spec if {
	is_object(old)
	object_or_null(object.get(old, "metadata", null))
	spec := object.get(old, spec_path(object.get(old, "kind", "")), null)
	is_object(spec)
	is_array(spec.containers)
}

review_doc := {"operation": operation, "kind": kind, "old": pod_shaped(old, namespace)} if old_spec

else := {"operation": operation, "kind": kind}

pod := object.union(pod_shaped(obj, namespace), {"review": review_doc})

# The constraints' view of the review (constrain.rego context).
ctx := data.gotthard.constrain.context({"namespace": namespace}, review_doc, significant_update)

# Insignificant only with a readable old object and no image or container list changed.
significant_update := data.gotthard.constrain.images_changed(object.get(obj, spec_path(kind), null), old_spec) if {
	operation == "UPDATE"
	old_spec
} else := true
