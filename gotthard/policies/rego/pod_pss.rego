# The Pod Security Standards rules of the pod admission policy (package gotthard.admission.pod; the shared
# reads, the input shape and POD-INPUT-001 are in pod.rego, which documents the package).
package gotthard.admission.pod

import rego.v1

# --- Pod Security Standards ----------------------------------------------------------
# One rule per control of the Kubernetes Pod Security Standards, with the fields and
# allowed values of the reference implementation (pod-security-admission, "latest"). Every
# container rule visits containers, initContainers and ephemeralContainers. The lists the
# site may tune are parameters in data.gotthard.site.admission (see rules.yml).

# Baseline "HostProcess": Windows HostProcess containers are forbidden.
deny contains {"rule": "POD-PSS-B-HOSTPROCESS-001", "message": msg} if {
	pod_security.windowsOptions.hostProcess == true
	msg := concat("", ["pod ", pod_name, ": securityContext.windowsOptions.hostProcess is true"])
}

deny contains {"rule": "POD-PSS-B-HOSTPROCESS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.windowsOptions
	some group in container_lists
	some position, c in containers_in[group]
	c.securityContext.windowsOptions.hostProcess == true
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " sets windowsOptions.hostProcess"])
}

# Baseline "Host Namespaces": hostNetwork, hostPID and hostIPC are forbidden. With
# pss_hostnetwork_by_label hostNetwork is judged by the site rule POD-HOSTNET-001 alone
# (allowed only in namespaces labelled for MPI/NCCL, denied elsewhere), so a pod is not
# reported twice for it; hostPID and hostIPC stay forbidden everywhere.
deny contains {"rule": "POD-PSS-B-HOSTNS-001", "message": msg} if {
	some field in ["hostNetwork", "hostPID", "hostIPC"]
	spec[field] == true
	not host_network_by_site_rule(field)
	msg := concat("", ["pod ", pod_name, ": ", field, " is true"])
}

host_network_by_site_rule("hostNetwork") if site.pss_hostnetwork_by_label == true

# Baseline "Capabilities": only the baseline capabilities may be added.
deny contains {"rule": "POD-PSS-B-CAPS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.capabilities
	some group in container_lists
	some position, c in containers_in[group]
	some capability in c.securityContext.capabilities.add
	is_string(capability)
	not capability in site.allowed_capabilities
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " adds capability ", capability])
}

# Baseline "HostPath Volumes": forbidden (POD-HOSTPATH-001 is the site's allow-listed variant).
deny contains {"rule": "POD-PSS-B-HOSTPATH-001", "message": msg} if {
	some index, v in volume_list
	is_object(v)
	host_path := v.hostPath
	not host_path == null
	msg := concat("", ["pod ", pod_name, ": volume ", volume_name(v, index), " is a hostPath volume"])
}

# Baseline "Host Ports": hostPort unset or 0, or in allowed_host_ports (ports and "low-high"
# ranges; none by default).
deny contains {"rule": "POD-PSS-B-HOSTPORTS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	container_keys.ports
	some group in container_lists
	some position, c in containers_in[group]
	some port in c.ports
	host_port := port.hostPort
	is_number(host_port)
	not host_port == 0
	not host_port_allowed(host_port)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " uses hostPort ", sprintf("%v", [host_port])])
}

host_port_allowed(port) if port in site.allowed_host_ports

host_port_allowed(port) if {
	some entry in site.allowed_host_ports
	is_string(entry)
	regex.match(`^[0-9]+(-[0-9]+)?$`, entry)
	bounds := split(entry, "-")
	to_number(bounds[0]) <= port
	port <= to_number(bounds[count(bounds) - 1])
}

# Baseline "AppArmor": no Unconfined (or other) profile; the beta annotation may name
# runtime/default or localhost/*.
apparmor_types := {"RuntimeDefault", "Localhost"}

apparmor_annotation := "container.apparmor.security.beta.kubernetes.io/"

deny contains {"rule": "POD-PSS-B-APPARMOR-001", "message": msg} if {
	some key, value in annotations
	startswith(key, apparmor_annotation)
	not apparmor_annotation_allowed(value)
	msg := concat("", ["pod ", pod_name, ": annotation ", key, " is not runtime/default or an allowed localhost/ profile"])
}

apparmor_annotation_allowed(value) if value in {"", "runtime/default"}

apparmor_annotation_allowed(value) if {
	startswith(value, "localhost/")
	listed(substring(value, count("localhost/"), -1), apparmor_localhost_profiles)
}

# Localhost profiles the site allows (allowed_apparmor_localhost_profiles; "*" any, "x*"
# any name starting with x).
apparmor_localhost_profiles := site.allowed_apparmor_localhost_profiles

# Whether name is in a list of names and prefix globs ("kernel.*", "*").
listed(name, patterns) if name in patterns

listed(name, patterns) if {
	is_string(name)
	some pattern in patterns
	is_string(pattern)
	endswith(pattern, "*")
	startswith(name, trim_suffix(pattern, "*"))
}

# A Localhost profile object whose profile the site does not list.
localhost_profile_denied(profile, allowed) if {
	profile.type == "Localhost"
	name := object.get(profile, "localhostProfile", "")
	not listed(name, allowed)
}

deny contains {"rule": "POD-PSS-B-APPARMOR-001", "message": msg} if {
	pod_security.appArmorProfile.type == "Localhost"
	localhost_profile_denied(pod_security.appArmorProfile, apparmor_localhost_profiles)
	msg := concat("", ["pod ", pod_name, ": appArmorProfile localhostProfile ", sprintf("%v", [object.get(pod_security.appArmorProfile, "localhostProfile", "")]), " is not allowed"])
}

deny contains {"rule": "POD-PSS-B-APPARMOR-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.appArmorProfile
	some group in container_lists
	some c in containers_in[group]
	localhost_profile_denied(c.securityContext.appArmorProfile, apparmor_localhost_profiles)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " appArmorProfile localhostProfile ", sprintf("%v", [object.get(c.securityContext.appArmorProfile, "localhostProfile", "")]), " is not allowed"])
}

deny contains {"rule": "POD-PSS-B-APPARMOR-001", "message": msg} if {
	profile := pod_security.appArmorProfile.type
	is_string(profile)
	not apparmor_types[profile]
	msg := concat("", ["pod ", pod_name, ": appArmorProfile type ", profile, " is not allowed"])
}

deny contains {"rule": "POD-PSS-B-APPARMOR-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.appArmorProfile
	some group in container_lists
	some position, c in containers_in[group]
	profile := c.securityContext.appArmorProfile.type
	is_string(profile)
	not apparmor_types[profile]
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " appArmorProfile type ", profile, " is not allowed"])
}

# Baseline "SELinux": type empty or one of the container types; user and role empty.
selinux_types := {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

deny contains {"rule": "POD-PSS-B-SELINUX-001", "message": msg} if {
	some field, value in pod_security.seLinuxOptions
	is_string(value)
	selinux_forbidden(field, value)
	msg := concat("", ["pod ", pod_name, ": seLinuxOptions.", field, " ", value, " is not allowed"])
}

deny contains {"rule": "POD-PSS-B-SELINUX-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.seLinuxOptions
	some group in container_lists
	some position, c in containers_in[group]
	some field, value in c.securityContext.seLinuxOptions
	is_string(value)
	selinux_forbidden(field, value)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " seLinuxOptions.", field, " ", value, " is not allowed"])
}

selinux_forbidden("type", value) if not value in selinux_types

selinux_forbidden(field, value) if {
	field in {"user", "role"}
	value != ""
}

# Baseline "/proc Mount Type": Default only (any type in a user namespace, hostUsers: false).
deny contains {"rule": "POD-PSS-B-PROCMOUNT-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not user_namespaces
	security_keys.procMount
	some group in container_lists
	some position, c in containers_in[group]
	proc_mount := c.securityContext.procMount
	is_string(proc_mount)
	not proc_mount == "Default"
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " procMount ", proc_mount, " is not Default"])
}

# Baseline "Seccomp": no Unconfined (or other) profile. The site may narrow the types
# (allowed_seccomp_types) and the Localhost profiles (allowed_seccomp_localhost_profiles).
seccomp_types := {"RuntimeDefault", "Localhost"}

site_seccomp_types := {t | some t in site.allowed_seccomp_types}

seccomp_localhost_profiles := site.allowed_seccomp_localhost_profiles

deny contains {"rule": "POD-PSS-B-SECCOMP-001", "message": msg} if {
	pod_security.seccompProfile.type == "Localhost"
	localhost_profile_denied(pod_security.seccompProfile, seccomp_localhost_profiles)
	msg := concat("", ["pod ", pod_name, ": seccompProfile localhostProfile ", sprintf("%v", [object.get(pod_security.seccompProfile, "localhostProfile", "")]), " is not allowed"])
}

deny contains {"rule": "POD-PSS-B-SECCOMP-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.seccompProfile
	some group in container_lists
	some c in containers_in[group]
	localhost_profile_denied(c.securityContext.seccompProfile, seccomp_localhost_profiles)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " seccompProfile localhostProfile ", sprintf("%v", [object.get(c.securityContext.seccompProfile, "localhostProfile", "")]), " is not allowed"])
}

deny contains {"rule": "POD-PSS-B-SECCOMP-001", "message": msg} if {
	profile := pod_security.seccompProfile.type
	is_string(profile)
	not site_seccomp_types[profile]
	msg := concat("", ["pod ", pod_name, ": seccompProfile type ", profile, " is not allowed"])
}

deny contains {"rule": "POD-PSS-B-SECCOMP-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.seccompProfile
	some group in container_lists
	some position, c in containers_in[group]
	profile := c.securityContext.seccompProfile.type
	is_string(profile)
	not site_seccomp_types[profile]
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " seccompProfile type ", profile, " is not allowed"])
}

# Baseline "Sysctls": only the safe set (allowed_sysctls: names and prefix globs such as
# "net.ipv4.*" or "*"), never a forbidden one (forbidden_sysctls, the same forms).
deny contains {"rule": "POD-PSS-B-SYSCTLS-001", "message": msg} if {
	some sysctl in sysctls
	name := sysctl.name
	is_string(name)
	not listed(name, site.allowed_sysctls)
	msg := concat("", ["pod ", pod_name, ": sysctl ", name, " is not in the safe set"])
}

deny contains {"rule": "POD-PSS-B-SYSCTLS-001", "message": msg} if {
	some sysctl in sysctls
	name := sysctl.name
	is_string(name)
	site.forbidden_sysctls[0]
	listed(name, site.forbidden_sysctls)
	msg := concat("", ["pod ", pod_name, ": sysctl ", name, " is forbidden"])
}

# Baseline "Host Probes / Lifecycle Hooks": no host in httpGet or tcpSocket actions.
deny contains {"rule": "POD-PSS-B-PROBEHOST-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	container_probes
	some group in container_lists
	some position, c in containers_in[group]
	some probe in probe_keys
	some action in ["httpGet", "tcpSocket"]
	host := c[probe][action].host
	is_string(host)
	not host == ""
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " ", probe, " ", action, " sets host ", host])
}

deny contains {"rule": "POD-PSS-B-PROBEHOST-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	container_keys.lifecycle
	some group in container_lists
	some position, c in containers_in[group]
	some hook in hook_keys
	some action in ["httpGet", "tcpSocket"]
	host := c.lifecycle[hook][action].host
	is_string(host)
	not host == ""
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " ", hook, " hook ", action, " sets host ", host])
}

# Restricted "Volume Types": only the allowed volume sources (allowed_volume_types).
deny contains {"rule": "POD-PSS-R-VOLUMES-001", "message": msg} if {
	some index, v in volume_list
	is_object(v)
	some source, _ in v
	not source == "name"
	not source in site.allowed_volume_types
	msg := concat("", ["pod ", pod_name, ": volume ", volume_name(v, index), " is of type ", source])
}

# Restricted "Privilege Escalation": allowPrivilegeEscalation must be false on every
# container (Windows pods are exempt).
deny contains {"rule": "POD-PSS-R-ESCALATION-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not windows_pod
	some group in container_lists
	some position, c in containers_in[group]
	not c.securityContext.allowPrivilegeEscalation == false
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " does not set allowPrivilegeEscalation to false"])
}

# Restricted "Running as Non-root": runAsNonRoot true on the pod (containers may then leave
# it unset) or on every container; false anywhere is denied. Not checked in a user
# namespace (hostUsers: false).
deny contains {"rule": "POD-PSS-R-NONROOT-001", "message": msg} if {
	not user_namespaces
	pod_security.runAsNonRoot == false
	msg := concat("", ["pod ", pod_name, ": securityContext.runAsNonRoot is false"])
}

deny contains {"rule": "POD-PSS-R-NONROOT-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not user_namespaces
	security_keys.runAsNonRoot
	some group in container_lists
	some position, c in containers_in[group]
	c.securityContext.runAsNonRoot == false
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " sets runAsNonRoot to false"])
}

deny contains {"rule": "POD-PSS-R-NONROOT-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not user_namespaces
	not pod_security.runAsNonRoot == true
	some group in container_lists
	some position, c in containers_in[group]
	count([v | v := c.securityContext.runAsNonRoot]) == 0
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " does not set runAsNonRoot and the pod does not either"])
}

# Restricted "Running as Non-root user": runAsUser is never 0, on the pod or a container
# (also with runAsNonRoot: true). Not checked in a user namespace (hostUsers: false).
deny contains {"rule": "POD-PSS-R-NONROOTUSER-001", "message": msg} if {
	not user_namespaces
	pod_security.runAsUser == 0
	msg := concat("", ["pod ", pod_name, ": securityContext.runAsUser is 0"])
}

deny contains {"rule": "POD-PSS-R-NONROOTUSER-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not user_namespaces
	security_keys.runAsUser
	some group in container_lists
	some position, c in containers_in[group]
	c.securityContext.runAsUser == 0
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " sets runAsUser to 0"])
}

# Restricted "Seccomp": RuntimeDefault or Localhost on the pod (containers may then leave
# it unset) or on every container (Windows pods are exempt).
deny contains {"rule": "POD-PSS-R-SECCOMP-001", "message": msg} if {
	not windows_pod
	profile := pod_security.seccompProfile.type
	is_string(profile)
	not seccomp_types[profile]
	msg := concat("", ["pod ", pod_name, ": seccompProfile type ", profile, " is not RuntimeDefault or Localhost"])
}

deny contains {"rule": "POD-PSS-R-SECCOMP-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not windows_pod
	security_keys.seccompProfile
	some group in container_lists
	some position, c in containers_in[group]
	profile := c.securityContext.seccompProfile.type
	is_string(profile)
	not seccomp_types[profile]
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " seccompProfile type ", profile, " is not RuntimeDefault or Localhost"])
}

deny contains {"rule": "POD-PSS-R-SECCOMP-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not windows_pod
	not seccomp_types[pod_security.seccompProfile.type]
	some group in container_lists
	some position, c in containers_in[group]
	count([p | p := c.securityContext.seccompProfile]) == 0
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " has no seccompProfile and the pod has none either"])
}

# Restricted "Capabilities": drop ALL; add NET_BIND_SERVICE at most (Windows pods are exempt).
deny contains {"rule": "POD-PSS-R-CAPS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not windows_pod
	some group in container_lists
	some position, c in containers_in[group]
	not drops_all(c)
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " does not drop ALL capabilities"])
}

deny contains {"rule": "POD-PSS-R-CAPS-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	not windows_pod
	security_keys.capabilities
	some group in container_lists
	some position, c in containers_in[group]
	some capability in c.securityContext.capabilities.add
	is_string(capability)
	not capability == "NET_BIND_SERVICE"
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " adds capability ", capability])
}

drops_all(c) if {
	some capability in c.securityContext.capabilities.drop
	capability == "ALL"
}

# Restricted "/proc Mount Type": Default only, also in a user namespace.
deny contains {"rule": "POD-PSS-R-PROCMOUNT-001", "message": msg, "container": object.get(c, "name", "<unnamed>"), "image": object.get(c, "image", "")} if {
	security_keys.procMount
	some group in container_lists
	some position, c in containers_in[group]
	proc_mount := c.securityContext.procMount
	is_string(proc_mount)
	not proc_mount == "Default"
	msg := concat("", ["pod ", pod_name, ": container ", object.get(c, "name", "<unnamed>"), " procMount ", proc_mount, " is not Default"])
}
