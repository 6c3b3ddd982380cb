"""End to end on the real sandbox Slurm: exporter -> Prometheus -> Alertmanager -> webhook,
each one started as ``gotthard deploy render --target local`` lists it, on the files it
renders.

The site file names the session's real Slurm, 1 s scrape and evaluation intervals and a
webhook receiver in the test for every Alertmanager receiver. The session's real
slurmctld is stopped; the real `gotthard exporter` reports `gotthard_slurm_up 0`; Prometheus fires
SlurmControllerDown from the generated rules; Alertmanager delivers it with its
runbook_url to the receiver; the controller comes back and the alert resolves.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gotthard.sandbox import Sandbox, free_ports
from tests.support.cli import gotthard
from tests.support.monitoring import (
    Processes,
    WebhookReceiver,
    binary,
    get_json,
    http_ok,
    load_yaml,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.slurm

ALERT = "SlurmControllerDown"


def site_file(path: Path, sandbox: Sandbox, hook: str, token: Path) -> Path:
    """Site zurich with the sandbox's Slurm as cluster ``sandbox``, every receiver at *hook*."""
    exporter, prometheus, alertmanager = free_ports(3)
    path.write_text(
        f"""\
site = "zurich"
cluster = "sandbox"

[sites.zurich]
prometheus_url = "http://127.0.0.1:{prometheus}"

[sites.zurich.clusters.sandbox]
slurm_conf = "{sandbox.slurm_conf}"

[exporter.slurm]
poll_interval_seconds = 1
command_timeout_seconds = 3
probe = false

[runbooks]
token_file = "{token}"

[deploy.prometheus]
file_sd_dir = ""
scrape_interval = "1s"
scrape_timeout = "1s"
evaluation_interval = "1s"
alert_resend_delay = "1s"

[deploy.prometheus.targets.sandbox]
slurm-exporter = ["127.0.0.1:{exporter}"]

[deploy.alertmanager]
webhook_url = "{hook}/alerts"
pager_urls = {{ zurich = "{hook}/pager/zurich" }}
pager_fallback_url = "{hook}/pager/default"
ticket_url = "{hook}/ticket"
group_wait = "1s"
group_interval = "1s"
repeat_interval = "1h"
ports = {{ zurich = {alertmanager} }}
"""
    )
    return path


def fire_at_once(rules: Path, alert: str) -> None:
    """Test speed: *alert* fires as soon as its condition holds (its ``for`` is 2 minutes)."""
    document = load_yaml(rules)
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                rule["for"] = "0s"
    rules.write_text(yaml.safe_dump(document, sort_keys=False))


def test_controller_outage_pages_through_the_real_stack(
    slurm_sandbox: Sandbox, short_tmp: Path
) -> None:
    slurm_sandbox.start_controller()
    hooks = WebhookReceiver()
    token = short_tmp / "token"
    token.write_text("e2e-site-token\n")
    token.chmod(0o600)
    site = site_file(short_tmp / "site.toml", slurm_sandbox, hooks.url, token)
    out = short_tmp / "run"
    rendered = gotthard("--config", str(site), "deploy", "render", "--target", "local",
                        "--out", str(out))  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    fire_at_once(out / "rules" / "alerts.rules.yml", ALERT)
    listed = json.loads((out / "processes.json").read_text())["processes"]
    assert sorted(p["kind"] for p in listed) == ["alertmanager", "prometheus", "slurm-exporter"]
    (prometheus,) = [p["url"] for p in listed if p["kind"] == "prometheus"]
    try:
        with Processes(short_tmp / "logs") as procs:
            for process in listed:
                program, *args = process["argv"]
                argv = [program if Path(program).is_absolute() else binary(program), *args]
                procs.start(process["name"], argv, slurm_sandbox.env)
            for process in listed:
                wait_until(lambda p=process: http_ok(p["ready_url"]), 30, f"{process['name']}")
            _outage_pages_and_resolves(slurm_sandbox, hooks, prometheus)
    finally:
        slurm_sandbox.start_controller()
        hooks.close()


def _outage_pages_and_resolves(sandbox: Sandbox, hooks: WebhookReceiver, prom: str) -> None:
    def slurm_up() -> float | None:
        data = get_json(f"{prom}/api/v1/query?query=gotthard_slurm_up")["data"]["result"]
        return float(data[0]["value"][1]) if data else None

    wait_until(
        lambda: slurm_up() == 1, 20, "Prometheus scraping gotthard_slurm_up 1 from the exporter"
    )
    sandbox.stop_controller()
    fired = wait_until(
        lambda: hooks.alerts("/alerts", ALERT, "firing"), 30, f"{ALERT} at the runbook webhook"
    )
    auth, alert = fired[0]
    assert auth == "Bearer e2e-site-token"
    assert alert["labels"]["cluster"] == "sandbox" and alert["labels"]["site"] == "zurich"
    assert alert["annotations"]["runbook_url"].endswith(f"/{ALERT}.md")
    assert Path(f"docs/runbooks/{ALERT}.md").is_file()
    wait_until(
        lambda: hooks.alerts("/pager/zurich", ALERT, "firing"), 10, "the page to zurich's pager"
    )
    sandbox.start_controller()
    wait_until(lambda: hooks.alerts("/alerts", ALERT, "resolved"), 30, f"{ALERT} resolved")
