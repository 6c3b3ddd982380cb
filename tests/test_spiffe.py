"""SPIFFE identities over mTLS: the allow-list of a web config, the runbook webhook that
requires Alertmanager's SPIFFE ID (refusing a valid certificate with another ID, a wrong
trust domain or path, an expired SVID), and rotation without a restart on both sides:
the client's SVID files (spiffe-helper), the server's allow-list, its certificate and
its trust bundle."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import shutil
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gotthard import spiffe
from gotthard.runbooks.engine import AuditLog, Engine
from gotthard.runbooks.server import make_server
from gotthard.serve import WebConfigError, load_web_config
from gotthard.spiffe import AllowList, SpiffeConfig, SpiffeIdError, SvidFiles, parse_id
from tests.runbooks.conftest import TOKEN, sample_payload, settings_for
from tests.support.svid import SpiffeCA, make_ca
from tests.support.tls import write_web_config

ALERTMANAGER = "spiffe://zurich.example/ns/monitoring/sa/alertmanager"
PROMETHEUS = "spiffe://zurich.example/ns/monitoring/sa/prometheus"


# --- IDs and the allow-list -----------------------------------------------------------------


def test_an_allow_list_holds_exact_ids_and_segment_prefixes() -> None:
    allow = AllowList.parse([ALERTMANAGER, "spiffe://zurich.example/ns/gotthard/*"])
    assert allow.allows(ALERTMANAGER)
    assert not allow.allows(ALERTMANAGER + "/x")  # exact means exact
    assert not allow.allows(PROMETHEUS)
    assert allow.allows("spiffe://zurich.example/ns/gotthard/sa/dr")
    assert not allow.allows("spiffe://zurich.example/ns/gotthard")  # a prefix needs more
    assert not allow.allows("spiffe://zurich.example/ns/gotthard-x/sa/dr")  # whole segments
    assert not allow.allows("spiffe://lugano.example/ns/monitoring/sa/alertmanager")
    everyone = AllowList.parse(["spiffe://lugano.example/*"])
    assert everyone.allows("spiffe://lugano.example/ns/monitoring/sa/prometheus")
    assert not everyone.allows("spiffe://lugano.example.evil/ns/a")


@pytest.mark.parametrize(
    "bad",
    [
        "https://zurich.example/ns/a",
        "spiffe://Zurich.example/ns/a",
        "spiffe://zurich.example/ns//a",
        "spiffe://zurich.example/ns/../a",
        "spiffe://zurich.example/ns/a/",
        "spiffe://zurich.example:8443/ns/a",
        "spiffe://zurich.example/ns/a*",
    ],
)
def test_malformed_spiffe_ids_are_refused(bad: str) -> None:
    with pytest.raises(SpiffeIdError):
        AllowList.parse([bad])
    assert parse_id("spiffe://zurich.example/ns/a") == ("zurich.example", "/ns/a")


def test_the_allow_list_is_checked_in_the_web_config(tmp_path) -> None:
    ca = make_ca(tmp_path / "ca")
    cert, key = ca.issue(tmp_path, "server", server=True)
    path = write_web_config(tmp_path / "web.yml", cert, key, allowed_spiffe_ids=[ALERTMANAGER])
    with pytest.raises(WebConfigError, match="needs client_auth_type: RequireAndVerifyClientCert"):
        load_web_config(path)
    path = write_web_config(
        tmp_path / "web.yml", cert, key, client_ca=ca.bundle, allowed_spiffe_ids=["spiffe://x/a/"]
    )
    with pytest.raises(WebConfigError, match="allowed_spiffe_ids: 'spiffe://x/a/'"):
        load_web_config(path)


# --- the webhook that requires Alertmanager's SPIFFE ID ------------------------------------


class Webhook:
    """The runbook webhook requiring *allowed* SPIFFE IDs, its files in ``live/``."""

    def __init__(self, tmp_path: Path, ca: SpiffeCA, allowed: list[str]) -> None:
        self.tmp = tmp_path
        self.live = tmp_path / "live"
        self.live.mkdir(parents=True)
        self.install_ca(ca)
        self.web_file = tmp_path / "web.yml"
        self.allow(allowed)
        settings = settings_for(tmp_path)
        self.engine = Engine(settings, audit=AuditLog(settings.audit_log))
        web = load_web_config(self.web_file)
        self.server = make_server(settings.listen, self.engine, TOKEN.encode(), web=web).start()

    def install_ca(self, ca: SpiffeCA) -> None:
        """The server certificate and bundle of *ca*, replaced as spiffe-helper does."""
        cert, key = ca.issue(self.tmp / ca.trust_domain, "webhook", server=True)
        for source, name in ((cert, "svid.pem"), (key, "svid_key.pem"), (ca.bundle, "bundle.pem")):
            replace(source, self.live / name)

    def allow(self, allowed: list[str]) -> None:
        write_web_config(
            self.tmp / "web.new",
            self.live / "svid.pem",
            self.live / "svid_key.pem",
            client_ca=self.live / "bundle.pem",
            allowed_spiffe_ids=allowed,
            limits={"tls_reload_seconds": 0},
        )
        os.replace(self.tmp / "web.new", self.web_file)

    def post(self, client: SvidFiles) -> int | str:
        """POST an alert with the bearer token as *client*: the status, or ``refused``
        when the TLS handshake failed."""
        request = urllib.request.Request(
            self.server.url + "/alerts",
            data=json.dumps(sample_payload(0)).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=client.client_context()):
                return 200
        except urllib.error.HTTPError as err:
            return err.code
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            return "refused"

    def close(self) -> None:
        self.server.close()
        self.engine.close()


def replace(source: Path, target: Path) -> None:
    """Copy *source* over *target* atomically (a rename, as spiffe-helper writes)."""
    shutil.copy(source, target.with_suffix(".tmp"))
    os.replace(target.with_suffix(".tmp"), target)


@pytest.fixture
def zurich(tmp_path: Path) -> SpiffeCA:
    return make_ca(tmp_path / "zurich-ca", "zurich.example")


@pytest.fixture
def webhook(tmp_path: Path, zurich: SpiffeCA) -> Iterator[Webhook]:
    hook = Webhook(tmp_path / "webhook", zurich, [ALERTMANAGER])
    yield hook
    hook.close()


def client(ca: SpiffeCA, directory: Path, name: str, spiffe_id: str | None, **kw: Any) -> SvidFiles:
    cert, key = ca.issue(directory, name, spiffe_id, **kw)
    return SvidFiles(cert, key, ca.bundle)


def test_the_webhook_accepts_only_alertmanagers_spiffe_id(tmp_path, zurich, webhook) -> None:
    lugano = make_ca(tmp_path / "lugano-ca", "lugano.example")
    clients = tmp_path / "clients"
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    assert webhook.post(client(zurich, clients, "am", ALERTMANAGER)) == 200
    # a valid certificate of the trust domain, with another workload's ID
    assert webhook.post(client(zurich, clients, "prom", PROMETHEUS)) == 403
    # the right name at a wrong path, and in another trust domain (signed by our CA)
    wrong_path = "spiffe://zurich.example/ns/default/sa/alertmanager"
    assert webhook.post(client(zurich, clients, "path", wrong_path)) == 403
    other_domain = "spiffe://lugano.example/ns/monitoring/sa/alertmanager"
    assert webhook.post(client(zurich, clients, "domain", other_domain)) == 403
    # a certificate without a SPIFFE ID is no SVID
    assert webhook.post(client(zurich, clients, "plain", None)) == 403
    # another trust domain's CA, and an expired SVID: the handshake fails
    lugano_svid = client(lugano, clients, "lugano", ALERTMANAGER)
    lugano_svid.bundle_file = zurich.bundle  # it trusts the server; the server not it
    assert webhook.post(lugano_svid) == "refused"
    expired = client(
        zurich,
        clients,
        "expired",
        ALERTMANAGER,
        not_before=past,
        not_after=past + dt.timedelta(hours=1),
    )
    assert webhook.post(expired) == "refused"
    # the refusals never reached the route: the engine decided on one request only
    log = Path(webhook.engine.settings.audit_log).read_text().splitlines()
    requests = {json.loads(line).get("request") for line in log}
    assert len(requests) == 1 and None not in requests, log


def test_rotation_without_restart(tmp_path, zurich, webhook) -> None:
    """spiffe-helper rotates the client's files; the webhook's allow-list, certificate
    and bundle change: each applies at the next connection, nobody restarts."""
    files = tmp_path / "alertmanager"
    files.mkdir()
    first = zurich.issue(tmp_path / "issued", "first", PROMETHEUS)  # a mis-issued SVID
    for source, name in zip(first, ("svid.pem", "svid_key.pem"), strict=True):
        replace(source, files / name)
    replace(zurich.bundle, files / "bundle.pem")
    alertmanager = SvidFiles(files / "svid.pem", files / "svid_key.pem", files / "bundle.pem")
    assert webhook.post(alertmanager) == 403
    # the client's files are rotated to an SVID with the right ID: accepted
    second = zurich.issue(tmp_path / "issued", "second", ALERTMANAGER)
    for source, name in zip(second, ("svid.pem", "svid_key.pem"), strict=True):
        replace(source, files / name)
    assert webhook.post(alertmanager) == 200
    # the server's allow-list changes in its web config: Prometheus is let in too
    prometheus = client(zurich, tmp_path / "prom", "prom", PROMETHEUS)
    assert webhook.post(prometheus) == 403
    webhook.allow([ALERTMANAGER, PROMETHEUS])
    assert webhook.post(prometheus) == 200
    # the trust domain's CA rotates: the server's certificate and bundle, then the client's
    rotated = make_ca(tmp_path / "zurich-ca-2", "zurich.example")
    webhook.install_ca(rotated)
    assert webhook.post(alertmanager) == "refused"  # old SVID, old bundle
    third = rotated.issue(tmp_path / "issued", "third", ALERTMANAGER)
    for source, name in zip(third, ("svid.pem", "svid_key.pem"), strict=True):
        replace(source, files / name)
    replace(rotated.bundle, files / "bundle.pem")
    assert webhook.post(alertmanager) == 200
    # a broken replacement of the web config keeps the last good one
    webhook.web_file.write_text("tls_server_config: [\n")
    assert webhook.post(alertmanager) == 200


def test_the_process_svid_comes_from_the_spiffe_table(tmp_path, zurich) -> None:
    cert, key = zurich.issue(tmp_path, "dr", "spiffe://zurich.example/ns/gotthard/sa/dr")
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        SpiffeConfig(cert_file=str(cert))
    try:
        spiffe.use(SpiffeConfig(cert_file=str(cert), key_file=str(key), kubernetes=True))
        context = spiffe.client_context()
        assert isinstance(context, ssl.SSLContext)
        assert spiffe.kubernetes_client_files() == (str(cert), str(key))
    finally:
        spiffe.use(SpiffeConfig())
    assert spiffe.client_context() is None and spiffe.kubernetes_client_files() is None
