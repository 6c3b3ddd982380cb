"""What the emulated API server serves, and the rules a real API server applies to each
kind: the schema every write is validated against, and who may write ``status``.

**Validation.** Every create, replace and patch is validated, as the result the server
would store, against

* for the built-in kinds, the OpenAPI schema of Kubernetes :data:`KUBERNETES_VERSION` that
  ``kubernetes-validate`` ships offline (``kubernetes_validate/kubernetes-json-schema/``),
  plus the few rules of the API server's Go validation that the schema cannot say and
  Gotthard's callers meet: ``metadata.name`` is required, a Pod's (and a Deployment's pod
  template's) containers need an image, and a Deployment's selector must match its
  template's labels;
* for custom resources, the ``openAPIV3Schema`` of their CRD (:func:`crd_resources`).

An invalid object is refused as kube-apiserver refuses it: HTTP 422, a Status of reason
``Invalid`` whose ``details.causes`` name each field (``FieldValueRequired``,
``FieldValueInvalid``, ``FieldValueNotSupported``, ``FieldValueTypeInvalid``). A value of
the wrong type in a built-in kind is a 400 ``BadRequest`` instead (the server cannot
decode it). Unknown fields are accepted, as with the server's default field validation
(``Warn``), but kept rather than dropped; with ``?fieldValidation=Strict`` they are a 400
``BadRequest`` (``strict decoding error: unknown field ...``). ``null`` values are dropped
before validation (the server drops them too, except where a CRD's schema says
``nullable``).

**Status**, per kind, as kube-apiserver's registry strategies handle it
(kubernetes/kubernetes ``pkg/registry/<group>/<resource>/strategy.go``: ``PrepareForCreate``
and ``PrepareForUpdate`` of the strategy and of its status strategy; for custom resources
``staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go`` and
``status_strategy.go``):

* :data:`STATUS_SUBRESOURCE` (Deployment, Pod, Service, Namespace; a CRD that declares
  ``subresources.status``): a create starts from the server's own status
  (``deployment.Status = apps.DeploymentStatus{}``; a Pod's is phase ``Pending``, a
  Namespace's phase ``Active``; a custom resource's ``delete(customResource, "status")``),
  an update of the object keeps the stored status whatever its body says
  (``newDeployment.Status = oldDeployment.Status``), and only a write to the ``/status``
  subresource changes it, and nothing but it (``newDeployment.Spec = oldDeployment.Spec``;
  a custom resource's status update copies the old object and sets only its status);
* :data:`STATUS_ON_CREATE` (Node): "Nodes allow *all* fields, including status, to be set
  on create" (``nodeStrategy.PrepareForCreate``); updates as above;
* :data:`NO_STATUS_SUBRESOURCE` (ConfigMap, Secret, Lease, StorageClass, which have no
  status; a CRD without ``subresources.status``, as Velero's and Karmada's CRDs here):
  ``status`` is a field like any other, written by create and update, and ``/status``
  does not exist (404).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry
from referencing import Resource as SchemaResource

from gotthard_testing.selectors import label_selector, labels_of, selector_string

__all__ = [
    "CONFIGMAPS",
    "CRD_DIR",
    "DEPLOYMENTS",
    "KUBERNETES_VERSION",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "NO_STATUS_SUBRESOURCE",
    "PODS",
    "SECRETS",
    "SERVICES",
    "STATUS_ON_CREATE",
    "STATUS_SUBRESOURCE",
    "STORAGE_CLASSES",
    "Cause",
    "Resource",
    "crd_resources",
    "crd_validator",
    "validate",
    "without_nulls",
]

#: The Kubernetes version whose OpenAPI schemas validate the built-in kinds.
KUBERNETES_VERSION = "1.30.0"
#: The CRD manifests the emulated API servers serve (Velero's ``velero.io_*``, Karmada's
#: ``policy.karmada.io_*``): the one copy in the source tree.
CRD_DIR = Path(__file__).resolve().parent / "crds"

#: Only the ``/status`` subresource writes status (module docstring).
STATUS_SUBRESOURCE = "subresource"
#: As :data:`STATUS_SUBRESOURCE`, but a create may set status too (Node).
STATUS_ON_CREATE = "subresource, settable on create"
#: No ``/status`` subresource: status, if any, is an ordinary field.
NO_STATUS_SUBRESOURCE = "no subresource"


@dataclass(frozen=True)
class Resource:
    """A resource the emulator serves: ``key`` is ``GROUP/VERSION/PLURAL`` (``v1/PLURAL``
    for the core group); ``status`` how the server treats its status; ``initial_status``
    the status a create starts with where the server owns it; ``schema`` a custom
    resource's ``openAPIV3Schema`` (None for a built-in kind: its OpenAPI schema, if
    Kubernetes has the kind; else no validation)."""

    key: str
    kind: str
    namespaced: bool = True
    status: str = NO_STATUS_SUBRESOURCE
    initial_status: Mapping[str, Any] | None = field(default=None, compare=False)
    schema: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def api_version(self) -> str:
        return self.key.rpartition("/")[0]

    @property
    def plural(self) -> str:
        return self.key.rpartition("/")[2]

    @property
    def group(self) -> str:
        group, _, _ = self.api_version.rpartition("/")
        return group

    @property
    def has_status_subresource(self) -> bool:
        return self.status != NO_STATUS_SUBRESOURCE


PODS = Resource("v1/pods", "Pod", status=STATUS_SUBRESOURCE, initial_status={"phase": "Pending"})
SERVICES = Resource(
    "v1/services", "Service", status=STATUS_SUBRESOURCE, initial_status={"loadBalancer": {}}
)
CONFIGMAPS = Resource("v1/configmaps", "ConfigMap")
SECRETS = Resource("v1/secrets", "Secret")
NODES = Resource("v1/nodes", "Node", namespaced=False, status=STATUS_ON_CREATE)
STORAGE_CLASSES = Resource("storage.k8s.io/v1/storageclasses", "StorageClass", namespaced=False)
DEPLOYMENTS = Resource("apps/v1/deployments", "Deployment", status=STATUS_SUBRESOURCE)
LEASES = Resource("coordination.k8s.io/v1/leases", "Lease")
#: Served by the emulator's own handler (kmock cannot route the core cluster-scoped path).
NAMESPACES = Resource(
    "v1/namespaces",
    "Namespace",
    namespaced=False,
    status=STATUS_SUBRESOURCE,
    initial_status={"phase": "Active"},
)


def crd_resources(*paths: Path) -> list[Resource]:
    """One :class:`Resource` per served version of each CRD manifest in *paths*, with
    its schema and status subresource."""
    found = []
    for path in paths:
        spec = yaml.safe_load(path.read_text())["spec"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            subresources = version.get("subresources") or {}
            found.append(
                Resource(
                    f"{spec['group']}/{version['name']}/{spec['names']['plural']}",
                    spec["names"]["kind"],
                    spec["scope"] == "Namespaced",
                    STATUS_SUBRESOURCE if "status" in subresources else NO_STATUS_SUBRESOURCE,
                    schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                )
            )
    return found


# -- validation -------------------------------------------------------------------------


@dataclass(frozen=True)
class Cause:
    """One entry of a Status's ``details.causes``: a reason (``FieldValueRequired``, ...,
    or :data:`UNKNOWN_FIELD` for an unknown field under strict field validation), its
    message and the field's path (``spec.template``, ``spec.containers[0].name``)."""

    reason: str
    message: str
    field: str

    def as_json(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


#: The reason of a :class:`Cause` for an unknown field (strict field validation only).
UNKNOWN_FIELD = "FieldValueUnknown"
#: The reason of a :class:`Cause` for a value of the wrong JSON type.
TYPE_INVALID = "FieldValueTypeInvalid"


def _schemas(strict: bool) -> Any:
    name = f"v{KUBERNETES_VERSION}-local" + ("-strict" if strict else "")
    return importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / name


@functools.cache
def _definitions(strict: bool) -> Registry[Any]:
    """The shared definitions every built-in kind's schema refers to (by their ``$id``)."""
    contents = json.loads((_schemas(strict) / "_definitions.json").read_text())
    return SchemaResource.from_contents(contents) @ Registry()


@functools.cache
def _builtin_validator(api_version: str, kind: str, strict: bool) -> Any:
    """The validator of a built-in kind (None: Kubernetes has no such kind)."""
    group, _, version = api_version.rpartition("/")
    prefix = f"{group.split('.')[0]}-" if group else ""
    path = _schemas(strict) / f"{kind.lower()}-{prefix}{version}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(schema, registry=_definitions(strict))


def _closed(node: Any) -> Any:
    """A copy of an OpenAPI schema in which an object with ``properties`` allows no other
    property (unless it preserves unknown fields): unknown fields become errors."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _closed(value) for key, value in node.items()}
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


_CRD_VALIDATORS: dict[tuple[str, bool], Any] = {}


def crd_validator(resource: Resource, strict: bool = False) -> Any:
    """The validator of a custom resource's ``openAPIV3Schema``; *strict*: unknown fields
    are errors, as with ``fieldValidation=Strict``."""
    key = (resource.key, strict)
    if key not in _CRD_VALIDATORS:
        schema = _closed(resource.schema) if strict else resource.schema
        _CRD_VALIDATORS[key] = jsonschema.Draft202012Validator(schema or {})
    return _CRD_VALIDATORS[key]


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _shown(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _causes(errors: Iterable[Any]) -> Iterator[Cause]:
    """The API server's causes for jsonschema's *errors*."""
    for error in errors:
        where = _path(error.absolute_path)
        if error.validator == "required":
            instance = error.instance if isinstance(error.instance, Mapping) else {}
            for name in error.validator_value:
                if name not in instance:
                    yield Cause("FieldValueRequired", "Required value", _join(where, name))
        elif error.validator in ("additionalProperties", "unevaluatedProperties"):
            allowed = set((error.schema.get("properties") or {}).keys())
            for name in sorted(set(error.instance) - allowed):
                yield Cause(
                    UNKNOWN_FIELD, f'unknown field "{_join(where, name)}"', _join(where, name)
                )
        elif error.validator == "type":
            wanted = error.validator_value
            if isinstance(wanted, list):
                wanted = next((t for t in wanted if t != "null"), "null")
            message = f"{where} in body must be of type {wanted}: {_shown(error.instance)}"
            yield Cause(TYPE_INVALID, f"Invalid value: {_shown(error.instance)}: {message}", where)
        elif error.validator == "enum":
            supported = ", ".join(_shown(v) for v in error.validator_value)
            message = f"Unsupported value: {_shown(error.instance)}: supported values: {supported}"
            yield Cause("FieldValueNotSupported", message, where)
        else:
            message = f"Invalid value: {_shown(error.instance)}: {error.message}"
            yield Cause("FieldValueInvalid", message, where)


def without_nulls(value: Any) -> Any:
    """*value* without its ``null`` members (the API server prunes them)."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _containers(spec: Any, where: str) -> Iterator[Cause]:
    """A pod spec's containers without an image (ValidatePodSpec requires one)."""
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    for index, container in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(container, Mapping) and not container.get("image"):
            yield Cause("FieldValueRequired", "Required value", f"{where}[{index}].image")


def _go_rules(resource: Resource, obj: Mapping[str, Any]) -> Iterator[Cause]:
    """What the API server's Go validation refuses and the schema does not say."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    if not meta.get("name"):
        message = "Required value: name or generateName is required"
        yield Cause("FieldValueRequired", message, "metadata.name")
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    if resource.key == PODS.key:
        yield from _containers(spec, "spec.containers")
    if resource.key != DEPLOYMENTS.key or not isinstance(spec.get("template"), Mapping):
        return
    template = spec["template"]
    yield from _containers(template.get("spec"), "spec.template.spec.containers")
    selector = spec.get("selector")
    labels = labels_of(template)
    if isinstance(selector, Mapping) and not label_selector(selector_string(selector))(labels):
        message = f"Invalid value: {_shown(labels)}: `selector` does not match template `labels`"
        yield Cause("FieldValueInvalid", message, "spec.template.metadata.labels")


def validate(resource: Resource, obj: Mapping[str, Any], strict: bool = False) -> list[Cause]:
    """Why the API server would refuse to store *obj* (``[]``: it would store it)."""
    if resource.schema is not None:
        validator = crd_validator(resource, strict)
    else:
        validator = _builtin_validator(resource.api_version, resource.kind, strict)
    found = list(_causes(validator.iter_errors(obj))) if validator is not None else []
    return found + list(_go_rules(resource, obj))


def rejection(
    resource: Resource, name: str, causes: Sequence[Cause], builtin: bool
) -> tuple[int, str, str, dict[str, Any]]:
    """The HTTP status, reason, message and details the API server answers *causes*
    with: 422 Invalid; 400 BadRequest for an unknown field (strict field validation) or,
    in a built-in kind, a value it cannot decode."""
    unknown = [c for c in causes if c.reason == UNKNOWN_FIELD]
    if unknown:
        return (
            400,
            "BadRequest",
            "strict decoding error: " + ", ".join(c.message for c in unknown),
            {},
        )
    undecodable = [c for c in causes if c.reason == TYPE_INVALID] if builtin else []
    if undecodable:
        message = f"{resource.kind} in version {resource.api_version!r} cannot be handled: " + (
            "; ".join(f"{c.field}: {c.message}" for c in undecodable)
        )
        return 400, "BadRequest", message, {}
    qualified = f"{resource.kind}.{resource.group}" if resource.group else resource.kind
    listed = [f"{c.field}: {c.message}" for c in causes]
    shown = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    details: dict[str, Any] = {"name": name, "kind": resource.kind}
    if resource.group:
        details["group"] = resource.group
    details["causes"] = [c.as_json() for c in causes]
    return 422, "Invalid", f'{qualified} "{name}" is invalid: {shown}', details
