"""The registry of areas: each area of Gotthard declared once, and the site file's tables.

An area (Slurm, GPU, Slingshot, Lustre, DR, security, Gotthard itself) is one
:class:`Area` in :data:`AREAS`: the exporter collectors it has, its monitoring component
(thresholds, recording rules, alerts), the prefix of its alert names and its Grafana
dashboards. Every list of areas is derived from here: the collectors ``gotthard
exporter`` knows and builds (with its ``[exporter.NAME]`` tables), the rule groups and
their order, the dashboards and their uids, the alert name prefixes, and the metric
tables of docs/exporter.md. :data:`SECTIONS` are the site file's tables, which
:mod:`gotthard.config` assembles into its model.

**Adding an area is one entry of** :data:`AREAS` (plus the modules it names).

Everything is named by reference (``"package.module:attribute"``) and imported only when
used (:func:`load`), so reading the registry costs nothing: ``gotthard exporter`` uses it
without loading the monitoring code, grafanalib or any other area's code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``"package.module:attribute"``, or ``"package.module"`` for the module itself.
Ref = str


def load(ref: Ref) -> Any:
    """The object *ref* names (importing its module)."""
    module, _, attribute = ref.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


@dataclass(frozen=True)
class Collector:
    """A collector of ``gotthard exporter``: ``--collectors NAME`` enables it, the
    ``[exporter.NAME]`` table (and the ``--NAME.*`` flags its fields declare) sets it up."""

    name: str
    #: The settings model of ``[exporter.NAME]``.
    settings: Ref
    #: ``(Config) -> Collector``: builds it from the site configuration.
    factory: Ref
    #: The module declaring its metric families (:class:`gotthard.exporters.families.Desc`),
    #: whose table docs/exporter.md shows; empty where the families are made in the render
    #: (Slingshot and Lustre, whose pages docs/slingshot.md and docs/lustre.md list them).
    metrics: Ref = ""


@dataclass(frozen=True)
class Dashboard:
    """A Grafana dashboard: its key (alerts link it by key; its uid is ``gotthard-<key>``),
    its title and the function building it from the threshold values."""

    key: str
    title: str
    builder: Ref


@dataclass(frozen=True)
class Area:
    """One area: the prefix of its alert names (``Slurm`` in ``SlurmNodesUnavailable``),
    its monitoring component module (thresholds, recording rules, ``alerts(values)``;
    its ``COMPONENT`` is the area's name), its dashboards and its collectors."""

    name: str
    alert_prefix: str
    component: Ref
    dashboards: tuple[Dashboard, ...]
    collectors: tuple[Collector, ...] = ()


_EXPORTERS = "gotthard.exporters"


def _component(module: str) -> Ref:
    return f"gotthard.monitoring.components.{module}"


def _board(key: str, title: str, builder: str) -> tuple[Dashboard, ...]:
    """The dashboard *key* built by *builder* (``module:function`` of the boards)."""
    return (Dashboard(key, title, f"gotthard.monitoring.dashboards.boards.{builder}"),)


def _collector(name: str, settings: str, *, declared: bool = True) -> tuple[Collector, ...]:
    """The collector of ``gotthard.exporters.NAME``: ``collector.from_config`` builds it,
    and (when *declared*) ``render`` declares its metric families."""
    return (
        Collector(
            name,
            settings=f"{_EXPORTERS}.settings:{settings}",
            factory=f"{_EXPORTERS}.{name}.collector:from_config",
            metrics=f"{_EXPORTERS}.{name}.render" if declared else "",
        ),
    )


#: The areas, in the order of the rule files' groups.
AREAS: tuple[Area, ...] = (
    Area(
        "self",
        "Gotthard",
        _component("gotthard_self"),
        _board("exporters", "Exporters", "exporter:exporter_health"),
    ),
    Area(
        "slurm",
        "Slurm",
        _component("slurm"),
        _board("slurm-cluster", "Slurm cluster", "slurm:slurm_cluster"),
        _collector("slurm", "SlurmExporterConfig"),
    ),
    Area(
        "gpu",
        "GPU",
        _component("gpu"),
        _board("gpu-fleet", "GPU fleet", "gpu:gpu_fleet"),
        _collector("gpu", "GpuExporterConfig"),
    ),
    Area(
        "slingshot",
        "Slingshot",
        _component("slingshot"),
        _board(
            "slingshot-network-health", "Slingshot network health", "slingshot:slingshot_network"
        ),
        _collector("slingshot", "SlingshotExporterConfig", declared=False),
    ),
    Area(
        "lustre",
        "Lustre",
        _component("lustre"),
        _board("lustre-storage", "Lustre storage", "lustre:lustre_storage"),
        _collector("lustre", "LustreExporterConfig", declared=False),
    ),
    Area("dr", "DR", _component("dr"), _board("dr", "DR", "dr:disaster_recovery")),
    Area(
        "security",
        "Security",
        _component("security"),
        _board("security-compliance", "Security compliance", "security:security_compliance"),
    ),
    Area("job", "Job", _component("job"), _board("job", "Job", "job:job_efficiency")),
)

#: The dashboard across every area, listed first.
(OVERVIEW,) = _board("site-overview", "Site overview", "overview:site_overview")
#: The collector serving other programs' ``*.prom`` files: of no area, listed last.
TEXTFILE = Collector(
    "textfile",
    settings=f"{_EXPORTERS}.settings:TextfileExporterConfig",
    factory=f"{_EXPORTERS}.textfile:from_config",
    metrics=f"{_EXPORTERS}.textfile",
)

#: Every collector ``gotthard exporter`` knows, in ``--help`` order.
COLLECTORS: tuple[Collector, ...] = (*(c for a in AREAS for c in a.collectors), TEXTFILE)
#: Every dashboard, in the order docs/dashboards.md lists them.
DASHBOARDS: tuple[Dashboard, ...] = (OVERVIEW, *(d for a in AREAS for d in a.dashboards))

#: The site file's tables beside the site model, in file order: table -> settings model.
#: Each area keeps its model in its own folder; :mod:`gotthard.config` assembles them.
SECTIONS: Mapping[str, Ref] = {
    "exporter": f"{_EXPORTERS}.settings:ExporterConfig",
    "dr": "gotthard.dr.settings:DrConfig",
    "runbooks": "gotthard.runbooks.settings:RunbooksConfig",
    "monitoring": "gotthard.monitoring.settings:MonitoringConfig",
    "policies": "gotthard.policies.settings:PoliciesConfig",
    "deploy": "gotthard.deploy.settings:DeployConfig",
    "spiffe": "gotthard.spiffe:SpiffeConfig",
}


def collector_names() -> tuple[str, ...]:
    return tuple(c.name for c in COLLECTORS)


def collector(name: str) -> Collector:
    """The collector called *name*; KeyError for an unknown one."""
    for candidate in COLLECTORS:
        if candidate.name == name:
            return candidate
    raise KeyError(name)


def area(name: str) -> Area:
    """The area called *name*; KeyError for an unknown one."""
    for candidate in AREAS:
        if candidate.name == name:
            return candidate
    raise KeyError(name)
