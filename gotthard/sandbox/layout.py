"""Where a sandbox keeps its files, which ports it listens on and its services' URLs."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gotthard.sandbox.netns import ControllerNet
from gotthard.sandbox.processes import search_path

#: Longest path accepted for a unix socket (sun_path is 108 bytes including the NUL).
MAX_SOCKET_PATH = 107
#: slurmstepd listens on ``<SlurmdSpoolDir>/<node>_<jobid>.<stepid>``; room for job ids up
#: to 7 digits and the 10-digit batch/extern step ids.
STEPD_SOCKET_SUFFIX = "_1234567.4294967291"


#: Process name -> the loopback port it listens on, unless the sandbox is given others.
DEFAULT_PORTS: dict[str, int] = {
    "slurmctld": 6817,
    "slurmd": 6818,
    "exporter": 9877,
    "prometheus": 9090,
    "alertmanager": 9093,
    "runbooks": 9878,
    # only with accounting (:mod:`gotthard.sandbox.accounting`)
    "slurmdbd": 6819,
    "mariadb": 3307,
}


#: Slurm's ClusterName of a single-site sandbox.
DEFAULT_CLUSTER_NAME = "gotthard-sandbox"
#: The site file a sandbox writes into its directory (what ``deploy render`` reads).
SITE_FILE = "site.toml"


def local_url(port: int) -> str:
    """``http://127.0.0.1:<port>``: every sandbox service listens on loopback only."""
    return f"http://127.0.0.1:{port}"


class SandboxLayout:
    """Paths, ports and URLs of a single-node site under ``directory``; starts nothing."""

    def __init__(
        self,
        directory: Path,
        *,
        ports: Mapping[str, int] | None = None,
        node_name: str = "gotthard-node",
        gpus: int = 2,
        exporter_poll_interval: float = 5.0,
        cluster_name: str = DEFAULT_CLUSTER_NAME,
        maintenance_node: str = "",
        backup_controller: bool = False,
        accounting: bool = False,
        slurm_conf_extra: Sequence[str] = (),
        site_settings: Mapping[str, Any] | None = None,
    ) -> None:
        if gpus < 0:
            raise ValueError("gpus must be >= 0")
        unknown = sorted(set(ports or {}) - set(DEFAULT_PORTS))
        if unknown:
            raise ValueError(f"unknown sandbox process(es) for ports: {', '.join(unknown)}")
        self.directory = Path(directory).absolute()
        self._ports = {**DEFAULT_PORTS, **(ports or {})}
        self.node_name = node_name
        #: Slurm's ClusterName (a site of the two-site sandbox uses the site's name).
        self.cluster_name = cluster_name
        #: A second node, defined drained for maintenance and never started ("" = none),
        #: so that the dashboards' maintenance-drain panels have a node to show.
        self.maintenance_node = maintenance_node
        self.gpus = gpus
        #: Run a backup slurmctld too (in namespaces of its own: :mod:`.netns`).
        self.backup_controller = backup_controller
        #: Run MariaDB and slurmdbd too, with the fair-share tree of
        #: :mod:`gotthard.sandbox.accounting` (priority/multifactor).
        self.accounting = accounting
        #: The backup's namespace and addresses, once ``up`` made them.
        self.controller_net: ControllerNet | None = None
        self.exporter_poll_interval = exporter_poll_interval
        #: ``Key=Value`` lines added to slurm.conf, each replacing the sandbox's line of
        #: the same key (accounting through a slurmdbd, an EpilogSlurmctld)
        self.slurm_conf_extra = tuple(slurm_conf_extra)
        #: Tables merged into the site file ``up`` writes (more roles and their settings)
        self.site_settings: dict[str, Any] = dict(site_settings or {})

        base = self.directory
        self.slurm_conf = base / "slurm.conf"
        self.gres_conf = base / "gres.conf"
        #: The site file: ``GOTTHARD_CONFIG`` of the sandbox's environment.
        self.gotthard_config = base / SITE_FILE
        self.state_file = base / "state.json"
        self.log_dir = base / "logs"
        self.munge_dir = base / "munge"
        self.jwt_key = base / "jwt_hs256.key"
        #: Shared secret between Alertmanager and the runbook webhook.
        self.webhook_token = base / "webhook.token"
        #: Working directory of submitted jobs (their ``slurm-N.out``).
        self.job_dir = base / "jobs"

        self.socket_dir = self._socket_dir()
        private = self.socket_dir != self.directory
        self.slurmd_spool = self.socket_dir / ("slurmd" if private else "spool/slurmd")
        self.munge_socket = (self.socket_dir if private else self.munge_dir) / "munge.socket"
        self.slurmrestd_socket = self.socket_dir / "slurmrestd.sock"

        self.exporter_url = local_url(self.port("exporter"))
        self.prometheus_url = local_url(self.port("prometheus"))
        self.alertmanager_url = local_url(self.port("alertmanager"))
        self.runbooks_url = local_url(self.port("runbooks"))

    def _socket_dir(self) -> Path:
        """Where unix sockets live: munged's, slurmrestd's and slurmstepd's (the slurmd
        spool). The sandbox directory itself when its paths fit a unix socket address
        (107 bytes), else a short private ``/tmp/gotthard-<hash>`` removed by ``down``;
        pytest's ``tmp_path`` is often too long for slurmstepd's sockets."""
        longest = self.directory / "spool" / "slurmd" / f"{self.node_name}{STEPD_SOCKET_SUFFIX}"
        if len(str(longest)) <= MAX_SOCKET_PATH:
            return self.directory
        digest = hashlib.sha256(str(self.directory).encode()).hexdigest()[:12]
        return Path("/tmp") / f"gotthard-{digest}"

    def port(self, name: str) -> int:
        """The port process *name* (a :data:`DEFAULT_PORTS` key) listens on."""
        return self._ports[name]

    def ports(self) -> dict[str, int]:
        """Every port by the name of the process that listens on it."""
        return dict(self._ports)

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess that talks to this sandbox (a full copy of ours)."""
        env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JWT", "SLURM_CONF")}
        env["SLURM_CONF"] = str(self.slurm_conf)
        env["GOTTHARD_CONFIG"] = str(self.gotthard_config)
        env["PATH"] = os.pathsep.join(search_path())
        return env
