"""The distribution's optional parts: which extra installs which library, and the hint
printed when a command needs one that is missing.

The base install (the ``gotthard-sre`` distribution) is what a node exporter needs. Every
other role adds its extra; ``pyproject.toml`` declares them and ``tests/test_install.py``
checks that :data:`EXTRAS` says the same, so the hint never names the wrong extra.

Standard library only: ``gotthard.cli`` imports this on every run.
"""

from __future__ import annotations

import importlib.util

__all__ = [
    "DISTRIBUTION",
    "EXTRAS",
    "MODULES",
    "NEEDS",
    "MissingExtra",
    "extra_for",
    "importable",
    "install_hint",
    "missing_extra",
    "needs_of",
    "unmet",
]

#: The distribution's name (not on PyPI yet; the import package and the command are both
#: ``gotthard``).
DISTRIBUTION = "gotthard-sre"

#: Import name of each optional library -> the distribution that provides it.
MODULES: dict[str, str] = {
    "grpc": "grpcio",
    "kubernetes": "kubernetes",
    "apscheduler": "APScheduler",
    "sqlalchemy": "SQLAlchemy",
    "regopy": "regopy",
    "opa_client": "opa-python-client",
    "grafanalib": "grafanalib",
    "attr": "attrs",
    "pyslurm": "pyslurm",
    "psycopg": "psycopg",
    "spiffe": "spiffe",
}

#: Extra -> the optional distributions it installs, most specific extra first: a hint
#: names the command's own extra when it has one, else the first extra listed here that
#: installs the library (``all`` and ``test`` are never suggested).
EXTRAS: dict[str, frozenset[str]] = {
    "kubelet": frozenset({"grpcio"}),
    "dr": frozenset({"kubernetes", "APScheduler", "SQLAlchemy"}),
    "policy": frozenset({"regopy", "opa-python-client"}),
    "policy-opa": frozenset({"opa-python-client"}),
    "audit": frozenset({"regopy", "opa-python-client", "kubernetes"}),
    "dashboards": frozenset({"grafanalib", "attrs"}),
    "runbooks": frozenset({"kubernetes"}),
    "pyslurm": frozenset({"pyslurm"}),
    "postgres": frozenset({"psycopg"}),
    "spiffe": frozenset({"spiffe"}),
}


#: What a command, or one of its leaves (``"audit cluster"``), needs: the extra its hint
#: names, and groups of import names of which one per group must import (``policy`` runs
#: on regopy or on an OPA server's client: ``policy-opa``). A leaf's entry wins over its
#: command's. ``gotthard.cli`` marks such a command in ``--help`` when this install lacks
#: it, and refuses to run it (exit 2, naming the extra) before it starts.
NEEDS: dict[str, tuple[str, tuple[tuple[str, ...], ...]]] = {
    "dashboards": ("dashboards", (("grafanalib",), ("attr",))),
    "dr": ("dr", (("kubernetes",), ("apscheduler",), ("sqlalchemy",))),
    "runbooks": ("runbooks", (("kubernetes",),)),
    "policy eval": ("policy", (("regopy", "opa_client"),)),
    "policy test": ("policy", (("regopy", "opa_client"),)),
    "policy kube-bench": ("policy", (("regopy", "opa_client"),)),
    "audit kube-bench": ("policy", (("regopy", "opa_client"),)),
    "audit cluster": ("audit", (("kubernetes",), ("regopy", "opa_client"))),
}


def importable(module: str) -> bool:
    """Whether *module* (a top-level import name) can be imported here, without importing
    it (``gotthard --help`` must stay cheap)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None for it
        return False


def needs_of(command: str) -> tuple[str, str] | None:
    """``(key, extra)`` of the :data:`NEEDS` entry that applies to *command* (``"dr
    status"``): its own, else its top-level command's; None if it needs no extra."""
    for key in (command, command.partition(" ")[0]):
        if key in NEEDS:
            return key, NEEDS[key][0]
    return None


def unmet(command: str) -> MissingExtra | None:
    """What *command* (``"dr status"``) lacks in this install, as the error running it
    raises; None when it has what it needs (or needs no extra)."""
    found = needs_of(command)
    if found is None:
        return None
    key, extra = found
    for group in NEEDS[key][1]:
        if not any(importable(module) for module in group):
            return MissingExtra(key, group[0], extra)
    return None


class MissingExtra(Exception):
    """A command needs an optional library that is not installed."""

    def __init__(self, command: str | None, module: str, extra: str) -> None:
        self.command, self.module, self.extra = command, module, extra
        who = f"'{command}'" if command else "this command"
        super().__init__(
            f"{who} needs the optional dependency '{MODULES[module]}': {install_hint(extra)}"
        )


def install_hint(extra: str) -> str:
    """The pip command that installs *extra* (quoted for the shell)."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def extra_for(module: str, command: str | None = None) -> str | None:
    """The extra to suggest when *module* (an import name) is missing under *command*."""
    distribution = MODULES.get(module.partition(".")[0])
    if distribution is None:
        return None
    if command in EXTRAS and distribution in EXTRAS[command]:
        return command
    return next((extra for extra, dists in EXTRAS.items() if distribution in dists), None)


def missing_extra(err: ModuleNotFoundError, command: str | None = None) -> MissingExtra | None:
    """*err* as a :class:`MissingExtra` when it names one of the optional libraries,
    else ``None`` (a missing base dependency or a bug: not ours to explain away)."""
    module = (err.name or "").partition(".")[0]
    extra = extra_for(module, command)
    return None if extra is None else MissingExtra(command, module, extra)
