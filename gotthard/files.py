"""Private files (shared plumbing): the webhook's audit log, the DR daemon's job store and
placement state, the sandbox's secrets.

They hold who asked for what (peers, alert labels, node names) and the state that decides
failovers, so only their owner may read or write them. A new file is created 0600
(``os.open`` with that mode, never a chmod after the fact); an existing file that group
or others can use is tightened to 0600 with a warning. A file that cannot be tightened
(another owner) is an error: the caller refuses to start rather than write to it.
"""

from __future__ import annotations

import logging
import os
import stat

log = logging.getLogger("gotthard.files")

PRIVATE_MODE = 0o600


def open_private(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open(path, flags | O_CREAT)`` for a file only its owner can use; the fd."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, PRIVATE_MODE)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            os.fchmod(fd, PRIVATE_MODE)
            log.warning("%s was mode %04o, open to group or others: now 0600", path, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_private_atomically(path: str | os.PathLike[str], data: str) -> None:
    """Replace ``path`` with ``data`` (UTF-8) through a 0600 temporary file and a rename,
    so that readers see the old or the new content and the result is always 0600."""
    tmp = f"{os.fspath(path)}.tmp"
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
