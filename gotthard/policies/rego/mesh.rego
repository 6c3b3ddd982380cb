# Service mesh: every workload namespace has a namespace-wide STRICT mTLS PeerAuthentication.
# Input: {"kind": "List", "items": [Namespace..., PeerAuthentication...]} (or one object).
# Site values: data.gotthard.site.mesh.
package gotthard.mesh

import rego.v1

site := data.gotthard.site.mesh

items := input.items if input.kind == "List"

items := [input] if input.kind != "List"

workload_namespaces contains ns if {
	some item in items
	item.kind == "Namespace"
	ns := item.metadata.name
	not ns in site.exempt_namespaces
}

pa_namespace(pa) := object.get(pa.metadata, "namespace", "default")

mode(pa) := object.get(object.get(object.get(pa, "spec", {}), "mtls", {}), "mode", "UNSET")

strict_namespaces contains ns if {
	some pa in items
	pa.kind == "PeerAuthentication"
	not pa.spec.selector
	mode(pa) == "STRICT"
	ns := pa_namespace(pa)
}

# MESH-MTLS-001: a workload namespace without a namespace-wide STRICT PeerAuthentication.
deny contains {"rule": "MESH-MTLS-001", "message": msg} if {
	some ns in workload_namespaces
	not ns in strict_namespaces
	msg := sprintf("namespace %s has no namespace-wide STRICT mTLS PeerAuthentication", [ns])
}

# MESH-MTLS-002: no PeerAuthentication weakens mTLS (PERMISSIVE or DISABLE, port-level too).
weak_modes := {"PERMISSIVE", "DISABLE"}

pa_modes(pa) := {m | some port in object.get(object.get(pa, "spec", {}), "portLevelMtls", {}); m := port.mode}

all_modes(pa) := pa_modes(pa) | {mode(pa)}

deny contains {"rule": "MESH-MTLS-002", "message": msg} if {
	some pa in items
	pa.kind == "PeerAuthentication"
	not pa_namespace(pa) in site.exempt_namespaces
	some weak in all_modes(pa)
	weak in weak_modes
	msg := sprintf("peerauthentication %s/%s sets mTLS mode %s", [pa_namespace(pa), pa.metadata.name, weak])
}
