"""The sandbox's observability side: the Gotthard exporter, Prometheus, Alertmanager and the
runbook webhook (dry-run), with the configuration, rules and dashboards they read."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from gotthard.sandbox.layout import SandboxLayout, local_url
from gotthard.sandbox.processes import ProcessTable

#: Binaries ``up`` needs for Prometheus and Alertmanager, by the process they start.
MONITORING_BINARIES = {"prometheus": "prometheus", "alertmanager": "prometheus-alertmanager"}


def gotthard_config_text(layout: SandboxLayout) -> str:
    """``gotthard.toml``: the exporter on the sandbox's Slurm and the runbooks in dry-run."""
    lines = [
        'site = "local"',
        'cluster = "sandbox"',
        "",
        "[sites.local]",
        'display_name = "Sandbox"',
        f'prometheus_url = "{layout.prometheus_url}"',
        "",
        "[sites.local.clusters.sandbox]",
        f'slurm_conf = "{layout.slurm_conf}"',
        "",
        "[exporter]",
        f'listen = "127.0.0.1:{layout.port("exporter")}"',
        'collectors = ["slurm"]',
        "",
        "[exporter.slurm]",
        'backend = "cli"',
        f"poll_interval_seconds = {float(layout.exporter_poll_interval)}",
        "",
        "[runbooks]",
        f'listen = "127.0.0.1:{layout.port("runbooks")}"',
        f'token_file = "{layout.webhook_token}"',
        'mode = "dry-run"',
        f'audit_log = "{layout.log_dir / "runbooks-audit.jsonl"}"',
        f'kill_switch_file = "{layout.directory / "runbooks.disabled"}"',
        'default_cluster = "sandbox"',
        "",
        "[runbooks.limits]",
        "# one node: the default 10% of a partition would refuse every drain",
        "max_partition_fraction = 1.0",
    ]
    return "\n".join(lines) + "\n"


def write_rules_and_dashboards(layout: SandboxLayout) -> None:
    """Recording/alerting rules and the Alertmanager config, plus the dashboard JSON."""
    from gotthard.monitoring import alertmanager, deliver, rules_cli

    token = layout.webhook_token
    if not token.exists():
        token.write_text(secrets.token_hex(16) + "\n")
        token.chmod(0o600)
    settings = alertmanager.AlertmanagerSettings(
        webhook_url=f"{layout.runbooks_url}/alerts",  # the runbook webhook, in dry-run
        webhook_token_file=str(token),
        pager_urls={"local": alertmanager.default_pager_url("local")},
    )
    rules_cli.build(layout.directory / "rules", settings=settings)
    deliver.write_dashboards(layout.directory / "dashboards")


def prometheus_config_text(layout: SandboxLayout) -> str:
    """``prometheus.yml``: the rules, Alertmanager and the exporter as the only target."""
    rules = layout.directory / "rules"
    lines = [
        "# Written by gotthard sandbox.",
        "global:",
        "  scrape_interval: 5s",
        "  evaluation_interval: 5s",
        "rule_files:",
        f"  - {rules / 'recording.rules.yml'}",
        f"  - {rules / 'alerts.rules.yml'}",
        "alerting:",
        "  alertmanagers:",
        "    - static_configs:",
        f"        - targets: ['127.0.0.1:{layout.port('alertmanager')}']",
        "scrape_configs:",
        "  - job_name: gotthard",
        "    scrape_interval: 5s",
        "    scrape_timeout: 4s",
        "    static_configs:",
        f"      - targets: ['127.0.0.1:{layout.port('exporter')}']",
        "        labels:",
        "          site: local",
        "          cluster: sandbox",
    ]
    return "\n".join(lines) + "\n"


def gotthard_argv(layout: SandboxLayout, *command: str) -> list[str]:
    """``python -m gotthard --config <sandbox config> COMMAND...`` with this interpreter.

    ``--config`` is an option of the top-level ``gotthard`` parser, not of the subcommand.
    """
    return [sys.executable, "-m", "gotthard", "--config", str(layout.gotthard_config), *command]


def start_exporter(
    layout: SandboxLayout, procs: ProcessTable, env: Mapping[str, str] | None = None
) -> None:
    argv = gotthard_argv(layout, "exporter")
    procs.start_service("exporter", argv, f"{layout.exporter_url}/healthz", env=env)


def start_alertmanager(layout: SandboxLayout, procs: ProcessTable, binary: str) -> None:
    _start_prometheus_server(
        procs,
        "alertmanager",
        binary,
        layout.directory / "rules" / "alertmanager.yml",
        ("storage.path", layout.directory / "alertmanager"),
        layout.port("alertmanager"),
        "--cluster.listen-address=",  # no gossip: a single local instance
    )


def start_runbooks(layout: SandboxLayout, procs: ProcessTable) -> None:
    """The runbook webhook in dry-run: Alertmanager's critical/warning alerts reach it."""
    argv = gotthard_argv(layout, "runbooks", "serve", "--mode", "dry-run")
    procs.start_service("runbooks", argv, f"{layout.runbooks_url}/healthz")


def start_prometheus(layout: SandboxLayout, procs: ProcessTable, binary: str) -> None:
    config = layout.directory / "prometheus.yml"
    config.write_text(prometheus_config_text(layout))
    _start_prometheus_server(
        procs,
        "prometheus",
        binary,
        config,
        ("storage.tsdb.path", layout.directory / "prometheus"),
        layout.port("prometheus"),
        "--storage.tsdb.retention.time=2d",
        "--web.enable-lifecycle",
        timeout=60.0,
    )


def _start_prometheus_server(
    procs: ProcessTable,
    name: str,
    binary: str,
    config: Path,
    storage: tuple[str, Path],
    port: int,
    *options: str,
    timeout: float = 30.0,
) -> None:
    """Start Prometheus or Alertmanager; both answer ``/-/ready`` once they serve."""
    argv = server_argv(binary, config, storage, port, *options)
    procs.start_service(name, argv, f"{local_url(port)}/-/ready", timeout=timeout)


def server_argv(
    binary: str, config: Path, storage: tuple[str, Path], port: int, *options: str
) -> list[str]:
    """argv of Prometheus or Alertmanager on loopback *port*: both take ``--config.file``,
    a storage directory flag (*storage*: flag name and directory, created here) and
    ``--web.listen-address``."""
    flag, directory = storage
    directory.mkdir(parents=True, exist_ok=True)
    return [
        binary,
        f"--config.file={config}",
        f"--{flag}={directory}",
        f"--web.listen-address=127.0.0.1:{port}",
        *options,
    ]


def start_monitoring(layout: SandboxLayout, procs: ProcessTable, binaries: dict[str, str]) -> None:
    """Rules and dashboards, then Alertmanager, the runbook webhook and Prometheus."""
    write_rules_and_dashboards(layout)
    start_alertmanager(layout, procs, binaries["alertmanager"])
    start_runbooks(layout, procs)
    start_prometheus(layout, procs, binaries["prometheus"])
