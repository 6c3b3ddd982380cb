# kube-bench baseline: the CIS checks that must PASS, with time-bound waivers.
# Input (normalised by gotthard.policies.kube_bench):
#   {"kind": "KubeBenchResults", "today": "YYYY-MM-DD",
#    "checks": [{"id", "status", "node_type"}], "only": [ids] (optional: checks that ran)}
# Site values: data.gotthard.site.kube_bench.required; waivers: data.gotthard.waivers.
package gotthard.kube_bench

import rego.v1

required contains id if {
	some id in data.gotthard.site.kube_bench.required
	not input.only
}

required contains id if {
	some id in data.gotthard.site.kube_bench.required
	id in input.only
}

passed contains c.id if {
	some c in input.checks
	upper(c.status) == "PASS"
}

present contains c.id if some c in input.checks

# A waiver is valid up to and including its expiry date (ISO dates compare as strings).
valid_waiver(id) if {
	some w in data.gotthard.waivers
	w.id == id
	input.today <= w.expires
}

expired_waivers contains w.id if {
	some w in data.gotthard.waivers
	input.today > w.expires
	not valid_waiver(w.id)
}

not_passing contains id if {
	some id in required
	not id in passed
}

waived contains id if {
	some id in not_passing
	valid_waiver(id)
}

failed contains id if {
	some id in not_passing
	not valid_waiver(id)
}

summary := {"failed": sort(failed), "waived": sort(waived), "expired_waivers": sort(expired_waivers)}

# KB-001: a required check did not PASS and no valid waiver covers it.
deny contains {"rule": "KB-001", "message": msg} if {
	some id in failed
	id in present
	statuses := [c.status | some c in input.checks; c.id == id]
	msg := sprintf("CIS %s must PASS, got %v", [id, statuses])
}

# KB-002: a required check is missing from the report (and not waived).
deny contains {"rule": "KB-002", "message": msg} if {
	some id in failed
	not id in present
	msg := sprintf("CIS %s is required but missing from the report", [id])
}
