# Lustre StorageClasses: the parameters and reclaim policy the site requires.
# Site values: data.gotthard.site.storage.
package gotthard.admission.storageclass

import rego.v1

site := data.gotthard.site.storage

sc_name := object.get(input.metadata, "name", "<unnamed>")

lustre if input.provisioner in site.lustre_provisioners

parameters := object.get(input, "parameters", {})

# SC-LUSTRE-001: required parameters (e.g. rootSquash) with the required values.
deny contains {"rule": "SC-LUSTRE-001", "message": msg} if {
	lustre
	some key, want in site.required_parameters
	object.get(parameters, key, null) != want
	msg := sprintf("storageclass %s: parameter %s must be %v", [sc_name, key, want])
}

# SC-LUSTRE-002: the reclaim policy (Kubernetes defaults to Delete).
deny contains {"rule": "SC-LUSTRE-002", "message": msg} if {
	lustre
	object.get(input, "reclaimPolicy", "Delete") != site.reclaim_policy
	msg := sprintf("storageclass %s: reclaimPolicy must be %s", [sc_name, site.reclaim_policy])
}
