"""Pure parsers for the texts only opt-in flags read: LNet NI health, quota accounting and
``brw_stats``.

They follow the block-parser policy of :mod:`gotthard.exporters.lustre.parse`: never raise
on any ``str``, return what they understood plus ``errors``, the number of non-blank lines
they could not place.

Formats (see docs/lustre.md):

``lnetctl net show -v 4`` -- YAML: ``- net type: <net>`` entries, each with ``local NI(s):``
and ``- nid: <nid>`` entries holding ``status: up|down`` and, from 2.12 on, ``health stats:``
with ``health value: <0..1000>``.

``quota_slave.acct_user`` / ``acct_group`` / ``acct_project`` -- a ``usr_accounting:`` (or
``grp_``/``prj_``) line, then per id ``- id: <id>`` and ``usage: { inodes: N, kbytes: K }``.

``brw_stats`` -- ``snapshot_time`` (2.15 also ``start_time`` and ``elapsed_time``) header
lines, then tables: a ``read | write`` line, a title line (``pages per bulk r/w  rpcs  %
cum % | rpcs  % cum %``; the count column says rpcs, ios or maps) and bucket lines
``<lower bound>[K|M|G]: <read> % cum% | <write> % cum%``. Every bucket counts the values
from its lower bound up to the next power of two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gotthard.exporters.lustre.parse import matching_lines
from gotthard.exporters.lustre.snapshot import LnetNi, QuotaUsage

# --- patterns ----------------------------------------------------------------------------

_YAML_LINE = re.compile(r"[ \t]*(- )?[ \t]*([^:\n]+?)[ \t]*:(?:[ \t]+(\S[^\n]*?))?[ \t]*")
#: quota type -> the parameter holding it and the first line of its text
QUOTA_TYPES = {
    "user": ("acct_user", "usr_accounting:"),
    "group": ("acct_group", "grp_accounting:"),
    "project": ("acct_project", "prj_accounting:"),
}
#: an ``- id:`` line and the ``usage:`` line that must follow it; starting with a literal
#: newline (not ``^`` with MULTILINE) and possessive, as the job_stats patterns, for speed
_QUOTA_ENTRY = re.compile(
    r"\n[ \t]*+-[ \t]++id:[ \t]*+(\S++)[ \t]*+\n[ \t]*+usage:[ \t]*+\{[ \t]*+inodes:[ \t]*+"
    r"([0-9]++)[ \t]*+,[ \t]*+kbytes:[ \t]*+([0-9]++)[ \t]*+\}[ \t]*+(?=\n|$)",
    re.ASCII,
)
_QUOTA_HEADERS = frozenset(header for _, header in QUOTA_TYPES.values())
_BRW_HEADER = re.compile(r"[ \t]*(?:snapshot_time|start_time|elapsed_time):?[ \t]+\S[^\n]*")
_BRW_COLUMNS = re.compile(r"[ \t]*read[ \t]*\|[ \t]*write[ \t]*")
_BRW_TITLE = re.compile(
    r"[ \t]*(\S[^\n|]*?)[ \t]+[a-z]+[ \t]+%[ \t]+cum[ \t]+%[ \t]*\|"
    r"[ \t]*[a-z]+[ \t]+%[ \t]+cum[ \t]+%[ \t]*"
)
_BRW_BUCKET = re.compile(
    r"[ \t]*([0-9]+)([KMG]?):[ \t]+([0-9]+)[ \t]+[0-9]+[ \t]+[0-9]+[ \t]*\|"
    r"[ \t]*([0-9]+)[ \t]+[0-9]+[ \t]+[0-9]+[ \t]*",
    re.ASCII,
)
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


# --- lnetctl net show -v 4 ---------------------------------------------------------------


@dataclass(slots=True)
class LnetNetShow:
    """The local network interfaces of ``lnetctl net show``, in output order."""

    nis: list[LnetNi] = field(default_factory=list)
    errors: int = 0


def parse_lnet_net_show(text: str) -> LnetNetShow:
    """Parse ``lnetctl net show -v 4`` output; never raises.

    Keeps each NI's net, NID, ``status`` and ``health value`` (absent before 2.12: None).
    Any other ``key: value`` or ``key:`` line is understood and ignored; a line that is
    neither counts one error, as does a health value that is not a number.
    """
    result = LnetNetShow()
    net = ""
    current: LnetNi | None = None
    matches, result.errors = matching_lines(text, _YAML_LINE)
    for match in matches:
        item, key, value = match[1], match[2], (match[3] or "").strip("\"'")
        if item and key == "net type":
            net, current = value, None
        elif item and key == "nid":
            current = LnetNi(net, value)
            result.nis.append(current)
        elif current is not None and key == "status":
            current.status = value
        elif current is not None and key == "health value":
            if value.isascii() and value.isdigit():
                current.health_value = int(value)
            else:
                result.errors += 1
    return result


# --- quota_slave.acct_* ------------------------------------------------------------------


@dataclass(slots=True)
class QuotaAccounting:
    """The ids of one ``acct_*`` text with their usage, in file order."""

    usage: list[QuotaUsage] = field(default_factory=list)
    #: False for ``not supported`` (2.10 ZFS targets without project quota): no series
    supported: bool = True
    errors: int = 0


def parse_quota_acct(text: str) -> QuotaAccounting:
    """Parse a target's ``quota_slave.acct_user``/``acct_group``/``acct_project``; never raises.

    Each ``- id:`` line must be followed by its ``usage:`` line; a ``usage:`` line without
    an id, an id without usage and any other line (but the ``*_accounting:`` header) count
    one error each. An id listed twice is summed. ``not supported`` (a quota type the
    backend cannot account) is no error: ``supported`` is False.
    """
    result = QuotaAccounting()
    if text.strip() == "not supported":
        result.supported = False
        return result
    # scanned with whole-text patterns, not line by line: an MDT may list 100,000 ids
    #: id -> [bytes, inodes], in file order
    by_id: dict[str, list[int]] = {}
    entries = _QUOTA_ENTRY.findall("\n" + text)
    for ident, inodes, kbytes in entries:
        totals = by_id.setdefault(ident, [0, 0])
        totals[0] += int(kbytes) * 1024
        totals[1] += int(inodes)
    # every other non-blank line but the headers is one that could not be placed
    lines = [line.strip() for line in text.split("\n")]
    headers = sum(1 for line in lines if line in _QUOTA_HEADERS)
    nonblank = len(lines) - lines.count("")
    result.errors = max(nonblank - headers - 2 * len(entries), 0)
    result.usage = [QuotaUsage(ident, used, inodes) for ident, (used, inodes) in by_id.items()]
    return result


# --- brw_stats ---------------------------------------------------------------------------


@dataclass(slots=True)
class BrwStats:
    """``brw_stats`` tables: title -> ``(lower bound, reads, writes)`` per bucket."""

    tables: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    errors: int = 0


def parse_brw_stats(text: str) -> BrwStats:
    """Parse an OST's or MDT's ``brw_stats`` (2.10 to 2.15 forms); never raises.

    Tables are keyed by their title as printed (``pages per bulk r/w``, ``disk I/O size``,
    ...); a bucket's lower bound has its ``K``/``M``/``G`` suffix applied (powers of 1024).
    Bucket lines before any title and any line that is none of header, column line, title
    or bucket count one error each.
    """
    result = BrwStats()
    table: list[tuple[int, int, int]] | None = None
    for line in text.splitlines():
        if not line.strip() or _BRW_HEADER.fullmatch(line) or _BRW_COLUMNS.fullmatch(line):
            continue
        title = _BRW_TITLE.fullmatch(line)
        if title is not None:
            table = result.tables.setdefault(title[1], [])
            continue
        bucket = _BRW_BUCKET.fullmatch(line)
        if bucket is None or table is None:
            result.errors += 1
            continue
        lower = int(bucket[1]) * _SUFFIX[bucket[2]]
        table.append((lower, int(bucket[3]), int(bucket[4])))
    return result
