"""The web configuration of every Gotthard server, and what follows it at run time.

The file is Prometheus' exporter-toolkit format (node_exporter's ``--web.config.file``)::

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional
      client_ca_file: ca.crt                          # with client auth (a SPIFFE bundle)
      min_version: TLS12                              # optional, TLS12 or TLS13
      allowed_spiffe_ids:                             # Gotthard: see gotthard.spiffe
        - spiffe://zurich.example/ns/monitoring/sa/alertmanager
    basic_auth_users:
      prometheus: $2b$12$...                          # bcrypt hash
    http_server_config:
      headers:
        X-Frame-Options: deny
    connection_limits:                                # Gotthard: see Limits
      max_unauthenticated_per_address: 32

Relative paths are relative to the file; unknown keys are an error. Two keys are
Gotthard's own (an exporter-toolkit file is read unchanged, but a file that uses them is
not one the exporter-toolkit reads): ``tls_server_config.allowed_spiffe_ids`` (with it,
a client must present an X.509-SVID, verified against ``client_ca_file``, whose SPIFFE ID
the list allows; it needs ``client_auth_type: RequireAndVerifyClientCert``) and
``connection_limits`` (the fields of :class:`Limits`).

:class:`WebReloader` follows the files at run time: when the web config file, the
certificate, the key or the client CA (bundle) change (checked at most every
``Limits.tls_reload_seconds``, at the next connection), it loads them again, so a rotated
certificate, a new SPIFFE bundle, a changed allow-list or changed users apply without a
restart. A new set that does not load is logged and the previous one stays in use.
``connection_limits`` and switching TLS on or off need a restart.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import logging
import re
import ssl
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from gotthard.config import ConfigError
from gotthard.spiffe import AllowList, Signature, SpiffeIdError, file_signature

log = logging.getLogger("gotthard.serve")

#: bcrypt ignores everything after a password's 72nd byte.
BCRYPT_MAX_PASSWORD_BYTES = 72


@dataclass(frozen=True)
class Limits:
    """Budgets and deadlines of one server (web config section ``connection_limits``).

    A connection is *unauthenticated* from its accept until a request on it has passed
    the server's authentication (basic auth, a route's own token, or, when the server
    requires client certificates, the verified certificate at the end of the handshake).
    Unauthenticated connections wait in one event loop, never in a thread, and have their
    own small budget: at most ``max_unauthenticated`` in all and
    ``max_unauthenticated_per_address`` per client address. A new connection beyond
    either budget closes the oldest unauthenticated one (of its own address, or of the
    address holding the most), so a client that connects and sends its request at once
    always gets in. Their deadlines are short: ``handshake_timeout`` for the TLS
    handshake, then ``header_timeout`` for the first request's line and headers.

    Authenticated connections are served by ``workers`` threads, one request at a time;
    between requests they wait in the event loop too (up to ``idle_timeout``, at most
    ``max_connections`` of them; beyond that the longest idle one is closed). Once a
    request's first byte arrives its line, headers and body must arrive within
    ``read_timeout``; a body that does not is answered ``408``.
    """

    max_unauthenticated: int = 256
    max_unauthenticated_per_address: int = 32
    handshake_timeout: float = 3.0
    header_timeout: float = 5.0
    max_connections: int = 1024
    workers: int = 32
    read_timeout: float = 10.0
    idle_timeout: float = 120.0
    write_timeout: float = 30.0
    tls_reload_seconds: float = 5.0
    backlog: int = 1024
    max_header_bytes: int = 65536


def _limits(file: Path, raw: object) -> Limits:
    fields = {f.name: f.type for f in dataclasses.fields(Limits)}
    values = _section(file, raw, fields, "connection_limits")
    out: dict[str, Any] = {}
    for key, value in values.items():
        kind = int if fields[key] in (int, "int") else float
        # tls_reload_seconds may be 0: look at the files at every connection
        least = 0 if key == "tls_reload_seconds" else 1e-9
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= least
        if not ok or (kind is int and not float(value).is_integer()):
            what = "a positive whole number" if kind is int else "a positive number of seconds"
            what = "a number of seconds >= 0" if key == "tls_reload_seconds" else what
            raise WebConfigError(f"{file}: connection_limits.{key}: must be {what}")
        out[key] = kind(value)
    return Limits(**out)


# --- web configuration -----------------------------------------------------------------------


class WebConfigError(ConfigError):
    """The web configuration file, or a TLS file it names, is unreadable or invalid."""


@dataclass(frozen=True)
class WebConfig:
    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    allowed_spiffe_ids: AllowList = field(default_factory=AllowList)
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    limits: Limits = Limits()
    #: The file this was read from, for messages; None when built in code.
    source: Path | None = None

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    @property
    def tls_files(self) -> tuple[Path, ...]:
        files = (self.cert_file, self.key_file, self.client_ca_file)
        return tuple(path for path in files if path is not None)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A server context with the certificate, key and client CA loaded now; an error
        names the file and its key in the web config."""
        if not self.tls:
            return None
        where = f"{self.source}: " if self.source else ""
        for key, path in (
            ("cert_file", self.cert_file),
            ("key_file", self.key_file),
            ("client_ca_file", self.client_ca_file),
        ):
            try:
                if path is not None:
                    path.read_bytes()
            except OSError as err:
                raise WebConfigError(
                    f"{where}tls_server_config.{key}: cannot read {path}: {err.strerror or err}"
                ) from None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = (
            ssl.TLSVersion.TLSv1_3 if self.min_version == "TLS13" else ssl.TLSVersion.TLSv1_2
        )
        try:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as err:
            raise WebConfigError(
                f"{where}tls_server_config: cert_file {self.cert_file} with key_file"
                f" {self.key_file}: not a PEM certificate and its private key{_reason(err)}"
            ) from None
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(str(self.client_ca_file))
            except (OSError, ssl.SSLError) as err:
                raise WebConfigError(
                    f"{where}tls_server_config.client_ca_file: {self.client_ca_file}:"
                    f" no PEM CA certificate{_reason(err)}"
                ) from None
        if self.client_auth_type == "RequireAndVerifyClientCert":
            context.verify_mode = ssl.CERT_REQUIRED
        elif self.client_auth_type == "VerifyClientCertIfGiven":
            context.verify_mode = ssl.CERT_OPTIONAL
        return context


def _reason(err: OSError | ssl.SSLError) -> str:
    """`` (what OpenSSL says)`` when it names a reason (``key values mismatch``), else ""."""
    reason = getattr(err, "reason", None)
    return f" ({reason.lower().replace('_', ' ')})" if reason else ""


_CLIENT_AUTH = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config", "connection_limits"}
_TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "allowed_spiffe_ids",
}
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


def _section(file: Path, value: object, allowed: Collection[str], name: str = "") -> dict[Any, Any]:
    """*value* as a mapping with only *allowed* keys; *name* is its key, empty for the
    file's top level."""
    where = f"{name}: " if name else ""
    if not isinstance(value, dict):
        at = "" if name else " at the top level"
        raise WebConfigError(f"{file}: {where}expected a mapping{at}")
    unknown = set(value) - set(allowed)
    if unknown:
        raise WebConfigError(f"{file}: {where}unknown key(s): {', '.join(sorted(unknown))}")
    return value


def _tls_settings(file: Path, tls: dict[str, Any]) -> dict[str, Any]:
    """The TLS fields of :class:`WebConfig` from ``tls_server_config``; relative paths are
    relative to the file."""

    def rel(key: str) -> Path:
        value = tls.get(key)
        if not isinstance(value, str) or not value:
            raise WebConfigError(f"{file}: tls_server_config.{key}: must be a file path")
        candidate = Path(value)
        return candidate if candidate.is_absolute() else file.parent / candidate

    cert = key = ca = None
    if tls:
        cert, key = rel("cert_file"), rel("key_file")
        if tls.get("client_ca_file"):
            ca = rel("client_ca_file")
    client_auth = tls.get("client_auth_type", "NoClientCert")
    if client_auth not in _CLIENT_AUTH:
        raise WebConfigError(
            f"{file}: tls_server_config.client_auth_type: must be one of {', '.join(_CLIENT_AUTH)}"
        )
    if client_auth != "NoClientCert" and ca is None:
        raise WebConfigError(
            f"{file}: tls_server_config.client_ca_file: required with {client_auth}"
        )
    min_version = tls.get("min_version", "TLS12")
    if min_version not in ("TLS12", "TLS13"):
        raise WebConfigError(f"{file}: tls_server_config.min_version: must be TLS12 or TLS13")
    allowed = _allow_list(file, tls.get("allowed_spiffe_ids"), client_auth)
    return {
        "allowed_spiffe_ids": allowed,
        "cert_file": cert,
        "key_file": key,
        "client_auth_type": client_auth,
        "client_ca_file": ca,
        "min_version": min_version,
    }


def _allow_list(file: Path, raw: object, client_auth: str) -> AllowList:
    """``tls_server_config.allowed_spiffe_ids``: SPIFFE IDs and ``.../*`` prefixes."""
    key = f"{file}: tls_server_config.allowed_spiffe_ids"
    if raw is None:
        return AllowList()
    if not isinstance(raw, list) or not raw:
        raise WebConfigError(f"{key}: expected a non-empty list of SPIFFE IDs")
    if client_auth != "RequireAndVerifyClientCert":
        raise WebConfigError(f"{key}: needs client_auth_type: RequireAndVerifyClientCert")
    try:
        return AllowList.parse(raw)
    except SpiffeIdError as err:
        raise WebConfigError(f"{key}: {err}") from None


def _users(file: Path, users_raw: object) -> dict[str, bytes]:
    """``basic_auth_users``: user -> bcrypt hash."""
    if not isinstance(users_raw, dict):
        raise WebConfigError(f"{file}: basic_auth_users: expected a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in users_raw.items():
        if not isinstance(hashed, str) or not _BCRYPT_HASH.fullmatch(hashed):
            raise WebConfigError(f"{file}: basic_auth_users.{user}: must be a bcrypt hash")
        users[str(user)] = hashed.encode()
    return users


def load_web_config(path: str | Path) -> WebConfig:
    """The web config *path*, its TLS files loaded once to check them; a
    :class:`WebConfigError` names the file and the key that is wrong."""
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except OSError as err:
        raise WebConfigError(f"{file}: cannot read web config: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise WebConfigError(f"{file}: not valid YAML: {err}") from None
    data = _section(file, data, _TOP_KEYS)
    tls = _section(file, data.get("tls_server_config") or {}, _TLS_KEYS, "tls_server_config")
    settings = _tls_settings(file, tls)
    users = _users(file, data.get("basic_auth_users") or {})
    http = data.get("http_server_config") or {}
    headers = http.get("headers") or {} if isinstance(http, dict) else {}
    if not isinstance(headers, dict):
        raise WebConfigError(f"{file}: http_server_config.headers: expected a mapping")
    headers = {str(k): str(v) for k, v in headers.items()}
    limits = _limits(file, data.get("connection_limits") or {})
    web = WebConfig(**settings, basic_auth_users=users, headers=headers, limits=limits, source=file)
    web.ssl_context()  # the TLS files load now, or the error names them
    return web


def optional_web_config(path: str | Path | None) -> WebConfig | None:
    """``load_web_config(path)``, or None when no file is configured (plain HTTP)."""
    return load_web_config(path) if path else None


# --- basic auth ------------------------------------------------------------------------------


class BasicAuth:
    """Check ``Authorization: Basic`` against bcrypt hashes.

    bcrypt is slow on purpose, so a verified (user, password) pair is remembered as a
    SHA-256 digest and later requests with it skip bcrypt. Unknown users and wrong
    passwords both pay one bcrypt check at the configured cost.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._verified: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._dummy = b""
        if self.users:
            cost = max(int(hashed.split(b"$")[2]) for hashed in self.users.values())
            self._dummy = bcrypt.hashpw(b"no such user", bcrypt.gensalt(rounds=cost))

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def check(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return False
        user, _, secret = decoded.partition(":")
        password = secret.encode()[:BCRYPT_MAX_PASSWORD_BYTES]
        hashed = self.users.get(user)
        if hashed is None:
            bcrypt.checkpw(password, self._dummy)  # the same cost as a real check
            return False
        digest = hashlib.sha256(hashed + b"\0" + password).digest()
        with self._lock:
            seen = self._verified.get(user)
        if seen is not None and hmac.compare_digest(digest, seen):
            return True
        if bcrypt.checkpw(password, hashed):
            with self._lock:
                self._verified[user] = digest
            return True
        return False


# --- the web config at run time: it and its TLS files are followed ------------------------------


def certificate_not_after(path: Path) -> float | None:
    """The notAfter of the (first) certificate in the PEM file *path*, in Unix seconds;
    None when it cannot be read."""
    try:
        # the stdlib's PEM decoder (no third-party X.509 library is needed for one field)
        decoded = ssl._ssl._test_decode_cert(str(path))  # type: ignore[attr-defined]
        return float(ssl.cert_time_to_seconds(decoded["notAfter"]))
    except (OSError, ssl.SSLError, KeyError, ValueError):
        return None


@dataclass(frozen=True)
class WebState:
    """One loaded generation of the web config: what a new connection is served with."""

    web: WebConfig
    context: ssl.SSLContext | None
    auth: BasicAuth
    #: notAfter of the certificate being served: read once per load, not per scrape
    not_after: float | None


class WebReloader:
    """The current :class:`WebState`, loaded again when the web config file or a TLS file
    it names changes (see the module docstring)."""

    def __init__(self, web: WebConfig, check_seconds: float) -> None:
        self.check_seconds = check_seconds
        self._state = self._load(web, None)
        self._signature = self._stat(web)
        self._failed: Signature | None = None
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @staticmethod
    def _stat(web: WebConfig) -> Signature:
        return file_signature((*([web.source] if web.source else []), *web.tls_files))

    @staticmethod
    def _load(web: WebConfig, previous: WebState | None) -> WebState:
        auth = (
            previous.auth
            if previous and previous.web.basic_auth_users == web.basic_auth_users
            else None
        )
        not_after = certificate_not_after(web.cert_file) if web.cert_file else None
        return WebState(web, web.ssl_context(), auth or BasicAuth(web.basic_auth_users), not_after)

    @property
    def state(self) -> WebState:
        """The state in use, without looking at the files."""
        return self._state

    def current(self) -> WebState:
        now = time.monotonic()
        with self._lock:
            if now - self._checked < self.check_seconds:
                return self._state
            self._checked = now
            old = self._state
            signature = self._stat(old.web)
            if signature in (self._signature, self._failed):
                return old
            try:
                web = load_web_config(old.web.source) if old.web.source else old.web
                if web.tls != old.web.tls:
                    raise WebConfigError(
                        f"{old.web.source}: switching TLS on or off needs a restart"
                    )
                state = self._load(web, old)
            except WebConfigError as err:
                # Often a half-written replacement; the next change is tried again.
                log.error("keeping the previous web config and TLS certificate: %s", err)
                self._failed = signature
                return old
            log.info("reloaded the web config %s", web.source or web.cert_file)
            self._state, self._signature = state, self._stat(web)
            return state
