"""Golden-file assertions for ``--once`` exposition output.

``GOTTHARD_UPDATE_GOLDEN=1`` rewrites the golden files with what the tests produce
(review the diff before committing it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: Set (to anything non-empty) to rewrite golden files instead of comparing with them.
UPDATE_ENV = "GOTTHARD_UPDATE_GOLDEN"

#: Values that change from run to run; golden files hold a placeholder instead.
VOLATILE = re.compile(
    r"^((?:gotthard_collector_duration_seconds|gotthard_collector_last_success_timestamp_seconds"
    r"|gotthard_time_seconds|gotthard_slurm_probe_duration_seconds)(?:\{[^}]*\})?) .*$|"
    r"^(gotthard_build_info)\{.*\} 1$",
    re.M,
)


def mask(text: str) -> str:
    """*text* with every volatile sample value replaced by ``<volatile>``."""
    return VOLATILE.sub(lambda m: f"{m.group(1) or m.group(2)} <volatile>", text)


def assert_golden(path: Path, actual: str) -> None:
    """*actual* equals the content of the golden file *path* (rewritten first on request)."""
    if os.environ.get(UPDATE_ENV):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert actual == path.read_text(), f"differs from {path}; {UPDATE_ENV}=1 rewrites it"
