"""The site model: sites, their clusters, and how to reach each cluster's Slurm,
Kubernetes, Prometheus and Karmada members.

Defined once here and read by every area through :class:`gotthard.config.Config`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from gotthard.base import Name, Strict


class KubeAccess(Strict):
    """How to reach one Kubernetes API server.

    An explicit kubeconfig file and context, or the pod's service account when
    ``in_cluster = true``. Empty ``kubeconfig`` means ``$KUBECONFIG`` or
    ``~/.kube/config``; empty ``context`` means that file's current context. There is no
    fallback from one to the other: a kubeconfig that fails to load is an error, never
    a silent switch to the cluster the process happens to run in.
    """

    kubeconfig: str = ""
    context: str = ""
    in_cluster: bool = False

    @model_validator(mode="after")
    def _one_way(self) -> KubeAccess:
        if self.in_cluster and (self.kubeconfig or self.context):
            raise ValueError("in_cluster = true excludes kubeconfig and context")
        return self


class ClusterConfig(Strict):
    """One cluster of a site: a Slurm cluster, a Kubernetes cluster, or both."""

    #: slurm.conf of this cluster (``SLURM_CONF`` for the Slurm commands); empty = default.
    slurm_conf: str = ""
    #: ``http://host:6820`` (JWT) or ``unix:/path/to/slurmrestd.sock``; empty = no slurmrestd.
    slurmrestd_url: str = ""
    #: File holding a Slurm JWT (``scontrol token``) of this cluster; empty = munge.
    #: Set, the Slurm commands (``scontrol``, ``sinfo``) authenticate with it as
    #: ``SLURM_JWT`` (read before each command, so a rotated Secret is picked up): a pod
    #: needs no munge socket then, only the client commands and ``slurm.conf``. slurmctld
    #: must accept it (``AuthAltTypes=auth/jwt``).
    slurm_jwt_file: str = ""
    #: The Kubernetes API of this cluster; absent = the cluster runs no Kubernetes.
    kubernetes: KubeAccess | None = None
    #: The Prometheus that scrapes this cluster; empty = the site's.
    prometheus_url: str = ""
    #: Karmada member-cluster names of this cluster (PropagationPolicy clusterNames).
    karmada_members: list[str] = Field(default_factory=list)
    #: Namespace of Velero on this cluster's Kubernetes.
    velero_namespace: str = "velero"

    @property
    def runs_slurm(self) -> bool:
        """A Slurm cluster: it names its ``slurm.conf``, slurmrestd or Slurm JWT."""
        return bool(self.slurm_conf or self.slurmrestd_url or self.slurm_jwt_file)


class SiteConfig(Strict):
    """One physical site, e.g. Zurich or Lugano."""

    display_name: str = ""
    prometheus_url: str = ""
    clusters: dict[Name, ClusterConfig] = Field(default_factory=dict)
    #: The cluster whose Kubernetes holds the site's backups, drills and Lease; empty =
    #: the only cluster of the site with a ``kubernetes`` table.
    kubernetes_cluster: str = ""

    @model_validator(mode="after")
    def _kubernetes_cluster(self) -> SiteConfig:
        with_kube = [name for name, c in self.clusters.items() if c.kubernetes is not None]
        if self.kubernetes_cluster:
            if self.kubernetes_cluster not in with_kube:
                raise ValueError(
                    f"kubernetes_cluster: {self.kubernetes_cluster!r} is not a cluster of this"
                    f" site with a kubernetes table (those are: {', '.join(with_kube) or 'none'})"
                )
        elif len(with_kube) > 1:
            raise ValueError(
                f"kubernetes_cluster: the site has several Kubernetes clusters"
                f" ({', '.join(with_kube)}); name the one DR uses"
            )
        return self

    @property
    def kube_cluster(self) -> str | None:
        """Name of the cluster DR, placement and the Lease use on this site, if any."""
        if self.kubernetes_cluster:
            return self.kubernetes_cluster
        return next((n for n, c in self.clusters.items() if c.kubernetes is not None), None)

    @property
    def velero_namespace(self) -> str:
        name = self.kube_cluster
        return self.clusters[name].velero_namespace if name else "velero"

    @property
    def karmada_members(self) -> list[str]:
        return [m for cluster in self.clusters.values() for m in cluster.karmada_members]

    def prometheus_of(self, cluster: str | None) -> str:
        """The Prometheus of *cluster*, else the site's."""
        own = self.clusters[cluster].prometheus_url if cluster in self.clusters else ""
        return own or self.prometheus_url
