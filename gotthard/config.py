"""The site configuration: one TOML file, typed and validated, read here and nowhere else.

The file is found through ``--config FILE`` or the ``GOTTHARD_CONFIG`` environment
variable; with neither, the defaults apply, so every command runs without a file.

``[sites.NAME]`` describes each site once: its clusters, and for each cluster how to
reach its Slurm (``slurm_conf`` or ``slurmrestd_url``), its Kubernetes API
(``[sites.NAME.clusters.CLUSTER.kubernetes]``), its Prometheus and its Karmada member
names. Every area reads that one model: the exporter (its ``site``/``cluster``), the
runbook webhook (the clusters of its site it owns, each with its own Slurm, Kubernetes and
Prometheus), DR (backups, drills, placement), ``gotthard audit cluster`` and
``gotthard deploy render``. The areas' own tables (``[exporter]``, ``[dr]``,
``[runbooks]``, ``[monitoring]``, ``[policies]``, ``[deploy]``) hold only their settings;
their models live in their folders, and :data:`gotthard.areas.SECTIONS` names them.

Cross-references (a drill's site, a placed service's primary site, the installation's
own cluster, ...) are checked at load time. An invalid file raises
:class:`ConfigError`, whose message names the bad key and the reason.
"""

from __future__ import annotations

import argparse
import functools
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError, create_model, model_validator

from gotthard import areas
from gotthard.base import Name, Strict, format_validation_error, parse_listen
from gotthard.site import ClusterConfig, KubeAccess, SiteConfig

ENV_VAR = "GOTTHARD_CONFIG"
#: argparse destination of a subcommand's own ``--config FILE``; it wins over the
#: top-level ``gotthard --config``.
SUB_CONFIG_DEST = "sub_config"

__all__ = [
    "ENV_VAR",
    "SUB_CONFIG_DEST",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "KubeAccess",
    "SiteConfig",
    "add_config_option",
    "from_mapping",
    "load",
    "parse_listen",
    "path_of",
]


class ConfigError(Exception):
    """The configuration file cannot be read or does not validate."""


#: Keys that used to be set in an area's table and now belong to the site model.
MOVED_KEYS = {
    ("dr", "site"): "the top-level `site` key",
    ("dr", "sites"): "[sites.NAME] (kubernetes, velero_namespace, karmada_members per cluster)",
    ("dr", "placement", "karmada_context"): "[dr.placement.karmada] context",
    ("dr", "placement", "karmada_kubeconfig"): "[dr.placement.karmada] kubeconfig",
    ("runbooks", "slurm_conf"): "[sites.NAME.clusters.CLUSTER] slurm_conf",
    ("runbooks", "kubernetes"): "[sites.NAME.clusters.CLUSTER.kubernetes]",
    ("exporter", "slurm", "rest_url"): "[sites.NAME.clusters.CLUSTER] slurmrestd_url",
}


def _moved_key(data: dict[str, Any]) -> str | None:
    for path, where in MOVED_KEYS.items():
        node: Any = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and path[-1] in node:
            return f"{'.'.join(path)}: moved to {where}"
    return None


class SiteFile(Strict):
    """The site file's own keys and its cross-checks; :data:`Config` adds the areas'
    tables (:data:`gotthard.areas.SECTIONS`)."""

    #: The site and cluster this installation runs at (labels, and what it acts on).
    site: Name = "local"
    cluster: Name = "sandbox"
    sites: dict[Name, SiteConfig] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """Reject keys that moved to ``[sites]``, naming where they went."""
        moved = _moved_key(data) if isinstance(data, dict) else None
        if moved:
            raise ValueError(moved)
        return data

    @model_validator(mode="after")
    def _references(self) -> SiteFile:
        if self.sites:
            if self.site not in self.sites:
                raise ValueError(
                    f"site: {self.site!r} is not one of the configured sites:"
                    f" {', '.join(self.sites)}"
                )
            own = self.sites[self.site].clusters
            if own and self.cluster not in own:
                raise ValueError(
                    f"cluster: {self.cluster!r} is not a cluster of site {self.site!r}:"
                    f" {', '.join(own)}"
                )
        # the areas' cross-checks, where their tables are part of this model (a command
        # reading only its own table, as ``gotthard exporter`` does, skips the others')
        if "runbooks" in type(self).model_fields:
            self._runbook_clusters()
        if "dr" in type(self).model_fields:
            try:
                self.dr.check_sites(self.site_model)
            except ValueError as err:
                raise ValueError(f"dr.{err}") from None
        # a cluster name is the `cluster` label, and a Karmada member places a service at
        # one site: each must be unique across sites (a member may share a cluster's name)
        clusters: dict[str, str] = {}
        members: dict[str, str] = {}
        for site_name, site in self.sites.items():
            for cluster_name, cluster in site.clusters.items():
                where = f"sites.{site_name}.clusters.{cluster_name}"
                if cluster_name in clusters:
                    raise ValueError(
                        f"{where}: cluster name already used at {clusters[cluster_name]}"
                    )
                clusters[cluster_name] = where
                for member in cluster.karmada_members:
                    if member in members:
                        raise ValueError(
                            f"{where}.karmada_members: {member!r} already used at {members[member]}"
                        )
                    members[member] = f"{where}.karmada_members"
        return self

    def _runbook_clusters(self) -> None:
        """``[runbooks] clusters`` and ``default_cluster`` name clusters of this site, so a
        typo fails every command reading the site file, not only the webhook's start."""
        site = self.sites.get(self.site)
        available = list(site.clusters) if site is not None and site.clusters else [self.cluster]
        self.runbooks.owned_clusters(self.site, available)

    # -- reading the site model ----------------------------------------------------------

    @property
    def site_model(self) -> dict[str, SiteConfig]:
        """Every site with its clusters: ``[sites]``, or, with no ``[sites]`` in the file,
        this installation's ``site`` with its one ``cluster`` on the default kubeconfig.
        DR, deploy and :meth:`site_config` read this; ``sites`` is the file's table."""
        if self.sites:
            return self.sites
        own = ClusterConfig(kubernetes=KubeAccess())
        return {self.site: SiteConfig(clusters={self.cluster: own})}

    def site_config(self, site: str | None = None) -> SiteConfig:
        """The site *site* (default: this installation's) with its clusters."""
        name = site or self.site
        model = self.site_model
        if name not in model:
            raise ConfigError(f"site {name!r} is not configured ([sites.{name}])")
        return model[name]

    def cluster_config(self, site: str | None = None, cluster: str | None = None) -> ClusterConfig:
        """One cluster; with no *cluster*, the installation's own (on its own site) or the
        site's Kubernetes cluster (on another site)."""
        name = site or self.site
        conf = self.site_config(name)
        if cluster is None:
            cluster = self.cluster if name == self.site else conf.kube_cluster
        if cluster is None or cluster not in conf.clusters:
            if name == self.site and cluster == self.cluster and not conf.clusters:
                return ClusterConfig()  # a site listed without clusters: all defaults
            raise ConfigError(
                f"site {name}: cluster {cluster!r} is not configured"
                f" ([sites.{name}.clusters.{cluster or 'NAME'}])"
            )
        return conf.clusters[cluster]


def model(sections: tuple[str, ...] | None = None) -> type[SiteFile]:
    """The model of the site file with the tables *sections* (default: all of
    :data:`gotthard.areas.SECTIONS`), each at its defaults.

    A command that reads only its own table (``gotthard exporter``) validates only that
    one: the other areas' models are neither imported nor built, which is most of a
    one-shot command's start-up. Their tables are then passed over, not checked, and
    their cross-checks skipped; every other command checks the whole file."""
    return _model(tuple(areas.SECTIONS) if sections is None else sections)


@functools.cache
def _model(names: tuple[str, ...]) -> type[SiteFile]:
    fields: dict[str, Any] = {}
    for name in names:
        section = areas.load(areas.SECTIONS[name])
        fields[name] = (section, section())
    return create_model(
        "Config" if names == tuple(areas.SECTIONS) else f"Config[{','.join(names)}]",
        __base__=SiteFile,
        __module__=__name__,
        **fields,
    )


def __getattr__(name: str) -> Any:
    # ``Config`` (the whole site file) is built on first use, not when this module is
    # imported: a command reading one table never builds the others (:func:`model`).
    if name == "Config":
        return model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    #: The whole site file: its own keys and every area's table.
    Config = SiteFile


def add_config_option(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    """Give a subcommand its own ``--config FILE`` (flag *name*), read by ``gotthard``.

    The default is SUPPRESS, so an option left unset on a nested subcommand does not wipe
    one given earlier on the command line."""
    parser.add_argument(
        name, dest=SUB_CONFIG_DEST, metavar="FILE", default=argparse.SUPPRESS, help=help
    )


def from_mapping(
    data: dict[str, Any], source: str = "<config>", sections: tuple[str, ...] | None = None
) -> Config:
    """Validate *data*: the whole site file, or only its *sections* (:func:`model`)."""
    if sections is not None:
        # the other areas' tables are theirs to check; an unknown table is still an error
        skipped = set(areas.SECTIONS) - set(sections)
        data = {key: value for key, value in data.items() if key not in skipped}
    try:
        return model(sections).model_validate(data)  # type: ignore[return-value]
    except ValidationError as err:
        raise ConfigError(format_validation_error(source, err)) from None


def path_of(args: argparse.Namespace) -> str | None:
    """The site file a command line names: the subcommand's own ``--config`` (it wins),
    else ``gotthard --config``, else ``$GOTTHARD_CONFIG``; None = built-in defaults."""
    given = getattr(args, SUB_CONFIG_DEST, None) or getattr(args, "config", None)
    return given or os.environ.get(ENV_VAR) or None


def load(
    path: str | os.PathLike[str] | None = None, sections: tuple[str, ...] | None = None
) -> Config:
    """Load the configuration from *path*, ``$GOTTHARD_CONFIG`` or the defaults: the
    whole file, or only the tables *sections* (:func:`model`)."""
    if path is None:
        path = os.environ.get(ENV_VAR) or None
    if path is None:
        return model(sections)()  # type: ignore[return-value]
    return from_mapping(read_toml(path), str(path), sections)


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML file *path* as a dict (the one TOML reader of the project); a file that
    cannot be read or parsed is a :class:`ConfigError` naming it."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise ConfigError(f"{file}: cannot read configuration: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{file}: not UTF-8 text: {err}") from None
    return parse_toml(text, str(file))


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """TOML *text* as a dict; text that does not parse is a :class:`ConfigError` naming
    *source*."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: not valid TOML: {err}") from None
