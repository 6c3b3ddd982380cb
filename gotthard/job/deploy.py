"""What ``gotthard deploy render`` writes for the job summary: slurmctld's
``EpilogSlurmctld`` wrapper script and the slurm.conf line naming it (docs/job.md).

slurmctld runs EpilogSlurmctld without arguments and without ``SLURM_CONF``; the
wrapper sets the cluster's slurm.conf and runs ``gotthard job epilog`` for that cluster,
bounded, always exiting 0 (the command itself never fails)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

SCRIPT = "gotthard-epilog-slurmctld.sh"
#: seconds the epilog may take, all of it (``--timeout``)
TIMEOUT = 20


def epilog_script(
    gotthard: Sequence[str], cluster: str, slurm_conf: str, log_file: str, *, how: str
) -> str:
    """The wrapper: *gotthard* is the command with its ``--config FILE``; *how* names the
    render that wrote it."""
    argv = [*gotthard, "job", "epilog", "--cluster", cluster, "--timeout", str(TIMEOUT)]
    argv += ["--log-file", log_file]
    conf = f"export SLURM_CONF={shlex.quote(slurm_conf)}\n" if slurm_conf else ""
    return (
        "#!/bin/sh\n"
        f"# Rendered by `gotthard deploy render {how}`: slurmctld's EpilogSlurmctld for\n"
        f"# cluster {cluster}; stores the job's efficiency summary in its AdminComment.\n"
        f"{conf}"
        f"exec {shlex.join(argv)}\n"
    )


def slurm_conf_line(script_path: str) -> str:
    return f"EpilogSlurmctld={script_path}\n"
