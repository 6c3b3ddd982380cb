"""Validation of what comes from outside: the webhook payload and the targets in labels.

Targets are validated before any action sees them; a value that does not match is
refused with a reason, never quoted, escaped or "cleaned" into something that passes.
"""

from __future__ import annotations

import ipaddress
import json
import re
from datetime import datetime
from itertools import accumulate
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

#: One host name label: letters, digits, '-' and '_' (Slurm accepts '_'), no leading or
#: trailing '-'. No hostlist syntax (``nid[01-04]``, commas): one node per alert.
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
SLURM_NODE_RE = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
#: RFC 1123 label (namespaces, service names) and subdomain (Kubernetes node names).
DNS1123_LABEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
DNS1123_SUBDOMAIN_RE = re.compile(rf"{DNS1123_LABEL_RE.pattern}(?:\.{DNS1123_LABEL_RE.pattern})*")
ALERTNAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
SITE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
FINGERPRINT_RE = re.compile(r"[0-9a-fA-F]{1,64}")
MAX_SHOWN = 80


class TargetError(ValueError):
    """A label value is not a valid target; the message says which and why."""


def shown(value: str) -> str:
    """A label value made safe to log: repr (control characters escaped), truncated."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _check(kind: str, value: str, pattern: re.Pattern[str], max_len: int) -> str:
    if len(value) > max_len:
        raise TargetError(f"{kind} {shown(value)} is longer than {max_len} characters")
    if not pattern.fullmatch(value):
        raise TargetError(f"{kind} {shown(value)} is not a valid {kind}")
    return value


def _not_an_ip(kind: str, value: str) -> None:
    # ``node`` comes from ``instance`` (host:port): an address there names no node.
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return
    raise TargetError(f"{kind} {shown(value)} is an IP address, not a node name")


def slurm_node(value: str, *, strip_domain: bool = True) -> str:
    """A single Slurm node name (hostname syntax); IP addresses are refused."""
    _check("Slurm node name", value, SLURM_NODE_RE, 253)
    _not_an_ip("Slurm node name", value)
    return value.split(".", 1)[0] if strip_domain else value


def k8s_node(value: str) -> str:
    kind = "Kubernetes node name (DNS-1123 subdomain)"
    _check(kind, value, DNS1123_SUBDOMAIN_RE, 253)
    _not_an_ip(kind, value)
    return value


def namespace(value: str) -> str:
    return _check("namespace (DNS-1123 label)", value, DNS1123_LABEL_RE, 63)


def service(value: str) -> str:
    return _check("service name (DNS-1123 label)", value, DNS1123_LABEL_RE, 63)


def site(value: str) -> str:
    return _check("site name", value, SITE_RE, 63)


def cluster(value: str) -> str:
    return _check("cluster name", value, SITE_RE, 63)


# --- webhook payload (Alertmanager webhook version 4) ----------------------------------


class _Model(BaseModel):
    # Alertmanager may add fields in later versions: unknown keys are ignored, but every
    # field used is typed and checked.
    model_config = ConfigDict(extra="ignore", frozen=True)


Labels = dict[str, Annotated[str, Field(max_length=65536)]]


class Alert(_Model):
    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str

    @field_validator("labels")
    @classmethod
    def _alertname(cls, value: dict[str, str]) -> dict[str, str]:
        name = value.get("alertname")
        if name is None:
            raise ValueError("has no alertname label")
        if not ALERTNAME_RE.fullmatch(name):
            raise ValueError(f"alertname {shown(name)} is not a valid alert name")
        return value

    @field_validator("fingerprint")
    @classmethod
    def _fingerprint(cls, value: str) -> str:
        if not FINGERPRINT_RE.fullmatch(value):
            raise ValueError(f"fingerprint {shown(value)} is not 1-64 hex digits")
        return value

    @property
    def name(self) -> str:
        return self.labels["alertname"]

    @property
    def starts_at_key(self) -> str:
        """``startsAt`` normalised, so that equal instants give equal keys."""
        return self.startsAt.isoformat()


class WebhookPayload(_Model):
    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupKey: str = ""
    truncatedAlerts: int = 0
    externalURL: str = ""
    groupLabels: Labels = Field(default_factory=dict)
    commonLabels: Labels = Field(default_factory=dict)
    commonAnnotations: Labels = Field(default_factory=dict)
    alerts: list[Alert]


class PayloadError(ValueError):
    """The request body is not a valid webhook payload; the message is for the client."""


#: Arrays and objects nested deeper than this are refused before they are parsed: an
#: Alertmanager payload nests 4 levels, and Python's JSON parser recurses once per level.
MAX_JSON_DEPTH = 64
#: A JSON string, or an unterminated one up to the end (never backtracks: the
#: alternatives start with different characters).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in JSON *text*, counted without recursion;
    brackets inside strings do not count."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate((1 if c in "[{" else -1 for c in brackets), initial=0))


def load_json(body: bytes) -> Any:
    """The JSON value of a request body, refused (``PayloadError``) if it is not JSON or
    nests deeper than ``MAX_JSON_DEPTH``."""
    try:
        # the encodings json.loads accepts for bytes, decoded the same way
        text = body.decode(json.detect_encoding(body), "surrogatepass")
    except UnicodeDecodeError as err:
        raise PayloadError(f"body is not valid JSON: {err}") from None
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise PayloadError(
            f"body nests arrays and objects {depth} levels deep; the limit is {MAX_JSON_DEPTH}"
        )
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise PayloadError(f"body is not valid JSON: {err}") from None


def parse_payload(data: Any, max_alerts: int) -> WebhookPayload:
    if not isinstance(data, dict):
        raise PayloadError("body must be a JSON object (an Alertmanager webhook payload)")
    try:
        payload = WebhookPayload.model_validate(data)
    except ValidationError as err:
        problems = []
        for item in err.errors()[:10]:
            where = ".".join(str(part) for part in item["loc"]) or "(top level)"
            problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
        more = err.error_count() - len(problems)
        if more > 0:
            problems.append(f"... and {more} more")
        raise PayloadError("invalid Alertmanager webhook payload: " + "; ".join(problems)) from None
    if len(payload.alerts) > max_alerts:
        raise PayloadError(f"too many alerts in one payload: {len(payload.alerts)} > {max_alerts}")
    return payload
