"""POD-INPUT-001 in one pass: the pod policy's input shape compiled once.

The pod policy fails closed: a field it reads that is present with a value of the wrong
type (null included), or a required field that is absent, denies the pod as POD-INPUT-001
(``rego/pod_shape.rego``). On regopy those checks cost more than all the other rules
together (docs/policies.md, Benchmark), so the embedded engine compiles the same shape, the
table ``input_fields`` of ``rego/pod_fields.rego`` (path, type, required), once into a tree
and visits the input once. The violations, with the messages ``pod_shape.rego`` writes, go
to the policy with the input (``EMBEDDED_MODULE``); the OPA server, the bundle and
Gatekeeper evaluate the Rego. tests/policies compares both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RULE = "POD-INPUT-001"
#: The input key that carries the violations to the embedded policy (always overwritten).
INPUT_KEY = "gotthard.input_violations"
#: Replaces ``pod_shape.rego`` (and ``pod_fields.rego``) in the embedded engine's bundle.
EMBEDDED_MODULE_NAME = "pod_shape_embedded.rego"
EMBEDDED_MODULE = f"""# The embedded engine's POD-INPUT-001: the violations that
# gotthard/policies/shape.py found in the input (the engine sets this key on every
# query; see pod_shape.rego).
package gotthard.admission.pod

import rego.v1

deny contains v if {{
\tsome v in input["{INPUT_KEY}"]
}}
"""
#: Modules of the pod policy the embedded bundle leaves out (replaced by the module above).
REPLACED_MODULES = ("pod_shape.rego", "pod_fields.rego")
#: The three container lists a ``$containers`` path segment stands for.
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")

TYPE_TEXT = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "boolean": "true or false",
    "integer": "a whole number",
    "quantity": "a quantity (a number or a string such as 500m or 1Gi)",
    "count": "a whole number (a non-negative integer or a string of digits)",
}
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUANTITY = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?")
_DIGITS = frozenset("0123456789")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return _number(value) and (
        isinstance(value, int) or (math.isfinite(value) and value.is_integer())
    )


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return _whole(value)
    if kind == "quantity":
        if _number(value):
            return value >= 0
        return isinstance(value, str) and _QUANTITY.fullmatch(value) is not None
    if kind == "count":
        if _number(value):
            return value >= 0 and _whole(value)
        return isinstance(value, str) and value != "" and set(value) <= _DIGITS
    return False


@dataclass
class Node:
    """A field: its types (several when two table entries name one key), whether its
    parent must hold it, and its children by key (``*``: any index or key)."""

    types: list[str] = field(default_factory=list)
    required: bool = False
    children: dict[str, Node] = field(default_factory=dict)
    star: Node | None = None

    def child(self, key: str) -> Node:
        if key == "*":
            if self.star is None:
                self.star = Node()
            return self.star
        return self.children.setdefault(key, Node())


def _expand(path: Sequence[str], gpus: Sequence[str]) -> Iterable[list[str]]:
    """A table path with ``$containers`` and ``$gpu`` replaced by each name they stand for."""
    out: list[list[str]] = [[]]
    for segment in path:
        names: Sequence[str]
        if segment == "$containers":
            names = CONTAINER_LISTS
        elif segment == "$gpu":
            names = gpus
        else:
            names = (segment,)
        out = [[*prefix, name] for prefix in out for name in names]
    return out


def compile_shape(fields: Iterable[Mapping[str, Any]], gpu_resources: Any) -> Node:
    """The tree of ``input_fields`` (pod_fields.rego) for the site's GPU resource names."""
    gpus = (
        [g for g in gpu_resources if isinstance(g, str)] if isinstance(gpu_resources, list) else []
    )
    root = Node()
    for entry in fields:
        for path in _expand(entry["path"], gpus):
            node = root
            for segment in path:
                node = node.child(segment)
            if entry["type"] not in node.types:
                node.types.append(entry["type"])
            node.required = node.required or bool(entry.get("required"))
    return root


def _segment(index: int, key: Any) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return key if index == 0 else f".{key}"
    return f"[{key}]"


def path_text(path: Sequence[Any]) -> str:
    """``spec.containers[0].resources.limits[nvidia.com/gpu]`` (as pod_shape.rego)."""
    if not path:
        return "input"
    return "".join(_segment(i, key) for i, key in enumerate(path))


class ShapeCheck:
    """The compiled shape: :meth:`violations` of one input (a JSON value)."""

    def __init__(self, root: Node) -> None:
        self.root = root

    def violations(self, doc: Any) -> list[dict[str, str]]:
        malformed: list[tuple[list[Any], str]] = []
        absent: list[list[Any]] = []
        self._visit(doc, self.root, [], malformed, absent)
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        pod = name if isinstance(name, str) else "<unnamed>"
        messages = {f"pod {pod}: {path_text(p)} must be {TYPE_TEXT[t]}" for p, t in malformed}
        messages.update(f"pod {pod}: {path_text(p)} is required" for p in absent)
        spec = doc.get("spec") if isinstance(doc, dict) else None
        if isinstance(spec, dict) and spec.get("containers") == []:
            messages.add(f"pod {pod}: spec.containers is empty")
        return [{"rule": RULE, "message": m} for m in sorted(messages)]

    def _visit(
        self,
        value: Any,
        node: Node,
        path: list[Any],
        malformed: list[tuple[list[Any], str]],
        absent: list[list[Any]],
    ) -> None:
        good = True
        for kind in node.types:
            if not _type_ok(kind, value):
                malformed.append((path, kind))
                good = False
        if isinstance(value, dict):
            if not good and not (len(path) == 2 and path[1] in CONTAINER_LISTS):
                return
            # (a container list given as an object: the policy still reads the objects in
            # it, as containers_in does; the list itself is malformed)
            for key, child in node.children.items():
                if key in value:
                    self._visit(value[key], child, [*path, key], malformed, absent)
                elif child.required:
                    absent.append([*path, key])
            star = node.star
            if star is not None:
                for key, item in value.items():
                    if key in node.children:
                        continue
                    if star.types == ["object"] and not isinstance(item, dict) and not good:
                        continue
                    self._visit(item, star, [*path, key], malformed, absent)
        elif isinstance(value, list) and good and node.star is not None:
            for index, item in enumerate(value):
                self._visit(item, node.star, [*path, index], malformed, absent)
