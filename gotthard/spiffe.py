"""SPIFFE identities: IDs, the servers' allow-lists, and the SVIDs Gotthard's clients present.

* :func:`parse_id` checks a SPIFFE ID (``spiffe://trust-domain/path``) by the SPIFFE ID
  specification: a lowercase trust domain of ``[a-z0-9.-_]``, path segments of
  ``[A-Za-z0-9.-_]`` that are neither empty, ``.`` nor ``..``; no port, user, query or
  fragment.
* :class:`AllowList` is the ``tls_server_config.allowed_spiffe_ids`` of a web config. An
  entry is either an exact SPIFFE ID or a prefix ending in ``/*``:
  ``spiffe://zurich.example/ns/monitoring/*`` allows every ID whose path starts with
  ``/ns/monitoring/`` and has at least one more segment (it does not allow
  ``spiffe://zurich.example/ns/monitoring`` itself, nor ``/ns/monitoring-x/...``), and
  ``spiffe://zurich.example/*`` allows every workload of that trust domain. Nothing else
  is a pattern (no ``*`` inside a segment).
* :func:`peer_id` reads the SPIFFE ID of a verified peer certificate: an X.509-SVID
  carries exactly one URI SAN, a SPIFFE ID; a certificate with none or several is no SVID.
* :class:`SvidFiles` is the certificate, key and trust bundle that spiffe-helper writes
  and rotates; :meth:`SvidFiles.client_context` re-reads them when they change, so a
  client presents the current SVID at its next connection without a restart.
  :class:`WorkloadApiSvid` fetches the SVID from the SPIFFE Workload API instead (the
  optional ``spiffe`` package, extra ``gotthard-sre[spiffe]``) and keeps it in private
  files the same way.
* ``[spiffe]`` (:class:`SpiffeConfig`) configures the one SVID of the process: the CLI
  calls :func:`use` once, and :func:`client_context` is what the Prometheus client
  presents over HTTPS; with ``kubernetes = true`` the Kubernetes clients present it too
  (:func:`kubernetes_client_files`).
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from gotthard.base import Strict
from gotthard.extras import install_hint

log = logging.getLogger("gotthard.spiffe")

_TRUST_DOMAIN = re.compile(r"[a-z0-9._-]+")
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")


class SpiffeIdError(ValueError):
    """Not a SPIFFE ID (or not an allow-list entry)."""


def parse_id(value: str) -> tuple[str, str]:
    """``(trust_domain, path)`` of the SPIFFE ID *value*; the path is ``""`` or starts
    with ``/``. :class:`SpiffeIdError` says what is wrong."""
    if not isinstance(value, str) or not value.startswith("spiffe://"):
        raise SpiffeIdError(f"{value!r}: a SPIFFE ID starts with spiffe://")
    rest = value[len("spiffe://") :]
    domain, slash, path = rest.partition("/")
    if not _TRUST_DOMAIN.fullmatch(domain):
        raise SpiffeIdError(
            f"{value!r}: the trust domain must be lowercase letters, digits, '.', '-' or '_'"
        )
    if not slash:
        return domain, ""
    for segment in path.split("/"):
        if not _SEGMENT.fullmatch(segment) or segment in (".", ".."):
            raise SpiffeIdError(
                f"{value!r}: path segments must be non-empty letters, digits, '.', '-' or '_'"
                " (not '.' or '..')"
            )
    return domain, "/" + path


def trust_domain(spiffe_id: str) -> str:
    return parse_id(spiffe_id)[0]


@dataclass(frozen=True)
class AllowList:
    """Which SPIFFE IDs a server accepts; see the module docstring for the semantics."""

    exact: frozenset[str] = frozenset()
    #: ``spiffe://td/a/b/`` for an entry ``spiffe://td/a/b/*``
    prefixes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        exact: set[str] = set()
        prefixes: list[str] = []
        for entry in entries:
            if isinstance(entry, str) and entry.endswith("/*"):
                base = entry[:-2]
                parse_id(base)
                prefixes.append(base + "/")
            else:
                parse_id(entry)
                exact.add(entry)
        return cls(frozenset(exact), tuple(prefixes))

    def __bool__(self) -> bool:
        return bool(self.exact or self.prefixes)

    def allows(self, spiffe_id: str) -> bool:
        if spiffe_id in self.exact:
            return True
        return any(spiffe_id.startswith(prefix) for prefix in self.prefixes)


def peer_id(cert: Mapping[str, Any] | None) -> str:
    """The SPIFFE ID of a verified peer certificate (``SSLSocket.getpeercert()``);
    :class:`SpiffeIdError` when it carries none, several, or a malformed one."""
    if not cert:
        raise SpiffeIdError("no client certificate")
    uris = [value for kind, value in cert.get("subjectAltName", ()) if kind == "URI"]
    if len(uris) != 1:
        raise SpiffeIdError(f"an X.509-SVID has exactly one URI SAN, this one has {len(uris)}")
    parse_id(uris[0])
    return str(uris[0])


# --- the SVIDs Gotthard's clients present --------------------------------------------------------


Signature = tuple[tuple[int, int, int] | None, ...]


def file_signature(paths: Iterable[Path]) -> Signature:
    """(mtime, size, inode) of each file, None for one that is missing: it changes when a
    file is rewritten or replaced (a rename, as spiffe-helper and kubelet do)."""
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            out.append(None)
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class SvidError(Exception):
    """The SVID files cannot be read, or the Workload API gives no SVID."""


class SvidFiles:
    """An X.509-SVID in files (``svid.pem``, ``svid_key.pem``, ``svid_bundle.pem`` as
    spiffe-helper writes them). :meth:`client_context` is rebuilt when a file changes; a
    half-written rotation that does not load keeps the previous context (logged)."""

    def __init__(self, cert_file: Path, key_file: Path, bundle_file: Path | None = None) -> None:
        self.cert_file, self.key_file, self.bundle_file = cert_file, key_file, bundle_file
        self._lock = threading.Lock()
        self._contexts: dict[str | None, tuple[Any, ssl.SSLContext]] = {}

    def _files(self) -> tuple[Path, ...]:
        files = (self.cert_file, self.key_file, self.bundle_file)
        return tuple(path for path in files if path is not None)

    def client_context(self, cafile: str | None = None) -> ssl.SSLContext:
        """A client context presenting the SVID. It trusts *cafile* when given (a server
        outside SPIFFE, e.g. the Kubernetes API), else the SPIFFE bundle; with the bundle
        the server's host name is not checked (SVIDs carry a SPIFFE ID, not a DNS name)."""
        signature = file_signature([*self._files(), *([Path(cafile)] if cafile else [])])
        with self._lock:
            cached = self._contexts.get(cafile)
            if cached is not None and cached[0] == signature:
                return cached[1]
            try:
                context = self._build(cafile)
            except (OSError, ssl.SSLError) as err:
                if cached is None:
                    raise SvidError(
                        f"cannot load the SVID {self.cert_file} / {self.key_file}: {err}"
                    ) from None
                log.error("keeping the previous SVID: %s: %s", self.cert_file, err)
                return cached[1]
            self._contexts[cafile] = (signature, context)
            return context

    def _build(self, cafile: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=cafile)
        if cafile is None and self.bundle_file is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(str(self.bundle_file))
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context


class WorkloadApiSvid:
    """The SVID from the SPIFFE Workload API (``socket``: ``unix:///run/spire/agent.sock``),
    written to private files (0600, in a 0700 directory) whenever the agent rotates it,
    and served like :class:`SvidFiles`. Needs the ``spiffe`` package."""

    def __init__(self, socket: str) -> None:
        try:
            from spiffe import X509Source
        except ImportError:
            raise SvidError(
                f"the SPIFFE Workload API needs the spiffe package: {install_hint('spiffe')}"
            ) from None
        try:
            self.source = X509Source(socket_path=socket, timeout_in_seconds=10)
        except Exception as err:  # the package raises its own error types
            raise SvidError(f"SPIFFE Workload API at {socket}: {err}") from None
        self.directory = Path(tempfile.mkdtemp(prefix="gotthard-svid-"))
        os.chmod(self.directory, 0o700)
        self.files = SvidFiles(
            self.directory / "svid.pem",
            self.directory / "svid_key.pem",
            self.directory / "svid_bundle.pem",
        )
        self._written: object = None
        self._lock = threading.Lock()
        self._write()
        # the agent pushes a rotated SVID: the files follow, for clients that read them
        self.source.subscribe_for_updates(self._write)

    def _write(self) -> None:
        from cryptography.hazmat.primitives.serialization import Encoding

        with self._lock:
            svid = self.source.svid
            if svid is self._written:
                return
            svid.save(self.files.cert_file, self.files.key_file, Encoding.PEM)
            context = self.source.get_x509_context()
            pem = b"".join(
                cert.public_bytes(Encoding.PEM)
                for bundle in context.x509_bundle_set.bundles
                for cert in bundle.x509_authorities
            )
            assert self.files.bundle_file is not None
            self.files.bundle_file.write_bytes(pem)
            self._written = svid

    def client_context(self, cafile: str | None = None) -> ssl.SSLContext:
        self._write()
        return self.files.client_context(cafile)


SvidSource = SvidFiles | WorkloadApiSvid


class SpiffeConfig(Strict):
    """``[spiffe]``: the X.509-SVID Gotthard's own clients present. Either the files
    spiffe-helper writes (``cert_file``, ``key_file``, ``bundle_file``) or the SPIFFE
    Workload API (``workload_api_socket``, e.g. ``unix:///run/spire/agent-sockets/
    spire-agent.sock``; needs ``gotthard-sre[spiffe]``); neither: no SVID."""

    cert_file: str = ""
    key_file: str = ""
    #: the trust bundle a SPIFFE server (Prometheus behind mTLS) is verified against
    bundle_file: str = ""
    workload_api_socket: str = ""
    #: present the SVID to Kubernetes API servers too (instead of the kubeconfig's own
    #: client certificate; the API server must trust the bundle as a client CA)
    kubernetes: bool = False
    # --- what ``gotthard deploy render --target spiffe`` emits (gotthard/deploy/identities.py)
    #: site -> its SPIRE trust domain (``zurich = "zurich.example"``)
    trust_domains: dict[str, str] = Field(default_factory=dict)
    #: site -> its SPIRE server's federation bundle endpoint (``https://host:8443``)
    bundle_endpoints: dict[str, str] = Field(default_factory=dict)
    #: the ServiceAccounts of the Prometheus that scrapes and the Alertmanager that
    #: calls the webhook (in ``[deploy.kubernetes] prometheus_namespace``)
    prometheus_service_account: str = "prometheus-k8s"
    alertmanager_service_account: str = "alertmanager-main"
    #: where spiffe-helper writes svid.pem, svid_key.pem and svid_bundle.pem in a pod
    svid_directory: str = "/run/spiffe"
    #: ClusterSPIFFEID ``className`` (several SPIRE installations in one cluster)
    class_name: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> SpiffeConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file go together")
        if self.workload_api_socket and (self.cert_file or self.bundle_file):
            raise ValueError("workload_api_socket or the files, not both")
        if self.kubernetes and not (self.cert_file or self.workload_api_socket):
            raise ValueError("kubernetes = true needs an SVID (cert_file or workload_api_socket)")
        for site, domain in self.trust_domains.items():
            if not _TRUST_DOMAIN.fullmatch(domain):
                raise ValueError(
                    f"trust_domains.{site}: {domain!r} is not a trust domain"
                    " (lowercase letters, digits, '.', '-', '_')"
                )
        for site, url in self.bundle_endpoints.items():
            if not url.startswith("https://"):
                raise ValueError(f"bundle_endpoints.{site}: {url!r} must be an https:// URL")
        return self

    @property
    def configured(self) -> bool:
        return bool(self.cert_file or self.workload_api_socket)


_config = SpiffeConfig()
_source: SvidSource | None = None
_source_lock = threading.Lock()


def use(config: SpiffeConfig) -> None:
    """Make *config* the process's SVID (the source is opened at its first use)."""
    global _config, _source
    with _source_lock:
        _config, _source = config, None


def source() -> SvidSource | None:
    """The process's SVID source, or None when ``[spiffe]`` configures none."""
    global _source
    with _source_lock:
        if _source is None and _config.configured:
            if _config.workload_api_socket:
                _source = WorkloadApiSvid(_config.workload_api_socket)
            else:
                bundle = Path(_config.bundle_file) if _config.bundle_file else None
                _source = SvidFiles(Path(_config.cert_file), Path(_config.key_file), bundle)
        return _source


def client_context(cafile: str | None = None) -> ssl.SSLContext | None:
    """An SSL context presenting the process's SVID, or None (no SVID configured)."""
    svid = source()
    return svid.client_context(cafile) if svid is not None else None


def kubernetes_client_files() -> tuple[str, str] | None:
    """``(cert_file, key_file)`` for the Kubernetes clients when ``[spiffe] kubernetes``
    is set. urllib3 loads them at every new connection, so a rotation applies without a
    restart."""
    if not _config.kubernetes:
        return None
    svid = source()
    if svid is None:
        return None
    files = svid.files if isinstance(svid, WorkloadApiSvid) else svid
    return str(files.cert_file), str(files.key_file)
