# Slurm/FirecREST quotas for jobs submitted from Kubernetes.
# Input: {"kind": "SlurmJob", "user", "account", "nodes", "gpus",
#         "usage": {"user": {"nodes", "gpus"}, "account": {"nodes", "gpus"}}} (usage optional).
# Site values: data.gotthard.site.slurm_quota.
package gotthard.slurm.quota

import rego.v1

site := data.gotthard.site.slurm_quota

user_limits := object.get(site.users, input.user, site.default_user)

account_known if site.accounts[input.account]

account_limits := site.accounts[input.account]

usage(scope, what) := object.get(object.get(object.get(input, "usage", {}), scope, {}), what, 0)

requested(what) := object.get(input, what, 0)

over(limits, scope, what) if requested(what) + usage(scope, what) > limits[concat("", ["max_", what])]

# SLURM-QUOTA-001 / -002: per-user node and GPU limits.
deny contains {"rule": "SLURM-QUOTA-001", "message": msg} if {
	over(user_limits, "user", "nodes")
	msg := sprintf("user %s: %v nodes requested, %v in use, limit %v", [input.user, requested("nodes"), usage("user", "nodes"), user_limits.max_nodes])
}

deny contains {"rule": "SLURM-QUOTA-002", "message": msg} if {
	over(user_limits, "user", "gpus")
	msg := sprintf("user %s: %v GPUs requested, %v in use, limit %v", [input.user, requested("gpus"), usage("user", "gpus"), user_limits.max_gpus])
}

# SLURM-QUOTA-003 / -004: per-account node and GPU limits.
deny contains {"rule": "SLURM-QUOTA-003", "message": msg} if {
	over(account_limits, "account", "nodes")
	msg := sprintf("account %s: %v nodes requested, %v in use, limit %v", [input.account, requested("nodes"), usage("account", "nodes"), account_limits.max_nodes])
}

deny contains {"rule": "SLURM-QUOTA-004", "message": msg} if {
	over(account_limits, "account", "gpus")
	msg := sprintf("account %s: %v GPUs requested, %v in use, limit %v", [input.account, requested("gpus"), usage("account", "gpus"), account_limits.max_gpus])
}

# SLURM-QUOTA-005: only accounts the site knows may submit from Kubernetes.
deny contains {"rule": "SLURM-QUOTA-005", "message": msg} if {
	not account_known
	msg := sprintf("account %v is not allowed to submit from Kubernetes", [object.get(input, "account", null)])
}
