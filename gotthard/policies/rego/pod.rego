# Kubernetes admission for pods (and the pod templates of workload controllers).
# Input: a Pod-shaped object {"kind": "Pod", "metadata": {...}, "spec": {...}}; Python
# extracts the pod template from Deployments, Jobs, ... before evaluation.
# Site values: data.gotthard.site.admission; namespace labels and GPU quotas:
# data.gotthard.inventory.namespaces[name].
package gotthard.admission.pod

import rego.v1

site := data.gotthard.site.admission

namespace := object.get(input.metadata, "namespace", "default")

pod_name := object.get(input.metadata, "name", "<unnamed>")

containers contains c if some c in input.spec.containers

containers contains c if some c in object.get(input.spec, "initContainers", [])

containers contains c if some c in object.get(input.spec, "ephemeralContainers", [])

# POD-PRIV-001: no privileged containers.
deny contains {"rule": "POD-PRIV-001", "message": msg} if {
	some c in containers
	object.get(object.get(c, "securityContext", {}), "privileged", false) == true
	msg := sprintf("pod %s: container %s is privileged", [pod_name, c.name])
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
	some v in object.get(input.spec, "volumes", [])
	path := v.hostPath.path
	not hostpath_allowed(path)
	msg := sprintf("pod %s: hostPath %s is not allow-listed", [pod_name, path])
}

# POD-HOSTNET-001: hostNetwork only in namespaces labelled for MPI/NCCL workloads.
namespace_labels := object.get(
	object.get(object.get(data.gotthard.inventory, "namespaces", {}), namespace, {}),
	"labels",
	{},
)

hostnetwork_namespace if {
	value := namespace_labels[site.hostnetwork_label.key]
	value in site.hostnetwork_label.values
}

deny contains {"rule": "POD-HOSTNET-001", "message": msg} if {
	input.spec.hostNetwork == true
	not hostnetwork_namespace
	msg := sprintf("pod %s: hostNetwork in namespace %s, which is not labelled %s for MPI/NCCL", [pod_name, namespace, site.hostnetwork_label.key])
}

# POD-GPU-001: GPU requests equal limits.
resource(c, kind, name) := object.get(object.get(object.get(c, "resources", {}), kind, {}), name, null)

deny contains {"rule": "POD-GPU-001", "message": msg} if {
	some c in containers
	some gpu in site.gpu_resources
	request := resource(c, "requests", gpu)
	request != null
	to_number(request) != to_number(resource(c, "limits", gpu))
	msg := sprintf("pod %s: container %s requests %v %s but its limit differs", [pod_name, c.name, request, gpu])
}

# POD-GPU-002: the pod's GPUs stay within the namespace's quota.
container_gpus(c) := sum([to_number(resource(c, "limits", gpu)) |
	some gpu in site.gpu_resources
	resource(c, "limits", gpu) != null
])

pod_gpus := sum([container_gpus(c) | some c in input.spec.containers])

namespace_inventory := object.get(object.get(data.gotthard.inventory, "namespaces", {}), namespace, {})

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

deny contains {"rule": "POD-IMG-001", "message": msg} if {
	some c in containers
	not registry_allowed(c.image)
	msg := sprintf("pod %s: container %s image %s is not from an allowed registry", [pod_name, c.name, c.image])
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
	some c in containers
	unpinned(c.image)
	msg := sprintf("pod %s: container %s image %s is untagged or :latest", [pod_name, c.name, c.image])
}

# POD-SEC-001: runAsNonRoot, set on the pod or on every container.
pod_non_root := object.get(object.get(input.spec, "securityContext", {}), "runAsNonRoot", false)

container_non_root(c) := v if {
	v := c.securityContext.runAsNonRoot
} else := pod_non_root

deny contains {"rule": "POD-SEC-001", "message": msg} if {
	some c in containers
	container_non_root(c) != true
	msg := sprintf("pod %s: container %s does not set runAsNonRoot", [pod_name, c.name])
}

# POD-RES-001: cpu and memory limits on every container.
deny contains {"rule": "POD-RES-001", "message": msg} if {
	some c in containers
	some r in ["cpu", "memory"]
	resource(c, "limits", r) == null
	msg := sprintf("pod %s: container %s has no %s limit", [pod_name, c.name, r])
}
