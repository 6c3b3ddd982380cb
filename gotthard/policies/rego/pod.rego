# Kubernetes admission for pods (and the pod templates of workload controllers).
# Input: a Pod-shaped object {"kind": "Pod", "metadata": {...}, "spec": {...}}; Python
# extracts the pod template from Deployments, Jobs, ... before evaluation.
# Site values: data.gotthard.site.admission; namespace labels and GPU quotas:
# data.gotthard.inventory.namespaces[name].
#
# Fail closed: every field a rule reads is listed in `input_fields`; a field that is null,
# of the wrong type or required but absent is denied as POD-INPUT-001, and the rules read
# the input only through accessors that never fail on such a field (an undefined value
# must never turn into "no violation").
package gotthard.admission.pod

import rego.v1

site := data.gotthard.site.admission

# --- input shape ---------------------------------------------------------------------

# The fields the rules read. path: keys from the pod; "*" is any list index, "$containers"
# any of container_lists, "$gpu" any of site.gpu_resources. type: object, array, string,
# boolean, quantity (a Kubernetes quantity: cpu, memory) or count (whole GPUs).
# required: absence cannot be interpreted (POD-INPUT-001). absent_rule: the rule that
# denies the field's absence from a pod that is otherwise compliant (the tests use it; no
# absent_rule and not required means absence is compliant).
input_fields := [
	{"path": [], "type": "object", "required": true},
	{"path": ["metadata"], "type": "object", "required": false},
	{"path": ["metadata", "name"], "type": "string", "required": false},
	{"path": ["metadata", "namespace"], "type": "string", "required": false},
	{"path": ["spec"], "type": "object", "required": true},
	{"path": ["spec", "containers"], "type": "array", "required": true},
	{"path": ["spec", "initContainers"], "type": "array", "required": false},
	{"path": ["spec", "ephemeralContainers"], "type": "array", "required": false},
	{"path": ["spec", "$containers", "*"], "type": "object", "required": false},
	{"path": ["spec", "$containers", "*", "name"], "type": "string", "required": false},
	{"path": ["spec", "$containers", "*", "image"], "type": "string", "required": true},
	{"path": ["spec", "$containers", "*", "securityContext"], "type": "object", "required": false},
	{"path": ["spec", "$containers", "*", "securityContext", "privileged"], "type": "boolean", "required": false},
	{"path": ["spec", "$containers", "*", "securityContext", "runAsNonRoot"], "type": "boolean", "required": false},
	{"path": ["spec", "$containers", "*", "resources"], "type": "object", "required": false, "absent_rule": "POD-RES-001"},
	{"path": ["spec", "$containers", "*", "resources", "limits"], "type": "object", "required": false, "absent_rule": "POD-RES-001"},
	{"path": ["spec", "$containers", "*", "resources", "limits", "cpu"], "type": "quantity", "required": false, "absent_rule": "POD-RES-001"},
	{"path": ["spec", "$containers", "*", "resources", "limits", "memory"], "type": "quantity", "required": false, "absent_rule": "POD-RES-001"},
	{"path": ["spec", "$containers", "*", "resources", "limits", "$gpu"], "type": "count", "required": false, "absent_rule": "POD-GPU-001"},
	{"path": ["spec", "$containers", "*", "resources", "requests"], "type": "object", "required": false},
	{"path": ["spec", "$containers", "*", "resources", "requests", "$gpu"], "type": "count", "required": false},
	{"path": ["spec", "$containers", "*", "restartPolicy"], "type": "string", "required": false},
	{"path": ["spec", "securityContext"], "type": "object", "required": false},
	{"path": ["spec", "securityContext", "runAsNonRoot"], "type": "boolean", "required": false},
	{"path": ["spec", "hostNetwork"], "type": "boolean", "required": false},
	{"path": ["spec", "volumes"], "type": "array", "required": false},
	{"path": ["spec", "volumes", "*"], "type": "object", "required": false},
	{"path": ["spec", "volumes", "*", "hostPath"], "type": "object", "required": false},
	{"path": ["spec", "volumes", "*", "hostPath", "path"], "type": "string", "required": true},
]

container_lists := ["containers", "initContainers", "ephemeralContainers"]

# Where the table's fields are found. A field is either at a fixed path from the pod, or
# below an element of a list ("spec", LIST, "*", ...): LIST is a container list
# ("$containers") or "volumes", and "$gpu" appears only as the last segment. The rules
# below are written for that shape (regopy is slow on generic per-segment code).
item_field(field) if {
	count(field.path) >= 3
	field.path[2] == "*"
}

# A value no input can hold: object.get's default for "not there".
not_there := {"gotthard.absent": "not there"}

# Whether `rel` leads to a value below `item` (null counts as a value: it is malformed).
present_below(_, rel) if count(rel) == 0

present_below(item, rel) if {
	count(rel) > 0
	is_object(item)
	object.get(item, rel, not_there) != not_there
}

# The list names a group in the table stands for.
group_lists := {"$containers": container_lists, "volumes": ["volumes"]}

# The element paths below spec of the lists a list field's pattern names: [name, index].
# Paths, not values: regopy is slow on binding large values such as whole containers.
field_elements(field) := [[name, i] |
	some name in group_lists[field.path[1]]
	size := count(as_array(object.get(spec, [name], null)))
	size > 0 # numbers.range(0, -1) is [0, -1]
	some i in numbers.range(0, size - 1)
]

# A list field's path below its element, "$gpu" replaced by each GPU resource.
relative_paths(field) := [array.slice(field.path, 3, count(field.path))] if {
	field.path[count(field.path) - 1] != "$gpu"
}

relative_paths(field) := [rel |
	some gpu in site.gpu_resources
	rel := array.concat(array.slice(field.path, 3, count(field.path) - 1), [gpu])
] if {
	field.path[count(field.path) - 1] == "$gpu"
}

# A Kubernetes quantity (cpu "500m", memory "1Gi", "1e3") or a non-negative number.
quantity_pattern := `^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$`

has_type(v, "object") if is_object(v)

has_type(v, "array") if is_array(v)

has_type(v, "string") if is_string(v)

has_type(v, "boolean") if is_boolean(v)

has_type(v, "quantity") if {
	is_number(v)
	v >= 0
}

has_type(v, "quantity") if {
	is_string(v)
	regex.match(quantity_pattern, v)
}

has_type(v, "count") if {
	is_number(v)
	v >= 0
	v == floor(v)
}

has_type(v, "count") if {
	is_string(v)
	regex.match(`^[0-9]+$`, v)
}

has_key(obj, key) if _ = obj[key]

# Fields present with a value of the wrong type (null included): [path, expected type].
# Only the table's fields are visited, so the cost does not grow with env, probes and the
# like; the sets hold violations only (regopy is slow on large sets of compound terms).
malformed contains [field.path, field.type] if {
	some field in input_fields
	not item_field(field)
	present_below(input, field.path)
	not has_type(object.get(input, field.path, null), field.type)
}

malformed contains [path, field.type] if {
	some field in input_fields
	item_field(field)
	some rel in relative_paths(field)
	some element in field_elements(field)
	value := object.get(spec, array.concat(element, rel), not_there)
	value != not_there
	not has_type(value, field.type)
	path := array.concat(["spec"], array.concat(element, rel))
}

# Required fields whose parent object is there but the field is not.
absent contains field.path if {
	some field in input_fields
	field.required
	not item_field(field)
	count(field.path) > 0
	parent := object.get(input, array.slice(field.path, 0, count(field.path) - 1), null)
	is_object(parent)
	not has_key(parent, field.path[count(field.path) - 1])
}

absent contains path if {
	some field in input_fields
	field.required
	item_field(field)
	count(field.path) > 3
	rel := array.slice(field.path, 3, count(field.path) - 1)
	key := field.path[count(field.path) - 1]
	some element in field_elements(field)
	parent_path := array.concat(element, rel)
	is_object(object.get(spec, parent_path, null))
	not has_key(object.get(spec, parent_path, null), key)
	path := array.concat(["spec"], array.concat(parent_path, [key]))
}

# Field paths for people: spec.containers[0].resources.limits[nvidia.com/gpu]. Messages are
# built with concat: regopy's sprintf quotes a concat result a second time (broken JSON).
path_text(path) := "input" if count(path) == 0

path_text(path) := concat("", [text | some i in numbers.range(0, count(path) - 1); text := segment_text(i, path[i])]) if count(path) > 0

plain_key := `^[A-Za-z_][A-Za-z0-9_]*$`

segment_text(_, key) := sprintf("[%v]", [key]) if is_number(key)

segment_text(0, key) := key if {
	is_string(key)
	regex.match(plain_key, key)
}

segment_text(i, key) := concat("", [".", key]) if {
	i > 0
	is_string(key)
	regex.match(plain_key, key)
}

segment_text(_, key) := concat("", ["[", key, "]"]) if {
	is_string(key)
	not regex.match(plain_key, key)
}

# POD-INPUT-001: a field the rules read cannot be interpreted; the pod is denied.
deny contains {"rule": "POD-INPUT-001", "message": msg} if {
	some bad in malformed
	msg := concat("", ["pod ", pod_name, ": ", path_text(bad[0]), " must be ", type_text[bad[1]]])
}

deny contains {"rule": "POD-INPUT-001", "message": msg} if {
	some path in absent
	msg := concat("", ["pod ", pod_name, ": ", path_text(path), " is required"])
}

deny contains {"rule": "POD-INPUT-001", "message": msg} if {
	is_array(spec.containers)
	count(spec.containers) == 0
	msg := concat("", ["pod ", pod_name, ": spec.containers is empty"])
}

type_text := {
	"object": "an object",
	"array": "a list",
	"string": "a string",
	"boolean": "true or false",
	"quantity": "a quantity (a number or a string such as 500m or 1Gi)",
	"count": "a whole number (a non-negative integer or a string of digits)",
}

# --- safe accessors: a malformed field reads as absent (POD-INPUT-001 denies it) -------

as_object(x) := x if is_object(x)

else := {}

as_array(x) := x if is_array(x)

else := []

as_string(x, default_value) := x if is_string(x)

else := default_value

doc := as_object(input)

metadata := as_object(object.get(doc, "metadata", {}))

spec := as_object(object.get(doc, "spec", {}))

namespace := as_string(object.get(metadata, "namespace", "default"), "default")

pod_name := as_string(object.get(metadata, "name", "<unnamed>"), "<unnamed>")

container_list(name) := [c | some c in as_array(object.get(spec, name, [])); is_object(c)]

containers contains c if {
	some name in container_lists
	some c in container_list(name)
}

container_name(c) := as_string(object.get(c, "name", "<unnamed>"), "<unnamed>")

security_context(c) := as_object(object.get(c, "securityContext", {}))

# --- rules ---------------------------------------------------------------------------

# POD-PRIV-001: no privileged containers.
deny contains {"rule": "POD-PRIV-001", "message": msg} if {
	some c in containers
	object.get(security_context(c), "privileged", false) == true
	msg := sprintf("pod %s: container %s is privileged", [pod_name, container_name(c)])
}

# POD-HOSTPATH-001: hostPath volumes only under allow-listed paths.
hostpath_allowed(path) if {
	some allowed in site.hostpath_allowlist
	path == allowed
}

hostpath_allowed(path) if {
	some allowed in site.hostpath_allowlist
	startswith(path, concat("", [trim_right(allowed, "/"), "/"]))
}

deny contains {"rule": "POD-HOSTPATH-001", "message": msg} if {
	some v in as_array(object.get(spec, "volumes", []))
	path := object.get(as_object(object.get(as_object(v), "hostPath", {})), "path", null)
	is_string(path)
	not hostpath_allowed(path)
	msg := sprintf("pod %s: hostPath %s is not allow-listed", [pod_name, path])
}

# POD-HOSTNET-001: hostNetwork only in namespaces labelled for MPI/NCCL workloads.
namespace_inventory := as_object(object.get(as_object(object.get(data.gotthard.inventory, "namespaces", {})), namespace, {}))

namespace_labels := as_object(object.get(namespace_inventory, "labels", {}))

hostnetwork_namespace if {
	value := namespace_labels[site.hostnetwork_label.key]
	value in site.hostnetwork_label.values
}

deny contains {"rule": "POD-HOSTNET-001", "message": msg} if {
	object.get(spec, "hostNetwork", false) == true
	not hostnetwork_namespace
	msg := sprintf("pod %s: hostNetwork in namespace %s, which is not labelled %s for MPI/NCCL", [pod_name, namespace, site.hostnetwork_label.key])
}

# POD-GPU-001: GPU requests equal limits.
resource(c, kind, name) := object.get(as_object(object.get(as_object(object.get(c, "resources", {})), kind, {})), name, null)

# Whole GPUs of one container's requests or limits: 0 when absent, undefined when malformed.
gpus(c, kind, gpu) := 0 if resource(c, kind, gpu) == null

else := to_number(value) if {
	value := resource(c, kind, gpu)
	has_type(value, "count")
}

deny contains {"rule": "POD-GPU-001", "message": msg} if {
	some c in containers
	some gpu in site.gpu_resources
	request := resource(c, "requests", gpu)
	request != null
	gpus(c, "requests", gpu) != gpus(c, "limits", gpu)
	msg := sprintf("pod %s: container %s requests %v %s but its limit differs", [pod_name, container_name(c), request, gpu])
}

# POD-GPU-002: the pod's GPUs stay within the namespace's quota.
# A container is charged the larger of its GPU request and limit (they differ only in a pod
# POD-GPU-001 denies). Kubernetes charges a pod max(sum of app containers + sidecars,
# each init container + the sidecars started before it); init containers run one at a time,
# sidecars (init containers with restartPolicy Always) keep running.
charged_gpus(c, gpu) := max([gpus(c, "requests", gpu), gpus(c, "limits", gpu)])

container_gpus(c) := sum([n | some gpu in site.gpu_resources; n := charged_gpus(c, gpu)])

init_containers := container_list("initContainers")

sidecar(c) if object.get(c, "restartPolicy", null) == "Always"

sidecar_gpus_before(i) := sum([container_gpus(c) |
	some j
	c := init_containers[j]
	j < i
	sidecar(c)
])

running_gpus := sum([container_gpus(c) | some c in container_list("containers")]) + sidecar_gpus_before(count(init_containers))

init_peaks contains container_gpus(c) + sidecar_gpus_before(i) if {
	some i
	c := init_containers[i]
	not sidecar(c)
}

pod_gpus := max(init_peaks | {running_gpus})

gpu_quota := object.get(namespace_inventory, "gpu_quota", site.default_gpu_quota)

gpus_used := object.get(namespace_inventory, "gpus_used", 0)

deny contains {"rule": "POD-GPU-002", "message": msg} if {
	pod_gpus > 0
	pod_gpus + gpus_used > gpu_quota
	msg := sprintf("pod %s: %v GPUs (+%v in use) exceed the quota of %v in namespace %s", [pod_name, pod_gpus, gpus_used, gpu_quota, namespace])
}

# POD-IMG-001: images only from allowed registries.
registry_allowed(image) if {
	some prefix in site.allowed_registries
	startswith(image, concat("", [trim_right(prefix, "/"), "/"]))
}

images contains [container_name(c), image] if {
	some c in containers
	image := object.get(c, "image", null)
	is_string(image)
}

deny contains {"rule": "POD-IMG-001", "message": msg} if {
	some entry in images
	name := entry[0]
	image := entry[1]
	not registry_allowed(image)
	msg := sprintf("pod %s: container %s image %s is not from an allowed registry", [pod_name, name, image])
}

# POD-IMG-002: no ':latest' and no untagged images (a digest pins the image).
last_segment(image) := parts[count(parts) - 1] if parts := split(image, "/")

image_tag(image) := tag if {
	not contains(image, "@")
	seg := last_segment(image)
	contains(seg, ":")
	parts := split(seg, ":")
	tag := parts[count(parts) - 1]
}

unpinned(image) if {
	not contains(image, "@")
	not contains(last_segment(image), ":")
}

unpinned(image) if image_tag(image) == "latest"

deny contains {"rule": "POD-IMG-002", "message": msg} if {
	some entry in images
	name := entry[0]
	image := entry[1]
	unpinned(image)
	msg := sprintf("pod %s: container %s image %s is untagged or :latest", [pod_name, name, image])
}

# POD-SEC-001: runAsNonRoot, set on the pod or on every container (the container wins).
pod_non_root := object.get(as_object(object.get(spec, "securityContext", {})), "runAsNonRoot", false)

deny contains {"rule": "POD-SEC-001", "message": msg} if {
	some c in containers
	object.get(security_context(c), "runAsNonRoot", pod_non_root) != true
	msg := sprintf("pod %s: container %s does not set runAsNonRoot", [pod_name, container_name(c)])
}

# POD-RES-001: cpu and memory limits on every container.
deny contains {"rule": "POD-RES-001", "message": msg} if {
	some c in containers
	some r in ["cpu", "memory"]
	resource(c, "limits", r) == null
	msg := sprintf("pod %s: container %s has no %s limit", [pod_name, container_name(c), r])
}
