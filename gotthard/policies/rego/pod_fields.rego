# The pod policy's input fields as one table (package gotthard.admission.pod), built
# from the maps of pod_input.rego: for people, the fail-closed tests, and the embedded
# engine, which compiles it into its one-pass shape check (gotthard/policies/shape.py; the
# Rego checks in pod_shape.rego read the maps directly, and tests/policies/test_shape.py
# shows that both find the same violations).
package gotthard.admission.pod

import rego.v1

# The fields as a table, one entry per field: {path, type, required, absent_rule}. In a path
# "*" is any list index or object key, "$containers" any of container_lists and "$gpu" any of
# site.gpu_resources. absent_rule: the rule that denies the field's absence from a pod that
# is otherwise compliant (no absent_rule and not required: absence is compliant).
input_objects := [
	{"path": [], "types": root_types, "required": required_keys.pod},
	{"path": ["metadata"], "types": metadata_types},
	{"path": ["metadata", "annotations"], "types": {"*": "string"}},
	{"path": ["spec"], "types": spec_types, "required": required_keys.spec},
	{"path": ["spec", "os"], "types": os_types},
	{"path": ["spec", "securityContext"], "types": pod_security_types},
	{"path": ["spec", "securityContext", "sysctls"], "types": {"*": "object"}},
	{"path": ["spec", "securityContext", "supplementalGroups"], "types": {"*": "integer"}},
	{"path": ["spec", "securityContext", "sysctls", "*"], "types": sysctl_types, "required": required_keys.sysctl},
	{"path": ["spec", "volumes"], "types": {"*": "object"}},
	{"path": ["spec", "volumes", "*"], "types": object.union(volume_types, {"*": "object"})},
	{"path": ["spec", "volumes", "*", "hostPath"], "types": host_path_types, "required": required_keys.hostPath},
	{"path": ["spec", "volumes", "*", "flexVolume"], "types": flex_volume_types, "required": required_keys.flexVolume},
	{"path": ["spec", "$containers"], "types": {"*": "object"}},
	{"path": ["spec", "$containers", "*"], "types": container_types, "required": required_keys.container},
	{"path": ["spec", "$containers", "*", "securityContext"], "types": container_security_types},
	{"path": ["spec", "$containers", "*", "securityContext", "capabilities", "add"], "types": {"*": "string"}},
	{"path": ["spec", "$containers", "*", "securityContext", "capabilities", "drop"], "types": {"*": "string"}},
	{"path": ["spec", "$containers", "*", "resources"], "types": resources_types},
	{"path": ["spec", "$containers", "*", "resources", "limits"], "types": object.union(limits_types, {"$gpu": "count"})},
	{"path": ["spec", "$containers", "*", "resources", "requests"], "types": object.union(requests_types, {"$gpu": "count"})},
	{"path": ["spec", "$containers", "*", "volumeMounts"], "types": {"*": "object"}},
	{"path": ["spec", "$containers", "*", "volumeMounts", "*"], "types": volume_mount_types},
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
