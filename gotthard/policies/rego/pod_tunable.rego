# Site rules of the pod admission policy that only parameters switch on (package
# gotthard.admission.pod; pod.rego documents the package). Their defaults (rego/data/
# site.yml) allow everything, so that a site opts in with [policies.rules.ID.params].
package gotthard.admission.pod

import rego.v1

# POD-FLEXVOL-001: flexVolume drivers (allowed_flexvolume_drivers: names and prefix globs;
# default ["*"], any driver).
deny contains {"rule": "POD-FLEXVOL-001", "message": msg} if {
	some index, v in volume_list
	driver := v.flexVolume.driver
	not listed(driver, site.allowed_flexvolume_drivers)
	msg := concat("", ["pod ", pod_name, ": volume ", volume_name(v, index), " uses flexVolume driver ", sprintf("%v", [driver]), ", which is not allowed"])
}

# POD-ROFS-001: every container's root file system read-only (when
# require_read_only_root_filesystem).
deny contains {"rule": "POD-ROFS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	site.require_read_only_root_filesystem == true
	some group in container_lists
	some c in containers_in[group]
	not c.securityContext.readOnlyRootFilesystem == true
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " does not set readOnlyRootFilesystem to true"])
}

# POD-CAPS-001: capabilities every container drops (required_drop_capabilities; ALL
# drops every one; compared case-insensitively). Default: none.
deny contains {"rule": "POD-CAPS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	site.required_drop_capabilities[0]
	some required in site.required_drop_capabilities
	is_string(required)
	some group in container_lists
	some c in containers_in[group]
	not drops(c, upper(required))
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " does not drop capability ", required])
}

drops(c, capability) if {
	some dropped in c.securityContext.capabilities.drop
	is_string(dropped)
	upper(dropped) in {capability, "ALL"}
}

# POD-IDS-001: user and group ids within the site's ranges. Each of run_as_user,
# run_as_group, supplemental_groups and fs_group is {"rule": ..., "ranges": [{"min", "max"}]}:
# RunAsAny (default): anything; MustRunAs: set (on the container or, for the pod-wide ids
# and as the container's default, on the pod) and within a range; MayRunAs (groups): within
# a range when set; MustRunAsNonRoot (run_as_user): runAsUser not 0, or unset with
# runAsNonRoot true.
id_policy(name) := p if {
	p := site[name]
	is_object(p)
} else := {"rule": "RunAsAny"}

in_ranges(value, policy) if {
	is_number(value)
	some r in object.get(policy, "ranges", [])
	r.min <= value
	value <= r.max
}

# A container's value of runAsUser or runAsGroup: its own, else the pod's (absent: none).
effective(c, key) := c.securityContext[key] if {
	value := c.securityContext[key]
	not value == null
} else := pod_security[key] if {
	value := pod_security[key]
	not value == null
}

container_ids := {"runAsUser": "run_as_user", "runAsGroup": "run_as_group"}

# The id checks run only when some id rule is other than RunAsAny: one deny body, so that
# a site without id rules pays for one lookup per decision (regopy: see pod.rego).
deny contains v if {
	ids_active
	some v in id_violations
}

# Whether any id rule is other than RunAsAny.
ids_active if not site.run_as_user.rule == "RunAsAny"

ids_active if not site.run_as_group.rule == "RunAsAny"

ids_active if not site.supplemental_groups.rule == "RunAsAny"

ids_active if not site.fs_group.rule == "RunAsAny"

id_violations contains {"rule": "POD-IDS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	some key, name in container_ids
	policy := id_policy(name)
	policy.rule in {"MustRunAs", "MayRunAs"}
	some group in container_lists
	some c in containers_in[group]
	problem := id_problem(effective_or_unset(c, key), policy)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " ", key, " ", problem])
}

id_violations contains {"rule": "POD-IDS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	id_policy("run_as_user").rule == "MustRunAsNonRoot"
	some group in container_lists
	some c in containers_in[group]
	not non_root_user(c)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " may run as root (runAsUser 0, or unset without runAsNonRoot)"])
}

effective_or_unset(c, key) := value if {
	value := effective(c, key)
} else := "unset"

id_problem("unset", policy) := "is not set" if policy.rule == "MustRunAs"

id_problem(value, policy) := concat("", [sprintf("%v", [value]), " is outside the allowed ranges"]) if {
	not value == "unset"
	not in_ranges(value, policy)
}

non_root_user(c) if {
	value := effective(c, "runAsUser")
	is_number(value)
	not value == 0
}

non_root_user(c) if {
	not effective(c, "runAsUser")
	c.securityContext.runAsNonRoot == true
}

non_root_user(c) if {
	not effective(c, "runAsUser")
	not c.securityContext.runAsNonRoot == false
	pod_security.runAsNonRoot == true
}

id_violations contains {"rule": "POD-IDS-001", "message": msg} if {
	policy := id_policy("fs_group")
	policy.rule in {"MustRunAs", "MayRunAs"}
	problem := id_problem(pod_value_or_unset("fsGroup"), policy)
	msg := concat("", ["pod ", pod_name, ": fsGroup ", problem])
}

id_violations contains {"rule": "POD-IDS-001", "message": msg} if {
	policy := id_policy("supplemental_groups")
	policy.rule == "MustRunAs"
	count(supplemental_groups) == 0
	msg := concat("", ["pod ", pod_name, ": supplementalGroups is not set"])
}

id_violations contains {"rule": "POD-IDS-001", "message": msg} if {
	policy := id_policy("supplemental_groups")
	policy.rule in {"MustRunAs", "MayRunAs"}
	some value in supplemental_groups
	not in_ranges(value, policy)
	msg := concat("", ["pod ", pod_name, ": supplementalGroups ", sprintf("%v", [value]), " is outside the allowed ranges"])
}

pod_value_or_unset(key) := value if {
	value := pod_security[key]
	not value == null
} else := "unset"

supplemental_groups := pod_security.supplementalGroups if is_array(pod_security.supplementalGroups)

else := []
