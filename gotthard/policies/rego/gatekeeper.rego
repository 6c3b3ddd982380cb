# What the Gatekeeper templates read instead of data.gotthard (Gatekeeper allows no data
# but data.inventory and data.lib). `gotthard policy gatekeeper` writes this module as
# lib.gotthard.gatekeeper with the data.gotthard references below replaced by the values
# they had when it ran (the shipped site values, --data and [policies]).
package gotthard.gatekeeper

import rego.v1

object_or_empty(x) := x if is_object(x)

else := {}

# The AdmissionRequest Gatekeeper reviews (review.rego reads it as an AdmissionReview's).
request := object_or_empty(input.review)

parameters := object_or_empty(object.get(input, "parameters", {}))

# The Constraint's parameters replace the site values of the same name.
site := object.union(data.gotthard.site.admission, {k: v |
	some k, v in parameters
	not k in {"exemptImages", "namespaces"}
})

# Namespace labels: Gatekeeper's synced Namespaces (Config spec.sync.syncOnly v1
# Namespace) over the labels and GPU quotas of the shipped inventory and the Constraint's
# `namespaces` parameter.
synced_namespaces[name] := {"labels": object_or_empty(object.get(object_or_empty(ns.metadata), "labels", {}))} if {
	some name, ns in data.inventory.cluster.v1.Namespace
}

known_namespaces := object.union(
	object_or_empty(object.get(object_or_empty(data.gotthard.inventory), "namespaces", {})),
	object_or_empty(object.get(parameters, "namespaces", {})),
)

inventory := {"namespaces": object.union(known_namespaces, synced_namespaces)}

# Every rule enforced (the Constraint's enforcementAction says deny or warn; its match
# excludes namespaces), with its PSS flag and the Constraint's image globs.
constraints := {rule: {
	"enabled": true,
	"mode": "enforce",
	"pss": object.get(c, "pss", false),
	"exempt": {"images": object.get(parameters, "exemptImages", [])},
} |
	some rule, c in data.gotthard.constraints
}
