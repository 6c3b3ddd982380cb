# The constraint semantics (data.gotthard.constraints, see constraints.rego) as functions
# of a violation and the document it was found in. constraints.rego applies them to the
# policies' deny sets; the OPA bundle's webhook and the Gatekeeper templates reuse them
# (the templates with the constraints made from their parameters).
package gotthard.constrain

import rego.v1

# (not object.get(data.gotthard, ...): that would read the calling package too, a recursion)
default constraints := {}

constraints := data.gotthard.constraints

# --- one violation -------------------------------------------------------------------
#
# Read with lookups and `else` defaults, not object.get: on regopy a built-in call costs
# tens of microseconds (see pod.rego), and these functions run for every violation.

setting(v) := c if {
	c := constraints[v.rule]
	is_object(c)
} else := {}

# Whether violation v counts in `mode` (enforce | warn); ctx is context(document): the
# document itself is not passed around (regopy is slow binding large values).
applies(v, ctx, mode) if {
	mode_of(v) == mode
	kept(v, ctx)
}

# The violations of a set that count, by mode: each judged once.
split(violations, ctx) := {
	"deny": {v | some v in counted; mode_of(v) == "enforce"},
	"warn": {v | some v in counted; mode_of(v) == "warn"},
} if {
	counted := {v | some v in violations; kept(v, ctx)}
}

mode_of(v) := mode if {
	mode := setting(v).mode
} else := "enforce"

enabled(c) := value if {
	value := c.enabled
} else := true

# Whether violation v counts at all: its rule is enabled, nothing exempts it.
kept(v, ctx) if {
	c := setting(v)
	enabled(c) == true
	not outside(v, c, ctx)
	not exempt(v, c, ctx)
	not skipped(c, ctx)
}

# A rule with include.namespaces applies only in those namespaces.
outside(v, c, ctx) if {
	count(c.include.namespaces) > 0
	not violation_namespace(v, ctx) in c.include.namespaces
}

exempt(v, c, ctx) if {
	some ns in c.exempt.namespaces
	ns == violation_namespace(v, ctx)
}

exempt(v, c, ctx) if {
	some label in c.exempt.namespace_labels
	namespace_labels(violation_namespace(v, ctx))[label.key] == label.value
}

exempt(v, c, _) if {
	some pattern in c.exempt.images
	image := v.image
	is_string(image)
	glob.match(pattern, null, image) # null: no delimiters, "*" also matches "/" and "."
}

# The violation's own namespace (mesh), else the reviewed object's.
violation_namespace(v, ctx) := v.namespace if is_string(v.namespace)

else := ctx.namespace

namespace_labels(ns) := object_or_empty(object.get(object_or_empty(object.get(object_or_empty(object.get(object_or_empty(data.gotthard.inventory), "namespaces", {})), ns, {})), "labels", {}))

# DELETE and CONNECT reviews have nothing to judge.
skipped_operations := {"DELETE", "CONNECT"}

skipped(_, ctx) if skipped_operations[ctx.operation]

# An UPDATE of an existing Pod that changes no image and no container list: the PSS rules
# are not applied (Pod Security admission exempts it; Gatekeeper's templates skip UPDATE).
skipped(c, ctx) if {
	c.pss == true
	ctx.operation == "UPDATE"
	ctx.kind == "Pod"
	not ctx.significant
}

# --- the document under review -------------------------------------------------------

# What the constraints need of a document (Python and review.rego add "review":
# {"operation", "kind", "old"} to a Pod-shaped input): built by the callers from small
# values, never from the whole document (regopy is slow binding large values).
context(metadata, review, significant) := {
	"namespace": namespace_of(metadata),
	"operation": object.get(object_or_empty(review), "operation", "CREATE"),
	"kind": object.get(object_or_empty(review), "kind", "Pod"),
	"significant": significant,
}

object_or_empty(x) := x if is_object(x)

else := {}

array_or_empty(x) := x if is_array(x)

else := []

namespace_of(metadata) := ns if {
	ns := object.get(object_or_empty(metadata), "namespace", null)
	is_string(ns)
} else := "default"

container_images(spec) := [[name, object.get(object_or_empty(c), "image", null)] |
	some name in ["containers", "initContainers", "ephemeralContainers"]
	some c in array_or_empty(object.get(object_or_empty(spec), name, []))
]

# Whether an UPDATE changes a container image or the container lists, as Pod Security
# admission's significant-update check (pod specs of the object and of the old object).
images_changed(spec, old_spec) := container_images(spec) != container_images(old_spec)
