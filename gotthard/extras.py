"""The distribution's optional parts: which extra installs which library, and the hint
printed when a command needs one that is missing.

The base install (``pip install gotthard-sre``) is what a node exporter needs. Every
other role adds its extra; ``pyproject.toml`` declares them and ``tests/test_install.py``
checks that :data:`EXTRAS` says the same, so the hint never names the wrong extra.

Standard library only: ``gotthard.cli`` imports this on every run.
"""

from __future__ import annotations

__all__ = [
    "DISTRIBUTION",
    "EXTRAS",
    "MODULES",
    "MissingExtra",
    "extra_for",
    "install_hint",
    "missing_extra",
]

#: The name on PyPI (the import package and the command are both ``gotthard``).
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
