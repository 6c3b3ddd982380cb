# The fail-closed shape checks of the pod policy and POD-INPUT-001 (package
# gotthard.admission.pod): every field of the input shape (pod_input.rego) that is present
# with a value of the wrong type, and every required field that is absent, denies the pod.
#
# The embedded engine (`gotthard policy eval`) does not evaluate this module: it compiles
# the same shape, the table input_fields (pod_fields.rego), once into a check that visits
# the input in one pass (gotthard/policies/shape.py), and hands the violations to the
# policy with the input. The OPA server, the OPA bundle and the Gatekeeper templates
# evaluate this module; the tests compare both on every table case, the fail-closed sweep
# and fuzzed pods.
package gotthard.admission.pod

import rego.v1

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
	want := json_type[type]
	not type_name(value) == want
}

# Objects below the pod and below each container, by their path: the key -> type map of
# each, one level per map. The rules iterate these small maps and read the input only at
# their paths.
pod_children := {"metadata": metadata_types, "spec": spec_types}

pod_grandchildren := {"spec": {"os": os_types, "securityContext": pod_security_types}}

# (the pod's securityContext has no capabilities)
pod_great_grandchildren := {"spec": {"securityContext": object.remove(security_object_types, ["capabilities"])}}

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
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [[k1, k2, key], type] if {
	some k1, children in pod_grandchildren
	some k2, types in children
	some key, value in doc[k1][k2]
	type := types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [[k1, k2, k3, key], type] if {
	some k1, children in pod_great_grandchildren
	some k2, grandchildren in children
	some k3, types in grandchildren
	some key, value in doc[k1][k2][k3]
	type := types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["metadata", "annotations", key], "string"] if {
	some key, value in annotations
	not is_string(value)
}

malformed contains [["spec", "securityContext", key], "integer"] if {
	some key in integer_security_keys
	value := pod_security[key]
	is_number(value)
	not value == floor(value)
}

malformed contains [["spec", "securityContext", "supplementalGroups", i], "integer"] if {
	groups := pod_security.supplementalGroups
	is_array(groups)
	some i, value in groups
	not whole_number(value)
}

whole_number(value) if {
	is_number(value)
	value == floor(value)
}

malformed contains [["spec", "securityContext", "sysctls", i], "object"] if {
	some i, sysctl in sysctls
	not is_object(sysctl)
}

malformed contains [["spec", "securityContext", "sysctls", i, key], type] if {
	some i, sysctl in sysctls
	some key, value in sysctl
	type := sysctl_types[key]
	want := json_type[type]
	not type_name(value) == want
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
	not type_name(value) == type
}

malformed contains [["spec", "volumes", i, "hostPath", key], type] if {
	some i, volume in volume_list
	some key, value in volume.hostPath
	type := host_path_types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["spec", "volumes", i, "flexVolume", key], type] if {
	some i, volume in volume_list
	some key, value in volume.flexVolume
	type := flex_volume_types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["spec", name, i], "object"] if {
	some name in container_lists
	is_array(spec[name])
	some i, c in spec[name]
	not is_object(c)
}

malformed contains [["spec", group, position, key], type] if {
	some group in container_lists
	some position, c in containers_in[group]
	some key, value in c
	type := container_types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["spec", group, position, k1, key], type] if {
	some group in container_lists
	some position, c in containers_in[group]
	some k1, types in container_children
	some key, value in c[k1]
	type := types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["spec", group, position, k1, k2, key], type] if {
	some group in container_lists
	some position, c in containers_in[group]
	some k1, children in container_grandchildren
	some k2, types in children
	some key, value in c[k1][k2]
	type := types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["spec", group, position, k1, k2, k3, key], type] if {
	container_keys.lifecycle
	some group in container_lists
	some position, c in containers_in[group]
	some k1, children in container_great_grandchildren
	some k2, grandchildren in children
	some k3, types in grandchildren
	some key, value in c[k1][k2][k3]
	type := types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["spec", group, position, "securityContext", key], "integer"] if {
	some key in integer_security_keys
	security_keys[key]
	some group in container_lists
	some position, c in containers_in[group]
	value := c.securityContext[key]
	is_number(value)
	not value == floor(value)
}

malformed contains [["spec", group, position, "securityContext", "capabilities", name, i], "string"] if {
	security_keys.capabilities
	some group in container_lists
	some position, c in containers_in[group]
	some name in ["add", "drop"]
	list := c.securityContext.capabilities[name]
	is_array(list)
	some i, value in list
	not is_string(value)
}

# cpu and memory limits are quantities, GPUs whole numbers: one rule each, with the forms
# as functions. The common forms (digits and a known suffix) are recognised with string
# built-ins; only other strings go through the regular expression (regex.match is one of
# the dearest built-ins on regopy).
malformed contains [["spec", group, position, "resources", kind, key], "quantity"] if {
	container_keys.resources
	some group in container_lists
	some position, c in containers_in[group]
	some kind in ["limits", "requests"]
	some key in ["cpu", "memory"]
	value := c.resources[kind][key]
	not quantity(value)
}

quantity(value) if {
	is_number(value)
	value >= 0
}

quantity(value) if {
	is_string(value)
	quantity_text(value)
}

# (regopy evaluates every body of a function, and compiles the expression on each call:
# the regular expression runs only when the common form does not hold.)
quantity_text(value) if {
	suffix := trim_left(value, digits)
	quantity_suffixes[suffix]
	not suffix == value
} else := regex.match(quantity_pattern, value)

malformed contains [["spec", group, position, "resources", kind, gpu], "count"] if {
	container_keys.resources
	some group in container_lists
	some position, c in containers_in[group]
	some kind in ["limits", "requests"]
	some gpu in site.gpu_resources
	value := c.resources[kind][gpu]
	not gpu_count(value)
}

gpu_count(value) if {
	is_number(value)
	value >= 0
	value == floor(value)
}

gpu_count(value) if {
	is_string(value)
	not value == ""
	trim_left(value, digits) == ""
}

quantity_suffixes := {"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}

malformed contains [["spec", group, position, "ports", i], "object"] if {
	container_keys.ports
	some group in container_lists
	some position, c in containers_in[group]
	is_array(c.ports)
	some i, port in c.ports
	not is_object(port)
}

malformed contains [["spec", group, position, "volumeMounts", i], "object"] if {
	container_keys.volumeMounts
	some group in container_lists
	some position, c in containers_in[group]
	is_array(c.volumeMounts)
	some i, mount in c.volumeMounts
	not is_object(mount)
}

malformed contains [["spec", group, position, "volumeMounts", i, key], type] if {
	container_keys.volumeMounts
	some group in container_lists
	some position, c in containers_in[group]
	is_array(c.volumeMounts)
	some i, mount in c.volumeMounts
	some key, value in mount
	type := volume_mount_types[key]
	want := json_type[type]
	not type_name(value) == want
}

malformed contains [["spec", group, position, "ports", i, "hostPort"], "integer"] if {
	container_keys.ports
	some group in container_lists
	some position, c in containers_in[group]
	is_array(c.ports)
	some i, port in c.ports
	value := port.hostPort
	not is_number(value)
}

malformed contains [["spec", group, position, "ports", i, "hostPort"], "integer"] if {
	container_keys.ports
	some group in container_lists
	some position, c in containers_in[group]
	is_array(c.ports)
	some i, port in c.ports
	value := port.hostPort
	is_number(value)
	not value == floor(value)
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
	some position, c in containers_in[group]
	some key in required_keys.container
	object.get(c, key, not_there) == not_there
}

absent contains ["spec", "volumes", i, "hostPath", key] if {
	some i, volume in volume_list
	is_object(volume.hostPath)
	some key in required_keys.hostPath
	object.get(volume.hostPath, key, not_there) == not_there
}

absent contains ["spec", "volumes", i, "flexVolume", key] if {
	some i, volume in volume_list
	is_object(volume.flexVolume)
	some key in required_keys.flexVolume
	object.get(volume.flexVolume, key, not_there) == not_there
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
	container_keys.securityContext
	some group in container_lists
	some position, c in containers_in[group]
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
