"""``dr.record_placement``: the DRServiceFailedOver runbook writes the placement
controller's decision to the audit log, and does nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest

from gotthard.runbooks.actions import DrActions

from .conftest import FakeSlurm, alert_payload, settings_for

ALERT = "DRServiceFailedOver"
LABELS = {"service": "inference", "primary_site": "zurich", "site": "lugano"}


@pytest.fixture
def no_dr_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the DR API (Velero, Karmada) fails the test: the action is audit-only."""

    def refuse(self: DrActions) -> NoReturn:
        raise AssertionError("dr.record_placement must not call the DR API")

    monkeypatch.setattr(DrActions, "_api", refuse)


def _placements(audit: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in audit if r.get("action") == "dr.record_placement"]


@pytest.mark.usefixtures("no_dr_api")
def test_enforce_records_service_primary_site_and_site(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce"))
    status, answer = running.post(alert_payload(ALERT, severity="warning", **LABELS))
    assert status == 200 and answer["results"] == {"ok": 2}  # notify + record
    [record] = _placements(running.audit())
    assert record["alertname"] == ALERT and record["result"] == "ok"
    assert record["targets"] == LABELS
    assert record["why"] == "placement recorded: inference runs at lugano (primary site zurich)"
    assert fake_slurm.calls() == []  # no command of any kind ran


@pytest.mark.usefixtures("no_dr_api")
def test_a_degraded_spread_on_its_primary_says_so(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce"))
    labels = {**LABELS, "site": "zurich"}
    running.post(alert_payload(ALERT, **labels))
    [record] = _placements(running.audit())
    assert record["targets"] == labels
    assert record["why"] == "placement recorded: inference runs at zurich (its primary site)"


def test_dry_run_plans_it_with_the_same_targets(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    assert running.post(alert_payload(ALERT, **LABELS))[1]["results"] == {"planned": 2}
    [record] = _placements(running.audit())
    assert (record["result"], record["targets"]) == ("planned", LABELS)


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({"service": "inference", "site": "lugano"}, "primary_site"),
        ({**LABELS, "site": "lugano;rm -rf"}, "site name"),
        ({**LABELS, "service": "Inference_API"}, "service name"),
    ],
)
@pytest.mark.usefixtures("no_dr_api")
def test_missing_or_malformed_labels_record_nothing(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any, labels: dict[str, str], why: str
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce"))
    assert running.post(alert_payload(ALERT, **labels))[1]["results"] == {"ok": 1, "invalid": 1}
    [record] = _placements(running.audit())
    assert record["result"] == "invalid" and why in record["why"]
    assert record["targets"] == {}
