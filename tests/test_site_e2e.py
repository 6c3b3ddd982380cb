"""End to end on the real sandbox Slurm: exporter -> Prometheus -> Alertmanager -> webhook.

The session's real slurmctld is stopped; the real `gotthard exporter` reports
`slurm_up 0`; Prometheus (1 s scrape and evaluation) fires SlurmControllerDown from the
generated rules; Alertmanager delivers it with its runbook_url to a webhook receiver in
the test; the controller comes back and the alert resolves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gotthard.sandbox import Sandbox, free_ports
from tests.support.cli import gotthard_argv
from tests.support.monitoring import (
    Processes,
    WebhookReceiver,
    build_fast_rules,
    get_json,
    start_alerting,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.slurm


def test_controller_outage_pages_through_the_real_stack(
    slurm_sandbox: Sandbox, short_tmp: Path
) -> None:
    slurm_sandbox.start_controller()
    hooks = WebhookReceiver()
    (exporter_port,) = free_ports(1)
    (short_tmp / "token").write_text("e2e-site-token\n")
    out = short_tmp / "rules"
    build_fast_rules(
        out,
        hooks.url,
        short_tmp / "token",
        pager_sites=("zurich",),
        fast_alerts=("SlurmControllerDown",),
    )
    site = short_tmp / "site.toml"
    site.write_text(
        f'[exporter]\nlisten = "127.0.0.1:{exporter_port}"\ncollectors = ["slurm"]\n'
        "[exporter.slurm]\npoll_interval_seconds = 1\ncommand_timeout_seconds = 3\n"
        "probe = false\n"
    )
    try:
        with Processes(short_tmp / "logs") as procs:
            procs.start(
                "exporter", gotthard_argv("--config", str(site), "exporter"), slurm_sandbox.env
            )
            _, prom = start_alerting(
                procs,
                out,
                short_tmp,
                target=f"127.0.0.1:{exporter_port}",
                labels={"site": "zurich", "cluster": "sandbox"},
                scrape_timeout="1s",
            )
            _outage_pages_and_resolves(slurm_sandbox, hooks, prom)
    finally:
        slurm_sandbox.start_controller()
        hooks.close()


def _outage_pages_and_resolves(sandbox: Sandbox, hooks: WebhookReceiver, prom: str) -> None:
    def slurm_up() -> float | None:
        data = get_json(f"{prom}/api/v1/query?query=slurm_up")["data"]["result"]
        return float(data[0]["value"][1]) if data else None

    wait_until(lambda: slurm_up() == 1, 20, "Prometheus scraping slurm_up 1 from the exporter")
    sandbox.stop_controller()
    fired = wait_until(
        lambda: hooks.alerts("/alerts", "SlurmControllerDown", "firing"),
        30,
        "SlurmControllerDown at the runbook webhook",
    )
    auth, alert = fired[0]
    assert auth == "Bearer e2e-site-token"
    assert alert["labels"]["cluster"] == "sandbox" and alert["labels"]["site"] == "zurich"
    assert alert["annotations"]["runbook_url"].endswith("/SlurmControllerDown.md")
    assert Path("docs/runbooks/SlurmControllerDown.md").is_file()
    wait_until(
        lambda: hooks.alerts("/pager/zurich", "SlurmControllerDown", "firing"),
        10,
        "the page to zurich's pager",
    )
    sandbox.start_controller()
    wait_until(
        lambda: hooks.alerts("/alerts", "SlurmControllerDown", "resolved"),
        30,
        "SlurmControllerDown resolved",
    )
