# Kubernetes admission for pods (and the pod templates of workload controllers).
# Input: a Pod-shaped object {"kind": "Pod", "metadata": {...}, "spec": {...}}; Python
# extracts the pod template from Deployments, Jobs, ... before evaluation.
# Site values: data.gotthard.site.admission; namespace labels and GPU quotas:
# data.gotthard.inventory.namespaces[name].
#
# `deny` holds the violations of every rule: the site's own rules and one rule per Pod
# Security Standards control (POD-PRIV-001 and POD-PSS-B-* for Baseline, POD-PSS-R-* for
# Restricted). Which of them a site enforces is decided outside this package (profiles and
# constraints); rules.yml gives each rule its level, its PSS control and its parameters.
# Violations of container-level rules carry the container's name ("container") and "image".
#
# Fail closed: every field a rule reads is listed in the input shape below; a field that is
# null, of the wrong type or required but absent is denied as POD-INPUT-001, and the rules
# read the input only through guards that never fail on such a field (an undefined value
# must never turn into "no violation").
#
# Cost on regopy (rego-cpp): a call of a user-defined function costs about 0.1 ms, generic
# path walks and collections of large values more, and object.get on a non-object aborts
# the process. The per-field and per-container work below therefore uses references and
# built-in functions only (object.get only on values known to be objects); user functions
# run once per pod or only on rare values. A violation names its container with
# object.get(c, "name", "<unnamed>"): a malformed name is POD-INPUT-001 anyway.
# regopy's sprintf also quotes strings that come from a literal or from concat a second
# time (broken JSON output): messages are built with concat.
package gotthard.admission.pod

import rego.v1

site := data.gotthard.site.admission

container_lists := ["containers", "initContainers", "ephemeralContainers"]

# --- input shape ---------------------------------------------------------------------

# The fields the rules read, by the object that holds them: key -> type, where the type is
# object, array, string, boolean, integer, quantity (a Kubernetes quantity: cpu, memory) or
# count (whole GPUs). Checking an object against its small key -> type map visits only the
# keys it has, so the cost grows with the fields a pod sets, not with env, commands and the
# like; each object is reached by a direct rule below (no generic walk).
root_types := {"metadata": "object", "spec": "object"}

metadata_types := {"name": "string", "namespace": "string", "annotations": "object"}

spec_types := {
	"containers": "array",
	"initContainers": "array",
	"ephemeralContainers": "array",
	"securityContext": "object",
	"hostNetwork": "boolean",
	"hostPID": "boolean",
	"hostIPC": "boolean",
	"hostUsers": "boolean",
	"os": "object",
	"volumes": "array",
}

os_types := {"name": "string"}

# Options that the pod's and each container's securityContext share, and the objects below.
shared_security_types := {
	"runAsNonRoot": "boolean",
	"runAsUser": "integer",
	"windowsOptions": "object",
	"seLinuxOptions": "object",
	"seccompProfile": "object",
	"appArmorProfile": "object",
}

pod_security_types := object.union(shared_security_types, {"sysctls": "array"})

container_security_types := object.union(shared_security_types, {
	"privileged": "boolean",
	"allowPrivilegeEscalation": "boolean",
	"procMount": "string",
	"capabilities": "object",
})

security_object_types := {
	"windowsOptions": {"hostProcess": "boolean"},
	"seLinuxOptions": {"type": "string", "user": "string", "role": "string"},
	"seccompProfile": {"type": "string"},
	"appArmorProfile": {"type": "string"},
	"capabilities": {"add": "array", "drop": "array"},
}

sysctl_types := {"name": "string"}

# A volume's other keys are its source (restricted volume types read the key): objects.
volume_types := {"name": "string", "hostPath": "object"}

host_path_types := {"path": "string"}

container_types := {
	"name": "string",
	"image": "string",
	"restartPolicy": "string",
	"securityContext": "object",
	"resources": "object",
	"ports": "array",
	"livenessProbe": "object",
	"readinessProbe": "object",
	"startupProbe": "object",
	"lifecycle": "object",
}

resources_types := {"limits": "object", "requests": "object"}

limits_types := {"cpu": "quantity", "memory": "quantity"}

port_types := {"hostPort": "integer"}

# Probes and lifecycle hooks ("handlers"), and the actions whose `host` is read.
probe_keys := ["livenessProbe", "readinessProbe", "startupProbe"]

hook_keys := ["postStart", "preStop"]

lifecycle_types := {"postStart": "object", "preStop": "object"}

handler_types := {"httpGet": "object", "tcpSocket": "object"}

action_types := {"host": "string"}

# Keys whose absence cannot be interpreted, by the object that must hold them.
required_keys := {
	"pod": ["spec"],
	"spec": ["containers"],
	"container": ["image"],
	"hostPath": ["path"],
	"seccompProfile": ["type"],
	"appArmorProfile": ["type"],
	"sysctl": ["name"],
}

# The fields as a table, one entry per field: {path, type, required, absent_rule}. In a path
# "*" is any list index or object key, "$containers" any of container_lists and "$gpu" any of
# site.gpu_resources. absent_rule: the rule that denies the field's absence from a pod that
# is otherwise compliant (no absent_rule and not required: absence is compliant). For people
# and for the fail-closed tests (which walk it); the checks below read the maps above.
input_objects := [
	{"path": [], "types": root_types, "required": required_keys.pod},
	{"path": ["metadata"], "types": metadata_types},
	{"path": ["metadata", "annotations"], "types": {"*": "string"}},
	{"path": ["spec"], "types": spec_types, "required": required_keys.spec},
	{"path": ["spec", "os"], "types": os_types},
	{"path": ["spec", "securityContext"], "types": pod_security_types},
	{"path": ["spec", "securityContext", "sysctls"], "types": {"*": "object"}},
	{"path": ["spec", "securityContext", "sysctls", "*"], "types": sysctl_types, "required": required_keys.sysctl},
	{"path": ["spec", "volumes"], "types": {"*": "object"}},
	{"path": ["spec", "volumes", "*"], "types": object.union(volume_types, {"*": "object"})},
	{"path": ["spec", "volumes", "*", "hostPath"], "types": host_path_types, "required": required_keys.hostPath},
	{"path": ["spec", "$containers"], "types": {"*": "object"}},
	{"path": ["spec", "$containers", "*"], "types": container_types, "required": required_keys.container},
	{"path": ["spec", "$containers", "*", "securityContext"], "types": container_security_types},
	{"path": ["spec", "$containers", "*", "securityContext", "capabilities", "add"], "types": {"*": "string"}},
	{"path": ["spec", "$containers", "*", "securityContext", "capabilities", "drop"], "types": {"*": "string"}},
	{"path": ["spec", "$containers", "*", "resources"], "types": resources_types},
	{"path": ["spec", "$containers", "*", "resources", "limits"], "types": object.union(limits_types, {"$gpu": "count"})},
	{"path": ["spec", "$containers", "*", "resources", "requests"], "types": {"$gpu": "count"}},
	{"path": ["spec", "$containers", "*", "ports"], "types": {"*": "object"}},
	{"path": ["spec", "$containers", "*", "ports", "*"], "types": port_types},
	{"path": ["spec", "$containers", "*", "lifecycle"], "types": lifecycle_types},
	{"path": ["spec", "$containers", "*", "securityContext", "capabilities"], "types": security_object_types.capabilities},
]

security_objects := [{"path": array.concat(base, [name]), "types": types, "required": object.get(required_keys, name, [])} |
	some base in [["spec", "securityContext"], ["spec", "$containers", "*", "securityContext"]]
	some name
	types := security_object_types[name]
	name != "capabilities"
]

handler_objects := [entry |
	some handler in array.concat([[key] | some key in probe_keys], [["lifecycle", hook] | some hook in hook_keys])
	handler_path := array.concat(["spec", "$containers", "*"], handler)
	some entry in [
		{"path": handler_path, "types": handler_types},
		{"path": array.concat(handler_path, ["httpGet"]), "types": action_types},
		{"path": array.concat(handler_path, ["tcpSocket"]), "types": action_types},
	]
]

absent_rules := {
	"spec.$containers.*.securityContext": "POD-PSS-R-ESCALATION-001",
	"spec.$containers.*.resources": "POD-RES-001",
	"spec.$containers.*.resources.limits": "POD-RES-001",
	"spec.$containers.*.resources.limits.cpu": "POD-RES-001",
	"spec.$containers.*.resources.limits.memory": "POD-RES-001",
	"spec.$containers.*.resources.limits.$gpu": "POD-GPU-001",
	"spec.$containers.*.securityContext.allowPrivilegeEscalation": "POD-PSS-R-ESCALATION-001",
	"spec.$containers.*.securityContext.capabilities": "POD-PSS-R-CAPS-001",
	"spec.$containers.*.securityContext.capabilities.drop": "POD-PSS-R-CAPS-001",
	"spec.$containers.*.securityContext.capabilities.drop.*": "POD-PSS-R-CAPS-001",
}

input_fields := array.concat([{"path": [], "type": "object", "required": true}], [field |
	some holder in array.concat(input_objects, array.concat(security_objects, handler_objects))
	some key
	type := holder.types[key]
	path := array.concat(holder.path, [key])
	field := object.union(
		{"path": path, "type": type, "required": key in object.get(holder, "required", [])},
		{"absent_rule": rule | rule := absent_rules[concat(".", path)]},
	)
])

# A Kubernetes quantity (cpu "500m", memory "1Gi", "1e3") or a non-negative number.
quantity_pattern := `^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$`

# The JSON type (type_name) of each field type; integer, quantity and count are checked
# further by their own rules.
json_type := {
	"object": "object",
	"array": "array",
	"string": "string",
	"boolean": "boolean",
	"integer": "number",
}

# Fields present with a value of the wrong type (null included): [path, expected type].
# Direct rules per level of the pod and of each container, each checking the keys an object
# has against its key -> type map.
malformed contains [[], "object"] if not is_object(input)

malformed contains [[key], type] if {
	some key, value in doc
	type := root_types[key]
	type_name(value) != json_type[type]
}

# Objects below the pod and below each container, by their path: the key -> type map of
# each, one level per map. The rules iterate these small maps and read the input only at
# their paths.
pod_children := {"metadata": metadata_types, "spec": spec_types}

pod_grandchildren := {"spec": {"os": os_types, "securityContext": pod_security_types}}

pod_great_grandchildren := {"spec": {"securityContext": security_object_types}}

handler_actions := {"httpGet": action_types, "tcpSocket": action_types}

container_children := {
	"securityContext": container_security_types,
	"resources": resources_types,
	"lifecycle": lifecycle_types,
	"livenessProbe": handler_types,
	"readinessProbe": handler_types,
	"startupProbe": handler_types,
}

container_grandchildren := {
	"securityContext": security_object_types,
	"lifecycle": {"postStart": handler_types, "preStop": handler_types},
	"livenessProbe": handler_actions,
	"readinessProbe": handler_actions,
	"startupProbe": handler_actions,
}

container_great_grandchildren := {"lifecycle": {"postStart": handler_actions, "preStop": handler_actions}}

malformed contains [[k1, key], type] if {
	some k1, types in pod_children
	some key, value in doc[k1]
	type := types[key]
	type_name(value) != json_type[type]
}

malformed contains [[k1, k2, key], type] if {
	some k1, children in pod_grandchildren
	some k2, types in children
	some key, value in doc[k1][k2]
	type := types[key]
	type_name(value) != json_type[type]
}

malformed contains [[k1, k2, k3, key], type] if {
	some k1, children in pod_great_grandchildren
	some k2, grandchildren in children
	some k3, types in grandchildren
	some key, value in doc[k1][k2][k3]
	type := types[key]
	type_name(value) != json_type[type]
}

malformed contains [["metadata", "annotations", key], "string"] if {
	some key, value in annotations
	not is_string(value)
}

malformed contains [["spec", "securityContext", "runAsUser"], "integer"] if {
	value := pod_security.runAsUser
	is_number(value)
	value != floor(value)
}

malformed contains [["spec", "securityContext", "sysctls", i], "object"] if {
	some i, sysctl in sysctls
	not is_object(sysctl)
}

malformed contains [["spec", "securityContext", "sysctls", i, key], type] if {
	some i, sysctl in sysctls
	some key, value in sysctl
	type := sysctl_types[key]
	type_name(value) != json_type[type]
}

malformed contains [["spec", "volumes", i], "object"] if {
	some i, volume in volume_list
	not is_object(volume)
}

# A volume's keys other than name and hostPath are its source: an object.
malformed contains [["spec", "volumes", i, key], type] if {
	some i, volume in volume_list
	is_object(volume)
	some key, value in volume
	type := object.get(volume_types, key, "object")
	type_name(value) != type
}

malformed contains [["spec", "volumes", i, "hostPath", key], type] if {
	some i, volume in volume_list
	some key, value in volume.hostPath
	type := host_path_types[key]
	type_name(value) != json_type[type]
}

malformed contains [["spec", name, i], "object"] if {
	some name in container_lists
	is_array(spec[name])
	some i, c in spec[name]
	not is_object(c)
}

malformed contains [["spec", group, position, key], type] if {
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some key, value in c
	type := container_types[key]
	type_name(value) != json_type[type]
}

malformed contains [["spec", group, position, k1, key], type] if {
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some k1, types in container_children
	some key, value in c[k1]
	type := types[key]
	type_name(value) != json_type[type]
}

malformed contains [["spec", group, position, k1, k2, key], type] if {
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some k1, children in container_grandchildren
	some k2, types in children
	some key, value in c[k1][k2]
	type := types[key]
	type_name(value) != json_type[type]
}

malformed contains [["spec", group, position, k1, k2, k3, key], type] if {
	"lifecycle" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some k1, children in container_great_grandchildren
	some k2, grandchildren in children
	some k3, types in grandchildren
	some key, value in c[k1][k2][k3]
	type := types[key]
	type_name(value) != json_type[type]
}

malformed contains [["spec", group, position, "securityContext", "runAsUser"], "integer"] if {
	"runAsUser" in security_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	value := c.securityContext.runAsUser
	is_number(value)
	value != floor(value)
}

malformed contains [["spec", group, position, "securityContext", "capabilities", name, i], "string"] if {
	"capabilities" in security_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some name in ["add", "drop"]
	list := c.securityContext.capabilities[name]
	is_array(list)
	some i, value in list
	not is_string(value)
}

# cpu and memory limits are quantities, GPUs whole numbers. The common forms (digits and a
# known suffix) are checked with string built-ins; only other strings go through the regular
# expression (regex.match costs about 0.3 ms a call on regopy).
malformed contains [["spec", group, position, "resources", "limits", key], "quantity"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some key in ["cpu", "memory"]
	value := c.resources.limits[key]
	not type_name(value) in {"number", "string"}
}

malformed contains [["spec", group, position, "resources", "limits", key], "quantity"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some key in ["cpu", "memory"]
	value := c.resources.limits[key]
	is_number(value)
	value < 0
}

malformed contains [["spec", group, position, "resources", "limits", key], "quantity"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some key in ["cpu", "memory"]
	value := c.resources.limits[key]
	is_string(value)
	not trim_left(value, digits) in quantity_suffixes
	not regex.match(quantity_pattern, value)
}

malformed contains [["spec", group, position, "resources", "limits", key], "quantity"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some key in ["cpu", "memory"]
	value := c.resources.limits[key]
	is_string(value)
	trim_left(value, digits) == value
	not regex.match(quantity_pattern, value)
}

malformed contains [["spec", group, position, "resources", kind, gpu], "count"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some kind in ["limits", "requests"]
	some gpu in site.gpu_resources
	value := c.resources[kind][gpu]
	not type_name(value) in {"number", "string"}
}

malformed contains [["spec", group, position, "resources", kind, gpu], "count"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some kind in ["limits", "requests"]
	some gpu in site.gpu_resources
	value := c.resources[kind][gpu]
	is_number(value)
	value < 0
}

malformed contains [["spec", group, position, "resources", kind, gpu], "count"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some kind in ["limits", "requests"]
	some gpu in site.gpu_resources
	value := c.resources[kind][gpu]
	is_number(value)
	value != floor(value)
}

malformed contains [["spec", group, position, "resources", kind, gpu], "count"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some kind in ["limits", "requests"]
	some gpu in site.gpu_resources
	value := c.resources[kind][gpu]
	is_string(value)
	trim_left(value, digits) != ""
}

malformed contains [["spec", group, position, "resources", kind, gpu], "count"] if {
	"resources" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some kind in ["limits", "requests"]
	some gpu in site.gpu_resources
	value := c.resources[kind][gpu]
	value == ""
}

digits := "0123456789"

quantity_suffixes := {"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}

malformed contains [["spec", group, position, "ports", i], "object"] if {
	"ports" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	is_array(c.ports)
	some i, port in c.ports
	not is_object(port)
}

malformed contains [["spec", group, position, "ports", i, "hostPort"], "integer"] if {
	"ports" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	is_array(c.ports)
	some i, port in c.ports
	value := port.hostPort
	not is_number(value)
}

malformed contains [["spec", group, position, "ports", i, "hostPort"], "integer"] if {
	"ports" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	is_array(c.ports)
	some i, port in c.ports
	value := port.hostPort
	is_number(value)
	value != floor(value)
}

# The keys that some container sets, and that some container's securityContext sets: a
# rule about a key no container sets is skipped without visiting the containers.
container_keys := {key |
	some group in container_lists
	some c in spec[group]
	some key
	_ = c[key]
}

security_keys := {key |
	"securityContext" in container_keys
	some group in container_lists
	some c in spec[group]
	some key
	_ = c.securityContext[key]
}

container_probes if {
	some probe in probe_keys
	probe in container_keys
}

# A value no input can hold: object.get's default for "not there".
not_there := {"gotthard.absent": "not there"}

# Required fields whose parent object is there but the field is not.
absent contains [key] if {
	is_object(input)
	some key in required_keys.pod
	object.get(input, key, not_there) == not_there
}

absent contains ["spec", key] if {
	is_object(input.spec)
	some key in required_keys.spec
	object.get(input.spec, key, not_there) == not_there
}

absent contains ["spec", group, position, key] if {
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some key in required_keys.container
	is_object(c)
	object.get(c, key, not_there) == not_there
}

absent contains ["spec", "volumes", i, "hostPath", key] if {
	some i, volume in volume_list
	is_object(volume.hostPath)
	some key in required_keys.hostPath
	object.get(volume.hostPath, key, not_there) == not_there
}

absent contains ["spec", "securityContext", "sysctls", i, key] if {
	some i, sysctl in sysctls
	is_object(sysctl)
	some key in required_keys.sysctl
	object.get(sysctl, key, not_there) == not_there
}

absent contains ["spec", "securityContext", name, key] if {
	some name in ["seccompProfile", "appArmorProfile"]
	is_object(pod_security[name])
	some key in required_keys[name]
	object.get(pod_security[name], key, not_there) == not_there
}

absent contains ["spec", group, position, "securityContext", name, key] if {
	"securityContext" in container_keys
	some group in container_lists
	some position, c in spec[group]
	is_object(c)
	some name in ["seccompProfile", "appArmorProfile"]
	is_object(c.securityContext[name])
	some key in required_keys[name]
	object.get(c.securityContext[name], key, not_there) == not_there
}

# Field paths for people: spec.containers[0].resources.limits[nvidia.com/gpu].
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
	spec.containers == []
	msg := concat("", ["pod ", pod_name, ": spec.containers is empty"])
}

type_text := {
	"object": "an object",
	"array": "a list",
	"string": "a string",
	"boolean": "true or false",
	"integer": "a whole number",
	"quantity": "a quantity (a number or a string such as 500m or 1Gi)",
	"count": "a whole number (a non-negative integer or a string of digits)",
}

# --- the pod, read once: a malformed field reads as absent (POD-INPUT-001 denies it) ---

doc := input if is_object(input)

else := {}

metadata := doc.metadata if is_object(doc.metadata)

else := {}

spec := doc.spec if is_object(doc.spec)

else := {}

annotations := metadata.annotations if is_object(metadata.annotations)

else := {}

pod_security := spec.securityContext if is_object(spec.securityContext)

else := {}

sysctls := pod_security.sysctls if is_array(pod_security.sysctls)

else := []

volume_list := spec.volumes if is_array(spec.volumes)

else := []

namespace := metadata.namespace if is_string(metadata.namespace)

else := "default"

pod_name := metadata.name if is_string(metadata.name)

else := "<unnamed>"

# A volume's name for messages (its index when it has none).
volume_name(v, index) := v.name if is_string(v.name)

else := sprintf("%d", [index])

windows_pod if spec.os.name == "windows"

# hostUsers: false runs the pod in a user namespace (Kubernetes 1.35+ relaxes some checks).
user_namespaces if spec.hostUsers == false
