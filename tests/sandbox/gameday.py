"""The game day's instruments (tests/sandbox/test_game_day.py holds the script).

* :class:`GpuNode`: a site's node exporter on the FAKE NVML library, scraped as
  ``nid001:<port>`` through file_sd, as a site's service discovery names its nodes (the
  runbook webhook drains the ``node`` that GPU alerts take from ``instance``);
* :func:`federation_cut`: the global view stops reaching one site's ``/federate`` (its
  target points at a closed port, with its ``instance`` kept) until the block ends;
* :func:`firing_history`: every firing interval of ``ALERTS`` over the run, from a
  Prometheus' TSDB (``query_range``);
* :class:`Fault`: one real fault, its injection, repair, and what the run saw of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gotthard.deploy.roles import NODE_EXPORTER
from gotthard.deploy.settings import seconds
from gotthard.sandbox import free_ports
from gotthard.sandbox.sites import MultiSiteSandbox
from gotthard.sandbox.sites_config import NODE_NAME
from tests.fakenvml import fakenvml
from tests.support.cli import gotthard_argv
from tests.support.monitoring import get_json, instant
from tests.support.wait import wait_until

#: Scrape and evaluation interval of the sandbox.
STEP = 2.0
#: Two firing samples further apart than this are two firing intervals (a Prometheus
#: restart leaves a gap of a few seconds in its ALERTS).
MAX_GAP = 12.0


def say(what: str) -> None:
    print(f"[game day] {what}", flush=True)


# --------------------------------------------------------------------------- GPU node


class GpuNode:
    """nid001's node exporter at *site* (``gpu`` collector) on its own fake NVML fixture:
    four H200 GPUs, no XID events (the fake would deliver old events again to every
    new event set, which a real driver does not)."""

    def __init__(self, root: Path, site: str, file_sd_dir: Path, library: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.site = site
        self.port = free_ports(1)[0]
        self.fixture = fakenvml.Fixture(root / "nvml.txt", fakenvml.h200_node(4))
        config = root / "exporter.toml"
        config.write_text(
            "[exporter]\n"
            f'path_procfs = "{root / "proc"}"\n'
            "[exporter.gpu]\n"
            "poll_interval_seconds = 1.0\n"
            f'kubelet_socket = "{root / "no-kubelet"}"\n'
        )
        (root / "proc").mkdir(exist_ok=True)
        plain = {k: v for k, v in os.environ.items() if k != "GOTTHARD_CONFIG"}
        self.env = fakenvml.subprocess_env(library, self.fixture.path, base=plain)
        listen = f"--listen=127.0.0.1:{self.port}"
        self.argv = gotthard_argv("--config", str(config), "exporter", listen, "--collectors=gpu")
        self.log = root / "node-exporter.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # the role's file_sd file (deploy render's job reads DIR/ROLE/SITE-CLUSTER.yml)
        targets = file_sd_dir / NODE_EXPORTER.name / f"{site}-{site}.yml"
        targets.parent.mkdir(parents=True, exist_ok=True)
        instance = {"instance": f"{NODE_NAME}:{self.port}"}
        entry = {"targets": [f"127.0.0.1:{self.port}"], "labels": instance}
        targets.write_text(json.dumps([entry]))

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        url = f"http://127.0.0.1:{self.port}/metrics"
        wait_until(lambda: "gotthard_gpu_memory_total_bytes" in _text(url), 60, f"{url} with GPUs")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def lose(self, gpu: int) -> None:
        """NVML answers GPU_IS_LOST for *gpu* (fallen off the bus)."""
        self.fixture.update({f"{gpu}.lost": 1})

    def repair(self, gpu: int) -> None:
        self.fixture.update({f"{gpu}.lost": None})


def _text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return str(response.read().decode())
    except OSError:
        return ""


# --------------------------------------------------------------------------- federation


@contextmanager
def federation_cut(sandbox: MultiSiteSandbox, site: str) -> Iterator[None]:
    """The global view cannot reach *site*'s ``/federate``: its target points at a closed
    port, its ``instance`` label kept (the same ``up`` series reads 0), until the block
    ends; the global Prometheus reloads its configuration (SIGHUP) both ways."""
    path = sandbox.directory / "global" / "prometheus.yml"
    original = path.read_text()
    document = yaml.safe_load(original)
    address = sandbox.prometheus_url(site).removeprefix("http://")
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    for job in document["scrape_configs"]:
        for static in job.get("static_configs", []):
            if address in static.get("targets", []):
                static["targets"] = [dead]
                static.setdefault("labels", {})["instance"] = address
    global_url = sandbox.global_url
    up = f'up{{instance="{address}"}}'

    def reads(value: float) -> bool:
        return any(float(s["value"][1]) == value for s in instant(global_url, up))

    try:
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        _reload(sandbox)
        wait_until(lambda: reads(0), 30, f"the global view to lose {site}'s /federate")
        yield
    finally:
        path.write_text(original)
        _reload(sandbox)
    wait_until(lambda: reads(1), 30, f"the global view to federate {site} again")


def _reload(sandbox: MultiSiteSandbox) -> None:
    record = sandbox.process("global-prometheus")
    assert record is not None, "the sandbox runs no global view"
    os.kill(record.pid, signal.SIGHUP)


# --------------------------------------------------------------------------- ALERTS


@dataclass
class Interval:
    """One firing interval of one alert at one Prometheus (sample times, epoch s)."""

    where: str
    labels: dict[str, str]
    start: float
    end: float

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    def matches(self, alertname: str, labels: Mapping[str, str]) -> bool:
        return self.name == alertname and all(self.labels.get(k) == v for k, v in labels.items())

    def __str__(self) -> str:
        shown = {k: v for k, v in self.labels.items() if k not in ("alertstate", "__name__")}
        return f"{self.where}: {shown} firing {self.start:.0f}..{self.end:.0f}"


def firing_history(prometheus: str, where: str, start: float, end: float) -> list[Interval]:
    """Every firing interval of ``ALERTS`` between *start* and *end* at *prometheus*."""
    query = urllib.parse.urlencode(
        {"query": 'ALERTS{alertstate="firing"}', "start": start, "end": end, "step": STEP}
    )
    data = get_json(f"{prometheus}/api/v1/query_range?{query}", timeout=30)
    found = []
    for series in data["data"]["result"]:
        times = [float(t) for t, _ in series["values"]]
        first = last = times[0]
        for t in times[1:]:
            if t - last > MAX_GAP:
                found.append(Interval(where, dict(series["metric"]), first, last))
                first = t
            last = t
        found.append(Interval(where, dict(series["metric"]), first, last))
    return sorted(found, key=lambda i: i.start)


def firing_now(prometheus: str, alertname: str, labels: Mapping[str, str]) -> bool:
    selector = ",".join(f'{k}="{v}"' for k, v in {"alertname": alertname, **labels}.items())
    return bool(instant(prometheus, f'ALERTS{{alertstate="firing",{selector}}}'))


def global_alerts(sandbox: MultiSiteSandbox) -> set[str]:
    """The alerts the global view evaluates itself (its ``rule_files``)."""
    directory = sandbox.directory / "global"
    config = yaml.safe_load((directory / "prometheus.yml").read_text()) or {}
    names = set()
    for name in config.get("rule_files") or []:
        path = directory / name  # an absolute name stays itself
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            names.update(rule["alert"] for rule in group.get("rules", []) if "alert" in rule)
    return names


def rule_for(sandbox: MultiSiteSandbox, alertname: str) -> float | None:
    """The ``for`` (seconds) of *alertname* in the rendered rules; None when no rule has
    that name."""
    for path in sorted((sandbox.directory / "rules").glob("*.yml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            for rule in group.get("rules", []):
                if rule.get("alert") == alertname:
                    return seconds(str(rule.get("for", "0s")))
    return None


# --------------------------------------------------------------------------- audit


def audit(sandbox: MultiSiteSandbox, site: str) -> list[dict[str, Any]]:
    path = sandbox.audit_log(site)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    """One real fault: what pages for it (*alertname* with *labels*, at *site*), how it
    is injected and repaired, and when (epoch s) the run did each."""

    area: str
    site: str
    alertname: str
    labels: dict[str, str]
    inject: Callable[[], None]
    repair: Callable[[], None]
    #: the alert's ``for`` plus what the fault needs to show (a backup schedule's tick)
    page_within: float
    #: how long after its repair the alert may take to resolve
    resolve_within: float = 60.0
    #: the action it must get (besides the page) before it is repaired; None: no action
    acted: Callable[[], bool] | None = None
    times: dict[str, float] = field(default_factory=dict)

    def timeline(self) -> dict[str, Any]:
        """Seconds from the injection to each step."""
        start = self.times["fault"]
        order = ("fault", "page", "notified", "action", "repair", "resolve")
        steps = {k: round(self.times[k] - start, 1) for k in order if k in self.times}
        return {"area": self.area, "site": self.site, "alert": self.alertname, **steps}
