"""``gotthard deploy render --target systemd``: hardened units for every role.

Each service runs ``gotthard --config SITE_FILE ...`` as a transient ``DynamicUser`` (or
the site's dedicated user) in a read-only file system with no capabilities. A unit
gives up only what its role needs, and says why in a comment:

* the node exporter keeps the host's /proc (PIDs of GPU processes -> Slurm jobs) and
  the GPU device nodes (NVML), so no ``ProtectProc``, ``ProcSubset`` or
  ``PrivateDevices``;
* the kube-bench audit reads root-only Kubernetes files: ``CAP_DAC_READ_SEARCH``;
* the timers write node_exporter's textfile directory (``ReadWritePaths``).

``docs/deploy.md`` lists the exposure score ceiling of each unit
(``systemd-analyze security``); the tests hold the units to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gotthard.config import Config, ConfigError
from gotthard.deploy.roles import AUDIT, DR, NODE_EXPORTER, RUNBOOKS, SLURM_EXPORTER, Role, command
from gotthard.deploy.settings import KubernetesDeploy, SystemdDeploy

#: ``systemd-analyze security`` exposure ceiling of each unit (0 best, 10 worst); the
#: table in docs/deploy.md and the tests read it from here.
EXPOSURE_CEILINGS: dict[str, float] = {
    "gotthard-node-exporter.service": 2.0,
    "gotthard-slurm-exporter.service": 1.5,
    "gotthard-runbooks.service": 1.5,
    "gotthard-dr.service": 1.5,
    "gotthard-kube-bench.service": 2.0,
    "gotthard-policy-textfile.service": 1.5,
}

#: Sandboxing every unit gets.
HARDENING: tuple[tuple[str, str], ...] = (
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("NoNewPrivileges", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("RestrictNamespaces", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("LockPersonality", "yes"),
    ("RemoveIPC", "yes"),
    ("SystemCallArchitectures", "native"),
    ("SystemCallFilter", "@system-service"),
    ("SystemCallFilter", "~@privileged @resources"),
    ("SystemCallErrorNumber", "EPERM"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
    ("UMask", "0077"),
)

#: Sandboxing a unit gets unless its role needs what it hides.
HIDE_PROCESSES = (("ProtectProc", "invisible"), ("ProcSubset", "pid"))
HIDE_DEVICES = (("PrivateDevices", "yes"), ("DevicePolicy", "closed"))
#: Python's own code needs no writable executable memory (NVML, a vendor library, may).
NO_WX = (("MemoryDenyWriteExecute", "yes"),)


@dataclass
class Unit:
    """One service (and its timer, for a periodic job)."""

    name: str
    description: str
    args: list[str]
    why: list[str] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)
    oneshot_calendar: str = ""


def _args(role: Role, *more: str, collectors: Sequence[str] = ()) -> list[str]:
    """The role's command line (:func:`~gotthard.deploy.roles.command`) on every address."""
    return [*command(role, f"0.0.0.0:{role.port}", collectors), *more]


def units(cfg: Config, settings: SystemdDeploy, node: KubernetesDeploy) -> list[Unit]:
    """The units of every role; *node* gives the node exporter's collectors."""
    textfile = settings.textfile_dir
    return [
        Unit(
            NODE_EXPORTER.full_name,
            f"Gotthard {NODE_EXPORTER.summary}",
            _args(NODE_EXPORTER, collectors=node.node_collectors),
            [
                "The host's /proc stays visible: GPU process PIDs are mapped to Slurm jobs",
                "through /proc/<pid>/cgroup. /dev stays: NVML opens /dev/nvidia*.",
            ],
            [("ReadOnlyPaths", "/proc /sys")],
        ),
        Unit(
            SLURM_EXPORTER.full_name,
            f"Gotthard {SLURM_EXPORTER.summary}",
            _args(SLURM_EXPORTER),
            ["squeue/sinfo authenticate through munged's socket (AF_UNIX, /run/munge)."],
            [*HIDE_PROCESSES, *HIDE_DEVICES, *NO_WX],
        ),
        Unit(
            RUNBOOKS.full_name,
            f"Gotthard {RUNBOOKS.summary}",
            _args(
                RUNBOOKS,
                "--token-file=%d/token",
                "--audit-log=/var/log/gotthard/runbooks-audit.jsonl",
            ),
            [
                "The bearer token is handed over as a credential (0400, this unit's user);",
                "the audit log is written to LogsDirectory.",
            ],
            [
                ("LoadCredential", "token:/etc/gotthard/runbooks-webhook.token"),
                ("LogsDirectory", "gotthard"),
                *HIDE_PROCESSES,
                *HIDE_DEVICES,
                *NO_WX,
            ],
        ),
        Unit(
            DR.full_name,
            f"Gotthard {DR.summary}",
            _args(DR),
            ["Job store and placement state: StateDirectory (/var/lib/gotthard)."],
            [("StateDirectory", "gotthard"), *HIDE_PROCESSES, *HIDE_DEVICES, *NO_WX],
        ),
        Unit(
            "gotthard-kube-bench",
            "Gotthard kube-bench audit against the CIS baseline",
            ["audit", "kube-bench", "--run", f"--textfile={textfile}/gotthard_kube_bench.prom"],
            [
                "kube-bench reads root-only Kubernetes files (CAP_DAC_READ_SEARCH) and the",
                "processes' command lines (/proc stays visible). Exit 1 (a finding) is the",
                "metrics' business, not a failed unit.",
            ],
            [
                ("CapabilityBoundingSet", "CAP_DAC_READ_SEARCH"),
                ("AmbientCapabilities", "CAP_DAC_READ_SEARCH"),
                ("ReadWritePaths", textfile),
                ("SuccessExitStatus", "1"),
                *HIDE_DEVICES,
                *NO_WX,
            ],
            settings.audit_calendar,
        ),
        Unit(
            "gotthard-policy-textfile",
            "Gotthard policy audit of the live cluster, as textfile metrics",
            _args(AUDIT, f"--textfile={textfile}/gotthard_policy.prom"),
            ["Writes gotthard_policy_violations for node_exporter's textfile collector."],
            [
                ("ReadWritePaths", textfile),
                ("SuccessExitStatus", "1"),
                *HIDE_PROCESSES,
                *HIDE_DEVICES,
                *NO_WX,
            ],
            settings.policy_calendar,
        ),
    ]


def _lines(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return [f"{key}={value}" for key, value in pairs]


def service_text(unit: Unit, cfg: Config, settings: SystemdDeploy) -> str:
    user = [("User", settings.user)] if settings.user else [("DynamicUser", "yes")]
    capabilities = (
        []
        if any(k == "CapabilityBoundingSet" for k, _ in unit.extra)
        else [
            ("CapabilityBoundingSet", ""),
            ("AmbientCapabilities", ""),
        ]
    )
    oneshot = bool(unit.oneshot_calendar)
    service = [
        ("Type", "oneshot" if oneshot else "simple"),
        (
            "ExecStart",
            " ".join([settings.gotthard_bin, "--config", settings.config_file, *unit.args]),
        ),
        *([] if oneshot else [("Restart", "on-failure"), ("RestartSec", "5s")]),
        *user,
        *capabilities,
        *HARDENING,
        *unit.extra,
    ]
    lines = [
        f"# Rendered by `gotthard deploy render --target systemd` (site {cfg.site},"
        f" cluster {cfg.cluster}).",
        *[f"# {line}" for line in unit.why],
        "[Unit]",
        f"Description={unit.description}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        *_lines(service),
    ]
    if not oneshot:
        lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"


def timer_text(unit: Unit) -> str:
    return "\n".join(
        [
            "[Unit]",
            f"Description=Run {unit.name}.service periodically",
            "",
            "[Timer]",
            f"OnCalendar={unit.oneshot_calendar}",
            "RandomizedDelaySec=300",
            "Persistent=true",
            "",
            "[Install]",
            "WantedBy=timers.target",
            "",
        ]
    )


def render(cfg: Config, settings: SystemdDeploy, node: KubernetesDeploy) -> dict[str, str]:
    """File name -> text of every unit (``/etc/systemd/system``), and under ``slurm/``
    the EpilogSlurmctld script and slurm.conf line of this cluster's controller."""
    files = {}
    for unit in units(cfg, settings, node):
        files[f"{unit.name}.service"] = service_text(unit, cfg, settings)
        if unit.oneshot_calendar:
            files[f"{unit.name}.timer"] = timer_text(unit)
    files.update(slurm_epilog(cfg, settings))
    return files


def slurm_epilog(cfg: Config, settings: SystemdDeploy) -> dict[str, str]:
    """``slurm/gotthard-epilog-slurmctld.sh`` (install it next to slurm.conf) and
    ``slurm/slurm.conf.gotthard`` (the line to add to slurm.conf), for this cluster."""
    from gotthard.job import deploy as job

    try:
        slurm_conf = cfg.cluster_config().slurm_conf
    except ConfigError:
        slurm_conf = ""
    where = str(Path(slurm_conf or "/etc/slurm/slurm.conf").parent / job.SCRIPT)
    gotthard = [settings.gotthard_bin, "--config", settings.config_file]
    log = "/var/log/slurm/gotthard-epilog.log"
    script = job.epilog_script(gotthard, cfg.cluster, slurm_conf, log, how="--target systemd")
    return {f"slurm/{job.SCRIPT}": script, "slurm/slurm.conf.gotthard": job.slurm_conf_line(where)}
