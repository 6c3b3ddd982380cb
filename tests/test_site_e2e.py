"""End to end on the real sandbox Slurm: exporter -> Prometheus -> Alertmanager -> webhook.

The session's real slurmctld is stopped; the real `gotthard exporter` reports
`slurm_up 0`; Prometheus (1 s scrape and evaluation) fires SlurmControllerDown from the
generated rules; Alertmanager delivers it with its runbook_url to a webhook receiver in
the test; the controller comes back and the alert resolves.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gotthard.dashboards import rules
from gotthard.sandbox import Sandbox, free_ports
from tests.dashboards.test_rules import (
    WebhookReceiver,
    _binary,
    _cli,
    _get_json,
    _load,
    _ready,
    _wait,
    short_tmp,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.slurm


def test_controller_outage_pages_through_the_real_stack(
    slurm_sandbox: Sandbox,
    short_tmp: Path,  # noqa: F811
) -> None:
    slurm_sandbox.start_controller()
    hooks = WebhookReceiver()
    exporter_port, prom_port, am_port = free_ports(3)
    hook = f"http://127.0.0.1:{hooks.port}"
    (short_tmp / "token").write_text("e2e-site-token\n")
    out = short_tmp / "rules"
    assert (
        _cli(
            [
                "rules",
                "build",
                "--out",
                str(out),
                "--webhook-url",
                f"{hook}/alerts",
                "--webhook-token-file",
                str(short_tmp / "token"),
                "--pager-url",
                f"zurich={hook}/pager/zurich",
                "--pager-fallback-url",
                f"{hook}/pager/default",
                "--ticket-url",
                f"{hook}/ticket",
            ]
        )
        == 0
    )
    # test speed: 1 s grouping and `for: 0s` on the alert under test
    config = _load(out / "alertmanager.yml")
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    (out / "alertmanager.yml").write_text(rules.dump_yaml(config))
    alerts_doc = _load(out / "alerts.rules.yml")
    for group in alerts_doc["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == "SlurmControllerDown":
                rule["for"] = "0s"
    (out / "alerts.rules.yml").write_text(rules.dump_yaml(alerts_doc))

    site = short_tmp / "site.toml"
    site.write_text(
        f'[exporter]\nlisten = "127.0.0.1:{exporter_port}"\ncollectors = ["slurm"]\n'
        "[exporter.slurm]\npoll_interval_seconds = 1\ncommand_timeout_seconds = 3\n"
        "probe = false\n"
    )
    prometheus_yml = short_tmp / "prometheus.yml"
    prometheus_yml.write_text(
        rules.dump_yaml(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(out / "recording.rules.yml"), str(out / "alerts.rules.yml")],
                "alerting": {
                    "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
                },
                "scrape_configs": [
                    {
                        "job_name": "gotthard",
                        "scrape_timeout": "1s",
                        "static_configs": [
                            {
                                "targets": [f"127.0.0.1:{exporter_port}"],
                                "labels": {"site": "zurich", "cluster": "sandbox"},
                            }
                        ],
                    }
                ],
            }
        )
    )
    logs = [(short_tmp / f"{name}.log").open("w") for name in ("exporter", "am", "prom")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gotthard", "--config", str(site), "exporter"],
            env=slurm_sandbox.env,
            stdout=logs[0],
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                _binary("prometheus-alertmanager"),
                f"--config.file={out / 'alertmanager.yml'}",
                f"--storage.path={short_tmp / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            stdout=logs[1],
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                _binary("prometheus"),
                f"--config.file={prometheus_yml}",
                f"--storage.tsdb.path={short_tmp / 'prom'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--rules.alert.resend-delay=1s",
            ],
            stdout=logs[2],
            stderr=subprocess.STDOUT,
        ),
    ]
    prom = f"http://127.0.0.1:{prom_port}"
    try:
        _wait(lambda: _ready(f"http://127.0.0.1:{am_port}/-/ready"), 15, "Alertmanager ready")
        _wait(lambda: _ready(f"{prom}/-/ready"), 15, "Prometheus ready")

        def slurm_up() -> float | None:
            data = _get_json(f"{prom}/api/v1/query?query=slurm_up")["data"]["result"]
            return float(data[0]["value"][1]) if data else None

        _wait(lambda: slurm_up() == 1, 20, "Prometheus scraping slurm_up 1 from the exporter")
        slurm_sandbox.stop_controller()
        fired = _wait(
            lambda: hooks.alerts("/alerts", "SlurmControllerDown", "firing"),
            30,
            "SlurmControllerDown at the runbook webhook",
        )
        auth, alert = fired[0]
        assert auth == "Bearer e2e-site-token"
        assert alert["labels"]["cluster"] == "sandbox" and alert["labels"]["site"] == "zurich"
        assert alert["annotations"]["runbook_url"].endswith("/SlurmControllerDown.md")
        assert Path("docs/runbooks/SlurmControllerDown.md").is_file()
        _wait(
            lambda: hooks.alerts("/pager/zurich", "SlurmControllerDown", "firing"),
            10,
            "the page to zurich's pager",
        )
        slurm_sandbox.start_controller()
        _wait(
            lambda: hooks.alerts("/alerts", "SlurmControllerDown", "resolved"),
            30,
            "SlurmControllerDown resolved",
        )
    finally:
        slurm_sandbox.start_controller()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()
        hooks.server.shutdown()
        hooks.server.server_close()
