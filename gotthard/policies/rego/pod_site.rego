# The site's own rules of the pod admission policy (package gotthard.admission.pod; the shared
# reads, the input shape and POD-INPUT-001 are in pod.rego, which documents the package).
package gotthard.admission.pod

import rego.v1

# --- site rules ----------------------------------------------------------------------

# POD-PRIV-001: no privileged containers (also the Baseline "Privileged Containers" control).
deny contains {"rule": "POD-PRIV-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.privileged
	some group in container_lists
	some position, c in containers_in[group]
	c.securityContext.privileged == true
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " is privileged"])
}

# POD-HOSTPATH-001: hostPath volumes only under allow-listed paths. An entry is a path, or
# {"path": ..., "read_only": true}: below such an entry every container mounts the volume
# readOnly (unless a writable entry also allows the path).
hostpath_entry_path(entry) := entry if is_string(entry)

hostpath_entry_path(entry) := entry.path if {
	is_object(entry)
	is_string(entry.path)
}

hostpath_matches(path, entry) if {
	allowed := hostpath_entry_path(entry)
	path == allowed
}

hostpath_matches(path, entry) if {
	allowed := hostpath_entry_path(entry)
	startswith(path, concat("", [trim_right(allowed, "/"), "/"]))
}

hostpath_allowed(path) if {
	some entry in site.hostpath_allowlist
	hostpath_matches(path, entry)
}

hostpath_writable(path) if {
	some entry in site.hostpath_allowlist
	hostpath_matches(path, entry)
	not entry.read_only == true
}

deny contains {"rule": "POD-HOSTPATH-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	container_keys.volumeMounts
	some v in volume_list
	is_object(v)
	path := v.hostPath.path
	is_string(path)
	hostpath_allowed(path)
	not hostpath_writable(path)
	some group in container_lists
	some c in containers_in[group]
	some mount in c.volumeMounts
	mount.name == v.name
	not mount.readOnly == true
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " mounts hostPath ", path, " writable; it is allowed read-only"])
}

deny contains {"rule": "POD-HOSTPATH-001", "message": msg} if {
	some index, v in volume_list
	is_object(v)
	path := v.hostPath.path
	is_string(path)
	not hostpath_allowed(path)
	msg := concat("", ["pod ", pod_name, ": hostPath ", path, " is not allow-listed"])
}

# POD-HOSTNET-001: hostNetwork only in namespaces labelled for MPI/NCCL workloads.
namespace_inventory := data.gotthard.inventory.namespaces[namespace] if is_object(data.gotthard.inventory.namespaces[namespace])

else := {}

namespace_labels := namespace_inventory.labels if is_object(namespace_inventory.labels)

else := {}

hostnetwork_namespace if {
	value := namespace_labels[site.hostnetwork_label.key]
	value in site.hostnetwork_label.values
}

deny contains {"rule": "POD-HOSTNET-001", "message": msg} if {
	spec.hostNetwork == true
	not hostnetwork_namespace
	msg := concat("", ["pod ", pod_name, ": hostNetwork in namespace ", namespace, ", which is not labelled ", site.hostnetwork_label.key, " for MPI/NCCL"])
}

# POD-GPU-001: GPU requests equal limits.
# The containers that request or limit GPUs, with their whole GPUs by resource: numbers and
# strings of digits (malformed values are left out: POD-INPUT-001 denies them). Computed only for a pod that names a GPU.
gpu_pod if {
	some group in container_lists
	some c in containers_in[group]
	some kind in ["requests", "limits"]
	some gpu in site.gpu_resources
	c.resources[kind][gpu]
}

gpu_containers := [{"group": group, "position": position, "c": c, "requests": requests, "limits": limits} |
	gpu_pod
	some group in container_lists
	list := spec[group]
	is_array(list)
	some position
	c := list[position]
	requests := object.union(
		{gpu: n | some gpu in site.gpu_resources; n := c.resources.requests[gpu]; is_number(n); n >= 0; n == floor(n)},
		{gpu: n | some gpu in site.gpu_resources; v := c.resources.requests[gpu]; is_string(v); v != ""; trim_left(v, digits) == ""; n := to_number(v)},
	)
	limits := object.union(
		{gpu: n | some gpu in site.gpu_resources; n := c.resources.limits[gpu]; is_number(n); n >= 0; n == floor(n)},
		{gpu: n | some gpu in site.gpu_resources; v := c.resources.limits[gpu]; is_string(v); v != ""; trim_left(v, digits) == ""; n := to_number(v)},
	)
	count(requests) + count(limits) > 0
]

deny contains {"rule": "POD-GPU-001", "message": msg, "container": object.get(g.c, "name", "<unnamed>"), "image": object.get(g.c, "image", "")} if {
	some g in gpu_containers
	some gpu, request in g.requests
	request != object.get(g.limits, gpu, 0)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(g.c, "name", "<unnamed>"), " requests ", sprintf("%v", [request]), " ", gpu, " but its limit differs"])
}

# POD-GPU-002: the pod's GPUs stay within the namespace's quota.
# A container is charged the larger of its GPU request and limit (they differ only in a pod
# POD-GPU-001 denies). Kubernetes charges a pod max(sum of app containers + sidecars,
# each init container + the sidecars started before it); init containers run one at a time,
# sidecars (init containers with restartPolicy Always) keep running. Ephemeral containers
# are not charged.
# (regopy loses an outer comprehension's variables inside an inner comprehension, and
# expressions in a comprehension's head: the inner sums are functions that bind each value
# in the body.)
gpu_charges := [{"group": g.group, "position": g.position, "gpus": charged_gpus(g.requests, g.limits), "sidecar": sidecar} |
	some g in gpu_containers
	g.group != "ephemeralContainers"
	sidecar := object.get(g.c, "restartPolicy", null) == "Always"
]

charged_gpus(requests, limits) := sum([n |
	some gpu in site.gpu_resources
	n := max([object.get(requests, gpu, 0), object.get(limits, gpu, 0)])
])

sidecar_gpus_before(position) := sum([n | some s in sidecar_charges; s.position < position; n := s.gpus])

sidecar_charges := [c | some c in gpu_charges; c.group == "initContainers"; c.sidecar]

running_gpus := sum([n | some c in gpu_charges; c.group == "containers"; n := c.gpus]) + sum([n | some c in sidecar_charges; n := c.gpus])

init_peaks := [peak |
	some c in gpu_charges
	c.group == "initContainers"
	not c.sidecar
	peak := c.gpus + sidecar_gpus_before(c.position)
]

pod_gpus := max(array.concat(init_peaks, [running_gpus]))

gpu_quota := object.get(namespace_inventory, "gpu_quota", site.default_gpu_quota)

gpus_used := object.get(namespace_inventory, "gpus_used", 0)

deny contains {"rule": "POD-GPU-002", "message": msg} if {
	gpu_pod
	pod_gpus > 0
	pod_gpus + gpus_used > gpu_quota
	msg := concat("", ["pod ", pod_name, ": ", sprintf("%v GPUs (+%v in use) exceed the quota of %v", [pod_gpus, gpus_used, gpu_quota]), " in namespace ", namespace])
}

# POD-IMG-001: images only from allowed registries, never from denied ones; an image equal
# to an allowed_images entry is allowed whatever its registry. A registry entry matches the
# images below it ("<entry>/...").
registry_prefixes(registries) := [concat("", [trim_right(r, "/"), "/"]) | some r in registries]

allowed_prefixes := registry_prefixes(site.allowed_registries)

denied_prefixes := registry_prefixes(object.get(site, "denied_registries", []))

allowed_images := object.get(site, "allowed_images", [])

allowed_image_set := {image | some image in allowed_images}

# Plain string prefixes ("docker.io/org/", "openpolicyagent"), unlike the registries above,
# which match whole path segments.
allowed_repos := site.allowed_repos

denied_repos := site.denied_repos

allowed_repo(image) if {
	allowed_repos[0]
	strings.any_prefix_match(image, allowed_repos)
}

image_denied(image) if strings.any_prefix_match(image, denied_prefixes)

image_denied(image) if {
	denied_repos[0]
	strings.any_prefix_match(image, denied_repos)
}

# The images of the containers, by list and position (an image that is not a string is
# POD-INPUT-001): each image is tested for being a string once, not in every image rule.
images_in := {group: string_images(containers_in[group]) | some group in container_lists}

string_images(containers) := {position: c.image |
	some position, c in containers
	is_string(c.image)
}

deny contains {"rule": "POD-IMG-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": image} if {
	some group in container_lists
	some position, image in images_in[group]
	not allowed_image_set[image]
	not strings.any_prefix_match(image, allowed_prefixes)
	not allowed_repo(image)
	c := containers_in[group][position]
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " image ", image, " is not from an allowed registry"])
}

deny contains {"rule": "POD-IMG-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": image} if {
	some group in container_lists
	some position, image in images_in[group]
	not allowed_image_set[image]
	image_denied(image)
	c := containers_in[group][position]
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " image ", image, " is from a denied registry"])
}

# POD-IMG-002: no ':latest' and no untagged images (a digest pins the image): the image's
# last path segment has no ":", or the image ends in ":latest". Only a well-formed digest
# pins: "app@latest" is untagged.
deny contains {"rule": "POD-IMG-002", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": image} if {
	some group in container_lists
	some position, image in images_in[group]
	not digest_pinned(image)
	untagged_or_latest(image)
	c := containers_in[group][position]
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " image ", image, " is untagged or has a denied tag (", concat(", ", denied_tags), ")"])
}

# The tag of an image: after the last ":" of its last path segment (before any "@").
image_tag(image) := tag if {
	parts := split(image, "/")
	name := split(parts[count(parts) - 1], "@")[0]
	contains(name, ":")
	pieces := split(name, ":")
	tag := pieces[count(pieces) - 1]
}

denied_tags := site.denied_tags

denied_tag_set := {tag | some tag in denied_tags}

# Each image's tag, computed once per image ("" when untagged).
image_tags := {image: tag |
	some group in container_lists
	some image in images_in[group]
	tag := image_tag_or_none(image)
}

image_tag_or_none(image) := tag if {
	tag := image_tag(image)
} else := ""

untagged_or_latest(image) if denied_tag_set[image_tags[image]]

untagged_or_latest(image) if image_tags[image] == ""

# POD-IMG-003: images pinned by digest, when the site requires it: the image ends in
# "@<algorithm>:<hex digest>" with a known algorithm and its digest length (sha256: 64
# lower-case hex digits, sha512: 128); "app@latest" or "app@sha256:abc" is not pinned.
digest_lengths := {"sha256": 64, "sha512": 128}

hex_digits := "0123456789abcdef"

digest_pinned(image) if {
	contains(image, "@")
	parts := split(image, "@")
	count(parts) == 2
	not parts[0] == ""
	pair := split(parts[1], ":")
	count(pair) == 2
	length := digest_lengths[pair[0]]
	count(pair[1]) == length
	trim_left(pair[1], hex_digits) == ""
}

deny contains {"rule": "POD-IMG-003", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": image} if {
	site.require_image_digest == true
	some group in container_lists
	some position, image in images_in[group]
	not digest_pinned(image)
	c := containers_in[group][position]
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " image ", image, " is not pinned by digest"])
}

# POD-SEC-001: runAsNonRoot, set on the pod or on every container (the container wins).
deny contains {"rule": "POD-SEC-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.runAsNonRoot
	some group in container_lists
	some position, c in containers_in[group]
	non_root := c.securityContext.runAsNonRoot
	not non_root == true
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " does not set runAsNonRoot"])
}

deny contains {"rule": "POD-SEC-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not pod_security.runAsNonRoot == true
	some group in container_lists
	some position, c in containers_in[group]
	count([v | v := c.securityContext.runAsNonRoot]) == 0
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " does not set runAsNonRoot"])
}

# POD-RES-001: the limits (required_limits, default cpu and memory) and requests
# (required_requests, default none) every container sets, and the largest limits and
# requests (max_limits, max_requests: resource -> quantity) it may set.
required_limits := site.required_limits

required_requests := site.required_requests

deny contains {"rule": "POD-RES-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	some group in container_lists
	some position, c in containers_in[group]
	some r in required_limits
	not limit_set(c, r)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " has no ", r, " limit"])
}

deny contains {"rule": "POD-RES-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	some r in required_requests
	some group in container_lists
	some position, c in containers_in[group]
	not request_set(c, r)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " has no ", r, " request"])
}

deny contains {"rule": "POD-RES-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	some kind, maxima in {"limits": site.max_limits, "requests": site.max_requests}
	some r, maximum in maxima
	some group in container_lists
	some position, c in containers_in[group]
	value := c.resources[kind][r]
	not value == null
	not quantity_within(value, maximum)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " ", r, " ", kind, " ", sprintf("%v", [value]), " exceeds the maximum ", sprintf("%v", [maximum])])
}

limit_set(c, r) if {
	value := c.resources.limits[r]
	not value == null
}

request_set(c, r) if {
	value := c.resources.requests[r]
	not value == null
}

# Quantities as numbers: "500m" 0.5, "1Gi" 1073741824, "2e3" 2000 (n and u: nano, micro).
# A value that is not a quantity is never within a maximum (fail closed).
quantity_within(value, maximum) if quantity_number(value) <= quantity_number(maximum)

quantity_number(value) := value if {
	is_number(value)
	value >= 0
}

quantity_number(value) := n if {
	is_string(value)
	regex.match(quantity_pattern, value)
	n := quantity_string_number(value)
}

quantity_string_number(value) := units.parse(trim_suffix(value, "n")) / 1000000000 if endswith(value, "n")

quantity_string_number(value) := units.parse(trim_suffix(value, "u")) / 1000000 if endswith(value, "u")

quantity_string_number(value) := units.parse(value) if {
	not endswith(value, "n")
	not endswith(value, "u")
}
