"""End to end: a real Alertmanager notifies the webhook, which drains and resumes the node
of the real session Slurm sandbox (``slurm_sandbox``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gotthard.monitoring.rules import dump_yaml
from gotthard.sandbox import Sandbox
from tests.runbooks.conftest import (
    REPAIR_QUERY,
    TOKEN,
    RecordingKubernetes,
    RepairFeed,
    alert_payload,
    post_json,
    sandbox_node,
    sandbox_settings,
    with_repair_query,
)
from tests.support.monitoring import Processes, binary, start_alertmanager
from tests.support.wait import wait_until


@pytest.fixture
def alertmanager(short_tmp: Path) -> Iterator[Callable[[str], str]]:
    """Start a real Alertmanager notifying a webhook URL (bearer TOKEN); its URL."""
    with Processes(short_tmp / "logs") as procs:

        def start(webhook_url: str) -> str:
            token = short_tmp / "token"
            token.write_text(TOKEN + "\n")
            config = {
                "route": {
                    "receiver": "runbook-webhook",
                    "group_by": ["alertname", "cluster"],
                    "group_wait": "1s",
                    "group_interval": "1s",
                    "repeat_interval": "2s",  # repeated notifications: must not repeat actions
                },
                "receivers": [
                    {
                        "name": "runbook-webhook",
                        "webhook_configs": [
                            {
                                "url": webhook_url,
                                "send_resolved": True,
                                "http_config": {
                                    "authorization": {
                                        "type": "Bearer",
                                        "credentials_file": str(token),
                                    }
                                },
                            }
                        ],
                    }
                ],
            }
            (short_tmp / "am.yml").write_text(dump_yaml(config))
            return start_alertmanager(procs, short_tmp / "am.yml", short_tmp)

        yield start


def _push(am_url: str, labels: dict[str, str], starts: datetime, ends: datetime) -> None:
    body = [
        {
            "labels": labels,
            "annotations": {
                "summary": "A GPU has fallen off the bus or been lost by the driver.",
                "repair_query": REPAIR_QUERY,
            },
            "startsAt": starts.isoformat(),
            "endsAt": ends.isoformat(),
        }
    ]
    assert post_json(f"{am_url}/api/v2/alerts", body, timeout=5)[0] == 200


def test_gpu_lost_drains_and_resolve_resumes_the_real_node(
    tmp_path: Path,
    node_restored: Sandbox,
    start_server: Any,
    alertmanager: Any,
    repair_feed: RepairFeed,
) -> None:
    sandbox = node_restored
    repair_feed.health(sandbox.node_name, 0)  # the GPU is lost
    kubernetes = RecordingKubernetes()
    running = start_server(
        sandbox_settings(tmp_path, mode="enforce", prometheus_url=repair_feed.url),
        kubernetes=kubernetes,
        slurm_conf=str(sandbox.slurm_conf),
    )
    am_url = alertmanager(f"{running.url}/alerts")
    labels = {
        "alertname": "GPULost",
        "severity": "critical",
        "site": "zurich",
        "cluster": "sandbox",
        "instance": f"{sandbox.node_name}:9877",
        "node": sandbox.node_name,
        "gpu": "0",
    }
    starts = datetime.now(UTC)
    _push(am_url, labels, starts, starts + timedelta(hours=1))

    def drains() -> list[dict[str, Any]]:
        return [r for r in running.audit() if r.get("action") == "slurm.drain_node"]

    wait_until(lambda: drains(), 30, "the drain decision")
    state, reason = sandbox_node(sandbox)
    assert state in ("drained", "draining"), state
    assert reason == "gotthard: GPULost"
    # Alertmanager repeats the notification (repeat_interval 2s): no second action.
    wait_until(lambda: len(drains()) >= 2, 30, "a repeated notification")
    results = [r["result"] for r in drains()]
    assert results == ["ok"] + ["duplicate"] * (len(results) - 1)
    assert kubernetes.calls == [("cordon", sandbox.node_name)]

    # Repaired and resolved: Alertmanager sends "resolved" with the alert's repair query,
    # which Prometheus confirms; the node is resumed and uncordoned.
    repair_feed.health(sandbox.node_name, 1)
    _push(am_url, labels, starts, datetime.now(UTC))

    def resumes() -> list[dict[str, Any]]:
        return [r for r in running.audit() if r.get("action") == "slurm.resume_node"]

    wait_until(lambda: resumes(), 30, "the resume decision")
    assert resumes()[0]["result"] == "ok" and resumes()[0]["status"] == "resolved"
    wait_until(lambda: sandbox_node(sandbox)[0] == "idle", 30, "the node resumed")
    wait_until(lambda: ("uncordon", sandbox.node_name) in kubernetes.calls, 15, "uncordon")


def test_dry_run_changes_nothing_on_the_real_node(
    tmp_path: Path, node_restored: Sandbox, start_server: Any, repair_feed: RepairFeed
) -> None:
    sandbox = node_restored
    repair_feed.health(sandbox.node_name, 1)
    running = start_server(
        sandbox_settings(tmp_path, prometheus_url=repair_feed.url),
        kubernetes=RecordingKubernetes(),
        slurm_conf=str(sandbox.slurm_conf),
    )
    code, answer = running.post(alert_payload(node=sandbox.node_name))
    assert code == 200 and answer["results"] == {"planned": 3}
    assert sandbox_node(sandbox) == ("idle", "none")
    resolved = with_repair_query(alert_payload(status="resolved", node=sandbox.node_name))
    assert running.post(resolved)[1]["results"] == {"planned": 2}
    assert sandbox_node(sandbox) == ("idle", "none")


def test_resume_leaves_an_operator_drain_alone(
    tmp_path: Path, node_restored: Sandbox, start_server: Any, repair_feed: RepairFeed
) -> None:
    sandbox = node_restored
    repair_feed.health(sandbox.node_name, 1)  # whatever failed is fixed: still not ours
    sandbox.run_command(
        [
            binary("scontrol"),
            "update",
            f"NodeName={sandbox.node_name}",
            "State=DRAIN",
            "Reason=operator maintenance",
        ]
    )
    running = start_server(
        sandbox_settings(tmp_path, mode="enforce", prometheus_url=repair_feed.url),
        slurm_conf=str(sandbox.slurm_conf),
    )
    resolved = alert_payload("SlingshotLinkDown", status="resolved", node=sandbox.node_name)
    assert running.post(with_repair_query(resolved))[1]["results"] == {"skipped": 1}
    assert sandbox_node(sandbox)[1] == "operator maintenance"
