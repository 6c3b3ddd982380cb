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
# Fail closed: every field a rule reads is listed in the input shape (pod_input.rego); a field that is
# null, of the wrong type or required but absent is denied as POD-INPUT-001, and the rules
# read the input only through guards that never fail on such a field (an undefined value
# must never turn into "no violation").
#
# Cost on regopy (rego-cpp, docs/policies.md: Benchmark): every built-in call copies the
# interpreter's whole frame, comparisons other than of numbers serialise both sides, a field
# lookup compares keys one by one, and object.get on a non-object aborts the process. The
# rules therefore visit the containers that are objects once (containers_in), guard with
# set lookups (container_keys.lifecycle) rather than `in`, write `not a == b` rather than
# `a != b` where both sides are defined, and call object.get only on values known to be
# objects. A violation names its container with object.get(c, "name", "<unnamed>"): a
# malformed name is POD-INPUT-001 anyway.
# regopy's sprintf also quotes strings that come from a literal or from concat a second
# time (broken JSON output): messages are built with concat.
#
# Modules: pod.rego (this: the reads the rules share), pod_input.rego (the input shape),
# pod_shape.rego (POD-INPUT-001; the embedded engine runs it compiled, gotthard/policies/
# shape.py), pod_fields.rego (the shape as one table), pod_site.rego, pod_pss.rego.
package gotthard.admission.pod

import rego.v1

site := data.gotthard.site.admission

container_lists := ["containers", "initContainers", "ephemeralContainers"]

# Probes and lifecycle hooks ("handlers"), whose actions' `host` is read.
probe_keys := ["livenessProbe", "readinessProbe", "startupProbe"]

hook_keys := ["postStart", "preStop"]

digits := "0123456789"

# The containers that are objects (one that is not is POD-INPUT-001), by list and position:
# containers_in[group][position]. Rules iterate `some group in container_lists` and then
# `some position, c in containers_in[group]`, so no rule tests each container again.
containers_in := {group: objects_in(spec[group]) | some group in container_lists}

objects_in(list) := {position: c |
	some position, c in list
	is_object(c)
}

# The keys that some container sets, and that some container's securityContext sets: a
# rule about a key no container sets is skipped without visiting the containers (guards
# read these sets with a lookup, container_keys.lifecycle, not with `in`: see above).
container_keys := {key |
	some group in container_lists
	some c in containers_in[group]
	some key
	_ = c[key]
}

security_keys := {key |
	"securityContext" in container_keys
	some group in container_lists
	some c in containers_in[group]
	some key
	_ = c.securityContext[key]
}

container_probes if {
	some probe in probe_keys
	container_keys[probe]
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
