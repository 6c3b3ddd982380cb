# The input shape of the pod policy (package gotthard.admission.pod; the checks and
# POD-INPUT-001 are in pod_shape.rego; pod.rego documents the package).
package gotthard.admission.pod

import rego.v1

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
	"runAsGroup": "integer",
	"windowsOptions": "object",
	"seLinuxOptions": "object",
	"seccompProfile": "object",
	"appArmorProfile": "object",
}

pod_security_types := object.union(shared_security_types, {
	"sysctls": "array",
	"fsGroup": "integer",
	"supplementalGroups": "array",
})

container_security_types := object.union(shared_security_types, {
	"privileged": "boolean",
	"allowPrivilegeEscalation": "boolean",
	"procMount": "string",
	"capabilities": "object",
	"readOnlyRootFilesystem": "boolean",
})

security_object_types := {
	"windowsOptions": {"hostProcess": "boolean"},
	"seLinuxOptions": {"type": "string", "user": "string", "role": "string"},
	"seccompProfile": {"type": "string", "localhostProfile": "string"},
	"appArmorProfile": {"type": "string", "localhostProfile": "string"},
	"capabilities": {"add": "array", "drop": "array"},
}

sysctl_types := {"name": "string"}

# A volume's other keys are its source (restricted volume types read the key): objects.
volume_types := {"name": "string", "hostPath": "object", "flexVolume": "object"}

host_path_types := {"path": "string"}

flex_volume_types := {"driver": "string"}

container_types := {
	"name": "string",
	"image": "string",
	"restartPolicy": "string",
	"securityContext": "object",
	"resources": "object",
	"ports": "array",
	"volumeMounts": "array",
	"livenessProbe": "object",
	"readinessProbe": "object",
	"startupProbe": "object",
	"lifecycle": "object",
}

resources_types := {"limits": "object", "requests": "object"}

limits_types := {"cpu": "quantity", "memory": "quantity"}

requests_types := limits_types

port_types := {"hostPort": "integer"}

volume_mount_types := {"name": "string", "readOnly": "boolean"}

# Fields of type integer: whole numbers (the JSON type is number).
integer_security_keys := {"runAsUser", "runAsGroup", "fsGroup"}

# Probes and lifecycle hooks ("handlers"), and the actions whose `host` is read.
lifecycle_types := {"postStart": "object", "preStop": "object"}

handler_types := {"httpGet": "object", "tcpSocket": "object"}

action_types := {"host": "string"}

# A Kubernetes quantity (cpu "500m", memory "1Gi", "1e3") or a non-negative number.
quantity_pattern := `^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$`

# Keys whose absence cannot be interpreted, by the object that must hold them.
required_keys := {
	"pod": ["spec"],
	"spec": ["containers"],
	"container": ["image"],
	"hostPath": ["path"],
	"flexVolume": ["driver"],
	"seccompProfile": ["type"],
	"appArmorProfile": ["type"],
	"sysctl": ["name"],
}
