"""The clusters a webhook owns, and the Slurm, Kubernetes and Prometheus of each.

A webhook acts only on the clusters its site configuration names: by default every
cluster of its own site (``site``), or the subset ``[runbooks] clusters`` lists. Node
names repeat across clusters (``nid001234`` on every Cray system), so the ``cluster``
label of an alert decides which controller an action goes to, and an alert of a cluster
the webhook does not own is never acted on (``foreign-cluster`` in the audit).

An alert without a ``cluster`` label belongs to ``[runbooks] default_cluster`` when it is
set, else to the webhook's only cluster; a webhook that owns several clusters and has no
``default_cluster`` cannot tell, and does not act.

Each owned cluster has its own backends: ``scontrol``/``sinfo`` with that cluster's
``slurm_conf`` as ``SLURM_CONF`` (and its ``slurm_jwt_file`` as ``SLURM_JWT``, when set),
the Kubernetes API of its ``kubernetes`` table, and the
Prometheus that confirms its repairs (``[runbooks] prometheus_url``, else the cluster's,
else the site's). DR actions are the site's and shared by all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gotthard.runbooks.actions import Backends, DrActions, KubernetesActions, SlurmActions
from gotthard.runbooks.repair import RepairCheck
from gotthard.runbooks.settings import RunbooksConfig
from gotthard.runbooks.validate import shown

if TYPE_CHECKING:
    from gotthard.config import Config

#: The result of an alert of a cluster the webhook does not own.
FOREIGN = "foreign-cluster"


class OwnershipError(ValueError):
    """The ``[runbooks]`` clusters do not match the site model; the message names the key."""


@dataclass(frozen=True)
class Cluster:
    """One owned cluster: where its actions go and who confirms its repairs."""

    name: str
    backends: Backends
    repair: RepairCheck


class Clusters:
    """The clusters one webhook owns, by name; :meth:`owner` says which one an alert is of."""

    def __init__(self, owned: Iterable[Cluster], *, default: str = "") -> None:
        self.owned: dict[str, Cluster] = {cluster.name: cluster for cluster in owned}
        if not self.owned:
            raise OwnershipError("runbooks.clusters: the webhook owns no cluster")
        if default and default not in self.owned:
            raise OwnershipError(
                f"runbooks.default_cluster: {default!r} is not one of the webhook's clusters"
                f" ({', '.join(self.owned)})"
            )
        self.default = default

    @property
    def names(self) -> list[str]:
        return list(self.owned)

    def owner(self, labels: Mapping[str, str]) -> Cluster | str:
        """The owned cluster the alert with *labels* is of, or why it is none of them."""
        value = labels.get("cluster", "")
        if not value:
            if self.default:
                return self.owned[self.default]
            if len(self.owned) == 1:
                return next(iter(self.owned.values()))
            return (
                "the alert has no cluster label and this webhook owns several clusters"
                f" ({', '.join(self.owned)}) and no default_cluster"
            )
        cluster = self.owned.get(value)
        if cluster is None:
            return (
                f"cluster {shown(value)} is not one of this webhook's clusters"
                f" ({', '.join(self.owned)})"
            )
        return cluster


def shared(
    settings: RunbooksConfig,
    names: Iterable[str],
    *,
    slurm: SlurmActions | None = None,
    kubernetes: KubernetesActions | None = None,
    dr: DrActions | None = None,
) -> Clusters:
    """Clusters *names* that all act through the same backends (defaults from *settings*):
    a webhook without a site model, and tests."""
    backends = Backends(
        slurm=slurm or SlurmActions(settings),
        kubernetes=kubernetes or KubernetesActions(settings),
        dr=dr or DrActions(),
    )
    check = RepairCheck(settings.prometheus_url, settings.prometheus_timeout_seconds)
    owned = [Cluster(name, backends, check) for name in names]
    return Clusters(owned, default=settings.default_cluster)


def from_config(cfg: Config, settings: RunbooksConfig) -> Clusters:
    """The clusters the webhook of *cfg* owns, each with its backends from the site model.

    Raises :class:`OwnershipError` naming ``runbooks.clusters`` (or ``default_cluster``)
    when they name a cluster that is not one of the site's."""
    from gotthard.kube import where
    from gotthard.site import ClusterConfig

    site = cfg.site_config()
    # a site listed without clusters still has the installation's own, with defaults
    available: Mapping[str, ClusterConfig] = site.clusters or {cfg.cluster: ClusterConfig()}
    try:
        names = settings.owned_clusters(cfg.site, list(available))
    except ValueError as err:
        raise OwnershipError(str(err)) from None
    dr = DrActions(cfg)
    owned = []
    for name in names:
        conf = available[name]
        backends = Backends(
            slurm=SlurmActions(settings, slurm_conf=conf.slurm_conf, jwt_file=conf.slurm_jwt_file),
            kubernetes=KubernetesActions(
                settings, access=conf.kubernetes, where=where(cfg.site, name)
            ),
            dr=dr,
        )
        url = settings.prometheus_url or site.prometheus_of(name)
        owned.append(Cluster(name, backends, RepairCheck(url, settings.prometheus_timeout_seconds)))
    return Clusters(owned, default=settings.default_cluster)
