"""One meaning for every spelling of a Slurm node state (sinfo, slurmrestd, pyslurm)."""

from __future__ import annotations

import contextlib
import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gotthard.slurm_state import (
    BASE_STATES,
    FAILED_EFFECTIVE_STATES,
    OPERATOR_FLAGS,
    SUFFIX_FLAGS,
    UNAVAILABLE_EFFECTIVE_STATES,
    UNAVAILABLE_FULL_STATE_PATTERN,
    cpus_idle_other,
    effective_state,
    full_state_pattern,
    holds_idle_cpus,
    is_unavailable,
    normalize,
    normalize_words,
)

# Each node state ("+"-joined base and flags) with the effective state sinfo's long form
# shows, whether the node takes no new work, and its spellings: a string is how sinfo
# (%T long with suffix flags, %t compact, StateComplete) or pyslurm's Node.state print
# it, a list is slurmrestd's words (v0.0.39+ "state", or v0.0.38 "state" + "state_flags").
Spelling = str | list[str]
SPELLINGS: dict[str, tuple[str, bool, *tuple[Spelling, ...]]] = {
    "idle": ("idle", False, "idle", "IDLE", ["IDLE"], ["idle"]),
    "allocated": ("allocated", False, "allocated", "alloc", ["ALLOCATED"], ["allocated"]),
    "mixed": ("mixed", False, "mixed", "mix", "MIXED", ["MIXED"]),
    "idle+drain": ("drained", True, "drained", "drain", "IDLE+DRAIN", ["idle", "DRAIN"]),
    "allocated+drain": (
        "draining",
        True,
        "draining",
        "drng",
        "allocated+drain",
        ["ALLOCATED", "DRAIN"],
    ),
    "mixed+drain": ("draining", True, "mixed+drain", ["MIXED", "DRAIN"], ["DRAIN", "MIXED"]),
    "idle+drain+not_responding": (
        "drained",
        True,
        "drained*",
        "drain*",
        "IDLE+DRAIN+NOT_RESPONDING",
        ["IDLE", "DRAIN", "NOT_RESPONDING"],
    ),
    "down+not_responding": ("down", True, "down*", ["down", "NOT_RESPONDING"]),
    "idle+not_responding": ("idle", True, "idle*", "IDLE+NOT_RESPONDING"),
    "idle+maint": ("maint", True, "maint", "idle$", "IDLE+MAINTENANCE", ["IDLE", "MAINTENANCE"]),
    "idle+reserved": ("reserved", False, "reserved", "resv", "IDLE+RESERVED", "IDLE+RESERVATION"),
    "idle+fail": ("fail", True, "fail", "IDLE+FAIL", ["IDLE", "FAIL"]),
    "allocated+fail": ("failing", True, "failing", "failg", "ALLOCATED+FAIL"),
    "allocated+completing": ("completing", False, "allocated+", ["ALLOCATED", "COMPLETING"]),
    "idle+powered_down": ("powered_down", False, "idle~", "IDLE+POWERED_DOWN"),
    "idle+powering_up": ("idle", False, "idle#", ["IDLE", "POWERING_UP"]),
    "idle+reboot_requested": ("idle", True, "reboot", "boot", "idle@", "IDLE+REBOOT_REQUESTED"),
    "idle+reboot_issued": ("idle", True, "reboot^", "idle^", ["IDLE", "REBOOT_ISSUED"]),
    "idle+planned": ("planned", False, "planned", "plnd", "idle-", "IDLE+PLANNED"),
    "unknown": ("unknown", True, "unk", "UNKNOWN", ["UNKNOWN"]),
    "unknown+invalid_reg": ("unknown", True, "inval", ["INVALID_REG"], ["UNKNOWN", "INVALID_REG"]),
    "future": ("future", False, "futr", "FUTURE"),
    "mixed+dynamic_norm": ("mixed", False, "MIXED+DYNAMIC_NORM", ["MIXED", "DYNAMIC_NORM"]),
}


@pytest.mark.parametrize("full", SPELLINGS)
def test_every_source_spells_the_same_state(full: str) -> None:
    effective, unavailable, *spellings = SPELLINGS[full]
    base, *flag_list = full.split("+")
    flags = tuple(flag_list)
    for spelling in spellings:
        if isinstance(spelling, list):
            assert normalize_words(spelling) == (base, flags), spelling
        else:
            assert normalize(spelling) == (base, flags), spelling
            assert normalize(f"  {spelling.swapcase()} ") == (base, flags), spelling
    assert effective_state(base, flags) == effective
    assert is_unavailable(base, flags) is unavailable
    if effective in UNAVAILABLE_EFFECTIVE_STATES:
        assert unavailable
    # gotthard_slurm_node_info{state} shows the full state; the dashboards' regex agrees
    assert bool(re.fullmatch(UNAVAILABLE_FULL_STATE_PATTERN, full)) is unavailable


def test_recorded_sinfo_state_complete() -> None:
    # tests/fixtures/slurm-22.05/gotthard-sinfo-nodes.txt: a drained node still running jobs
    assert normalize("allocated+drain") == ("allocated", ("drain",))


@pytest.mark.parametrize(
    ("base", "flags", "expected"),
    [
        ("idle", (), True),
        ("mixed", ("fail",), True),
        ("idle", ("drain",), False),
        ("mixed", ("drain",), False),
        ("down", (), False),
        ("down", ("not_responding",), False),
        ("error", (), True),
    ],
)
def test_cpus_count_as_other_like_sinfo(base: str, flags: tuple[str, ...], expected: bool) -> None:
    assert holds_idle_cpus(base, flags) is expected
    idle, other = cpus_idle_other(base, flags, total=8, alloc=2, idle=5)
    assert (idle, other) == ((5, 1) if expected else (0, 6))


def test_cpus_never_negative() -> None:
    assert cpus_idle_other("idle", (), total=4, alloc=6, idle=-1) == (0, 0)


@pytest.mark.parametrize(
    "text", ["", "   ", "+", "*", "idle|drain", "idle drain", "3idle", "idle+dr@in", "ïdle"]
)
def test_junk_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        normalize(text)


def test_no_words_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        normalize_words([])


_FLAG_WORDS = st.sampled_from(
    ["drain", "not_responding", "maintenance", "resv", "fail", "completing", "powered_down"]
)
_BASE_WORDS = st.sampled_from(sorted(BASE_STATES))


@given(st.text(max_size=40))
def test_normalize_raises_only_value_error(text: str) -> None:
    try:
        base, flags = normalize(text)
    except ValueError:
        return
    assert base and base == base.lower()
    assert all(flag and flag == flag.lower() for flag in flags)
    assert len(set(flags)) == len(flags)


@given(st.lists(st.text(max_size=12), max_size=4))
def test_normalize_words_raises_only_value_error(words: list[str]) -> None:
    with contextlib.suppress(ValueError):
        normalize_words(words)


@given(_BASE_WORDS, st.lists(_FLAG_WORDS, max_size=4), st.sampled_from(["", *SUFFIX_FLAGS]))
def test_complete_and_list_forms_agree(base: str, flags: list[str], suffix: str) -> None:
    text = "+".join([base, *flags]) + suffix
    words = [base.upper(), *(flag.upper() for flag in flags)]
    if suffix:
        words[-1] += suffix
    assert normalize(text) == normalize_words(words)
    parsed_base, parsed_flags = normalize(text)
    assert parsed_base == BASE_STATES[base]
    state = effective_state(parsed_base, parsed_flags)
    if state in UNAVAILABLE_EFFECTIVE_STATES:
        assert is_unavailable(parsed_base, parsed_flags)


def test_unavailable_effective_states_are_exactly_those_of_unavailable_nodes() -> None:
    flags = ["drain", "fail", "maint", "reserved", "completing", "not_responding", "planned"]
    seen: dict[str, set[bool]] = {}
    for base in set(BASE_STATES.values()):
        for n in range(3):
            for combo in itertools.combinations(flags, n):
                state = effective_state(base, combo)
                seen.setdefault(state, set()).add(is_unavailable(base, combo))
    for state in UNAVAILABLE_EFFECTIVE_STATES:
        assert seen[state] == {True}, state


def test_unavailable_and_failed_effective_states() -> None:
    assert UNAVAILABLE_EFFECTIVE_STATES == (
        "down",
        "drained",
        "draining",
        "error",
        "fail",
        "failing",
        "maint",
        "unknown",
    )
    # failed: unavailable without an operator's drain or maintenance; these page
    assert FAILED_EFFECTIVE_STATES == ("down", "error", "fail", "failing", "unknown")
    for state in set(UNAVAILABLE_EFFECTIVE_STATES) - set(FAILED_EFFECTIVE_STATES):
        assert any(flag in state for flag in OPERATOR_FLAGS), state


@pytest.mark.parametrize(
    ("full", "drain", "completing"),
    [
        ("idle+drain", True, False),
        ("allocated+drain+completing", True, True),
        ("allocated+completing+drain", True, True),
        ("drain", False, False),  # a base state, never a flag
        ("idle+drained", False, False),
        ("idle+undrain", False, False),
        ("mixed", False, False),
    ],
)
def test_full_state_pattern_matches_whole_flags(full: str, drain: bool, completing: bool) -> None:
    assert bool(re.fullmatch(full_state_pattern(flags=("drain",)), full)) is drain
    assert bool(re.fullmatch(full_state_pattern(flags=("completing",)), full)) is completing
    assert "\\" not in full_state_pattern(bases=("down",), flags=("drain",))
