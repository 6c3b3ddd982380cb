"""Slurm node states: every spelling Slurm prints, parsed once, with one meaning.

Slurm describes a node with one *base* state (idle, allocated, mixed, down, ...) plus
any number of *flags* (drain, not_responding, maint, ...), and prints that pair in
several ways:

* ``sinfo %T``/``StateLong``: one exclusive word with a suffix character for one flag
  (``drained*``, ``idle~``, ``allocated+``, ``draining$``);
* ``sinfo %t``/``StateCompact``: the same, abbreviated (``drng``, ``alloc``, ``mix-``);
* ``sinfo StateComplete`` and pyslurm's ``Node.state``: base and every flag joined by
  ``+`` (``IDLE+DRAIN+NOT_RESPONDING``, ``IDLE+MAINTENANCE``);
* slurmrestd v0.0.38: ``state: "idle"`` plus ``state_flags: ["DRAIN"]``;
  v0.0.39-v0.0.44: ``state: ["IDLE", "DRAIN"]``.

:func:`normalize` and :func:`normalize_words` turn any of these into ``(base, flags)``,
lower case, with one flag-name table (:data:`FLAG_ALIASES`), so the exporter backends,
the runbooks and the alert rules agree on what a node's state means. Stdlib only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable

#: How every drain reason written by Gotthard's runbooks starts (``gotthard: GPULost``).
#: A drain with any other reason is an operator's (maintenance): never resumed by Gotthard.
DRAIN_REASON_PREFIX = "gotthard: "

#: Each base state's label, with its spellings (long and compact).
_BASE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "idle": ("idle",),
    "allocated": ("alloc", "allocated"),
    "mixed": ("mix", "mixed"),
    "down": ("down",),
    "unknown": ("unk", "unknown"),
    "future": ("futr", "future"),
    "error": ("err", "error"),
}
#: Base states, by every spelling, to the name used as a label.
BASE_STATES: dict[str, str] = {
    spelling: label for label, spellings in _BASE_SPELLINGS.items() for spelling in spellings
}

#: sinfo's one-character state suffixes (``%T``/``%t``), as flags.
SUFFIX_FLAGS: dict[str, str] = {
    "*": "not_responding",
    "~": "powered_down",
    "#": "powering_up",
    "%": "powering_down",
    "!": "power_down",
    "$": "maint",
    "@": "reboot_requested",
    "^": "reboot_issued",
    "-": "planned",
    # "ALLOCATED+": an allocated node whose jobs are completing.
    "+": "completing",
}

#: Flag spellings (StateComplete, slurmrestd, pyslurm, sinfo's compact words) mapped to
#: the short names used as labels; a flag not listed keeps its own lower-case name.
FLAG_ALIASES: dict[str, str] = {
    "maintenance": "maint",
    "reservation": "reserved",
    "resv": "reserved",
    "no_respond": "not_responding",
    "inval": "invalid_reg",
    "npc": "perfctrs",
    "comp": "completing",
    "plnd": "planned",
    "boot": "reboot_requested",
    "reboot": "reboot_requested",
    "pow_dn": "power_down",
    "pow_up": "power_up",
    # Slurm before 21.08 called a powered-down node "power_save".
    "power_save": "powered_down",
}

#: sinfo's exclusive one-word states that name a flag rather than a base state, by the
#: base state they stand for. ``drained`` is also printed for a down node that drains and
#: ``completing`` for a mixed one; idle is the base that fits most nodes.
_FOLDED_WORDS: dict[str, str] = {
    "idle": "drained drain fail maint reboot boot completing comp reserved resv planned plnd"
    " perfctrs npc",
    "allocated": "draining drng failing failg",
}
#: The flag of a folded word that is neither a flag's name nor in :data:`FLAG_ALIASES`.
_FOLDED_FLAGS = dict.fromkeys(("drained", "draining", "drng"), "drain") | dict.fromkeys(
    ("failing", "failg"), "fail"
)
#: Each folded word -> (base state, flag).
FOLDED_STATES: dict[str, tuple[str, str]] = {
    word: (base, _FOLDED_FLAGS.get(word) or FLAG_ALIASES.get(word, word))
    for base, words in _FOLDED_WORDS.items()
    for word in words.split()
}

#: Flags shown as a node's one state, in the precedence sinfo's long form uses, after
#: drain, down and fail (see :func:`effective_state`).
NODE_FLAG_STATES = ("maint", "reserved", "planned", "completing", "power_down", "powered_down")

#: Base states in which a node takes no new work.
UNAVAILABLE_BASES = frozenset({"down", "error", "unknown"})
#: Flags with which a node takes no new work: drained or draining, failing, in a
#: maintenance reservation, rebooting or about to, not answering slurmctld, or rejected
#: at registration. Power saving (``powered_down``, ``power_down``...) is left out: such
#: nodes are woken up for new work. A ``future`` node is not in service yet, which is
#: planned capacity rather than lost capacity, so it is not unavailable either.
UNAVAILABLE_FLAGS = frozenset(
    {
        "drain",
        "fail",
        "maint",
        "reboot_requested",
        "reboot_issued",
        "not_responding",
        "invalid_reg",
    }
)
_WORD = re.compile(r"[a-z][a-z0-9_]*")


def _words(text: str) -> tuple[list[str], list[str]]:
    """The ``+``-joined words of one state string and the flags of its suffixes."""
    text = text.strip().lower()
    suffixes: list[str] = []
    while text and text[-1] in SUFFIX_FLAGS:
        suffixes.append(SUFFIX_FLAGS[text[-1]])
        text = text[:-1]
    words = [word.strip() for word in text.split("+") if word.strip()]
    for word in words:
        if not _WORD.fullmatch(word):
            raise ValueError(f"not a Slurm node state: {text!r}")
    return words, suffixes


@functools.lru_cache(maxsize=1024)
def _normalize(items: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    words: list[str] = []
    suffixes: list[str] = []
    for item in items:
        item_words, item_suffixes = _words(item)
        words.extend(item_words)
        suffixes.extend(item_suffixes)
    if not words:
        raise ValueError(f"empty Slurm node state: {items!r}")
    base = ""
    flags: list[str] = []
    for word in words:
        if not base and word in BASE_STATES:
            base = BASE_STATES[word]
        else:
            flags.append(FLAG_ALIASES.get(word, word))
    if not base:
        folded = FOLDED_STATES.get(words[0])
        if folded is None:
            base = "unknown"
        else:
            base, flags[0] = folded
    flags.extend(suffixes)
    if "reboot_issued" in flags and "reboot_requested" in flags and "reboot" in words:
        # "REBOOT^": sinfo's word says reboot, its suffix that the reboot was issued.
        flags.remove("reboot_requested")
    return base, tuple(dict.fromkeys(flags))


def normalize(text: str) -> tuple[str, tuple[str, ...]]:
    """Any one spelling of a node state -> ``(base, flags)``, lower case.

    ``IDLE+DRAIN`` / ``drained`` / ``drain`` -> ``("idle", ("drain",))``;
    ``down*`` -> ``("down", ("not_responding",))``; ``IDLE+MAINTENANCE`` ->
    ``("idle", ("maint",))``. Raises :class:`ValueError` on an empty string or
    anything that is not made of state words.
    """
    return _normalize((text,))


def normalize_words(words: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """Like :func:`normalize` for a state given as several words.

    slurmrestd's ``["IDLE", "DRAIN"]`` (v0.0.39+), or v0.0.38's ``state`` followed by
    its ``state_flags``. The first base-state word is the base, in whatever position.
    """
    return _normalize(tuple(words))


def effective_state(base: str, flags: Collection[str]) -> str:
    """One exclusive state per node, as sinfo's long state shows it.

    drain wins over the base state (``drained`` when idle or down, ``draining``
    while jobs still run), then down, then fail (``failing`` while jobs still
    run), then maintenance-like flags (:data:`NODE_FLAG_STATES`), else the base.
    """
    busy = base in ("allocated", "mixed")
    if "drain" in flags:
        return "draining" if busy else "drained"
    if base == "down":
        return "down"
    if "fail" in flags:
        return "failing" if busy else "fail"
    for flag in NODE_FLAG_STATES:
        if flag in flags:
            return flag
    return base


def is_unavailable(base: str, flags: Iterable[str]) -> bool:
    """Whether the scheduler starts no new job on a node in this state.

    True for a base state in :data:`UNAVAILABLE_BASES` or any flag in
    :data:`UNAVAILABLE_FLAGS`; a node may still run the jobs it has.
    """
    return base in UNAVAILABLE_BASES or not UNAVAILABLE_FLAGS.isdisjoint(flags)


#: Flags an operator (or a runbook) sets to take a node out of service on purpose: such a
#: node is unavailable, not failed.
OPERATOR_FLAGS = frozenset({"drain", "maint"})


def in_maintenance(flags: Collection[str], reason: str) -> bool:
    """Whether a node is out of service for an operator's work: drained (or draining) with
    a reason Gotthard's runbooks did not write, or in a maintenance reservation (MAINT).
    The nodes of the ``site_cluster_node:gotthard_slurm_node_maintenance:group`` recording rule;
    Gotthard neither alerts on them nor acts on them."""
    return "maint" in flags or ("drain" in flags and not reason.startswith(DRAIN_REASON_PREFIX))


def _effective_states(flags: Iterable[str]) -> dict[str, set[bool]]:
    """Every effective state a node with any base state and at most one of *flags* has,
    and whether such nodes are unavailable. One flag is enough: the effective state
    follows one flag (the one of highest precedence), availability any one of them."""
    seen: dict[str, set[bool]] = {}
    for base in sorted(set(BASE_STATES.values())):
        for combo in ((), *((flag,) for flag in sorted(flags))):
            seen.setdefault(effective_state(base, combo), set()).add(is_unavailable(base, combo))
    return seen


_ALL_FLAGS = {"drain", "fail", *NODE_FLAG_STATES, *UNAVAILABLE_FLAGS}

#: Values of :func:`effective_state` (the ``state`` label of ``gotthard_slurm_nodes``) that only
#: unavailable nodes have, for PromQL regexes. A node can also be unavailable behind an
#: effective state outside this set (``idle`` with ``not_responding``, ``allocated`` with
#: ``reboot_requested``): those flags are exported by ``gotthard_slurm_node_flags``.
UNAVAILABLE_EFFECTIVE_STATES = tuple(
    sorted(state for state, seen in _effective_states(_ALL_FLAGS).items() if seen == {True})
)
#: Of those, the states of a node that failed: ones a node also reaches without an
#: operator's drain or maintenance (down, fail, error, ...). These page; drains do not.
FAILED_EFFECTIVE_STATES = tuple(
    state
    for reachable in [_effective_states(_ALL_FLAGS - OPERATOR_FLAGS)]
    for state in UNAVAILABLE_EFFECTIVE_STATES
    if state in reachable
)


def full_state_pattern(*, bases: Iterable[str] = (), flags: Iterable[str] = ()) -> str:
    """A regex matching a node's full state (``base+flag+...``, the ``state`` label of
    ``gotthard_slurm_node_info``) when its base is one of *bases* or one of its flags one of
    *flags*. Anchored at both ends, as PromQL's ``=~`` and :func:`re.fullmatch` match;
    no backslash, so it can stand in a PromQL string as it is."""
    alternatives = []
    if bases:
        alternatives.append(f"({'|'.join(sorted(bases))})([+].*)?")
    if flags:
        alternatives.append(f"[^+]+[+](.*[+])?({'|'.join(sorted(flags))})([+].*)?")
    return "|".join(alternatives)


#: The full states of unavailable nodes (:func:`is_unavailable`), for ``gotthard_slurm_node_info``.
UNAVAILABLE_FULL_STATE_PATTERN = full_state_pattern(
    bases=UNAVAILABLE_BASES, flags=UNAVAILABLE_FLAGS
)


def holds_idle_cpus(base: str, flags: Collection[str]) -> bool:
    """Whether a node's unallocated CPUs count as idle in sinfo's ``CPUS(A/I/O/T)``.

    sinfo counts them as "other" on a drained/draining or down node, and as idle on
    every other node (a failing one included).
    """
    return base != "down" and "drain" not in flags


def cpus_idle_other(
    base: str, flags: Collection[str], *, total: int, alloc: int, idle: int
) -> tuple[int, int]:
    """``(idle, other)`` CPUs of a node as sinfo counts them, from what the API reports."""
    idle = max(idle, 0) if holds_idle_cpus(base, flags) else 0
    return idle, max(total - alloc - idle, 0)
