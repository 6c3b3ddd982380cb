"""Where the site model's Prometheus and Alertmanagers run: the addresses every target
(``prometheus``, ``thanos``, ``local``) derives from ``[sites]`` and ``[deploy]``.

A cluster's Prometheus is its ``prometheus_url``, else its site's; clusters sharing one
make one Prometheus named ``SITE``, a cluster with its own makes one named
``SITE-CLUSTER``. A site's Alertmanagers run on ``[deploy.alertmanager] hosts`` (else the
host of the site's Prometheus) at ``port`` / ``cluster_port`` (or the site's own
``ports`` / ``cluster_ports``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gotthard.config import Config
from gotthard.deploy.manifest import RenderError

#: The port of an http(s) URL that names none.
DEFAULT_PORTS = {"http": 80, "https": 443}


def clusters(cfg: Config) -> list[tuple[str, str]]:
    """(site, cluster) of every cluster of the site model."""
    return [(name, cluster) for name, site in cfg.site_model.items() for cluster in site.clusters]


def url_host(url: str) -> str:
    """The host of *url* as it goes before ``:PORT`` (IPv6 in brackets); "" if none."""
    host = urlsplit(url).hostname or ""
    return f"[{host}]" if ":" in host else host


def url_address(url: str) -> str:
    """``host:port`` of an http(s) *url* (the scheme's port when it names none)."""
    parts = urlsplit(url)
    port = parts.port or DEFAULT_PORTS.get(parts.scheme, 80)
    return f"{url_host(url)}:{port}"


@dataclass(frozen=True)
class SitePrometheus:
    """One Prometheus of the site model and the clusters it scrapes."""

    site: str
    clusters: tuple[str, ...]
    url: str
    #: It is a cluster's own Prometheus rather than the site's.
    own: bool

    @property
    def name(self) -> str:
        """``SITE``, or ``SITE-CLUSTER`` for a cluster's own Prometheus."""
        return f"{self.site}-{self.clusters[0]}" if self.own else self.site

    @property
    def external_labels(self) -> dict[str, str]:
        """``site``, and ``cluster`` when it scrapes one cluster only: a Prometheus of
        several clusters leaves ``cluster`` to each series (scrape relabelling)."""
        out = {"site": self.site}
        if len(self.clusters) == 1:
            out["cluster"] = self.clusters[0]
        return out

    @property
    def host(self) -> str:
        return url_host(self.url)


def prometheuses(cfg: Config, *, every_cluster: bool = True) -> list[SitePrometheus]:
    """Every Prometheus of the site model, in site and cluster order.

    With *every_cluster* (the global view), a cluster with no Prometheus at all is a
    :class:`RenderError` naming the key to set; else such clusters are left out."""
    found = []
    for site_name, site in cfg.site_model.items():
        by_url: dict[str, list[str]] = {}
        for cluster_name in site.clusters:
            url = site.prometheus_of(cluster_name)
            if url:
                by_url.setdefault(url, []).append(cluster_name)
            elif every_cluster:
                raise RenderError(
                    f"sites.{site_name}.clusters.{cluster_name}: no prometheus_url, and the"
                    f" site has none; the global view needs every cluster's Prometheus"
                    f" (set sites.{site_name}.prometheus_url)"
                )
        for url, members in by_url.items():
            if not url_host(url):
                raise RenderError(f"sites.{site_name}: {url!r} is not an http(s) URL with a host")
            found.append(SitePrometheus(site_name, tuple(members), url, url != site.prometheus_url))
    if every_cluster and not found:
        raise RenderError("the site model names no cluster: nothing to render")
    names = [p.name for p in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise RenderError(f"two Prometheus would both be named {', '.join(twice)}; rename one")
    return found


def check_sites(key: str, named: Iterable[str], known: Iterable[str]) -> None:
    """:class:`RenderError` unless every site *named* under *key* is one of *known*."""
    sites = list(known)
    unknown = sorted(set(named) - set(sites))
    if unknown:
        raise RenderError(
            f"{key}: {', '.join(unknown)} is not a site of the site model;"
            f" known: {', '.join(sites)}"
        )


@dataclass(frozen=True)
class Alertmanagers:
    """Every site's Alertmanagers: site -> hosts, and their API and gossip ports."""

    hosts: dict[str, list[str]]
    ports: dict[str, int]
    cluster_ports: dict[str, int]

    def addresses(self, sites: Iterable[str] | None = None) -> list[str]:
        """``host:port`` of the APIs of *sites* (default: all), where alerts go."""
        return self._join(self.ports, sites)

    def peers(self, sites: Iterable[str] | None = None) -> list[str]:
        """``host:cluster_port`` of *sites* (default: all): one gossip cluster."""
        return self._join(self.cluster_ports, sites)

    def _join(self, ports: dict[str, int], sites: Iterable[str] | None) -> list[str]:
        chosen = self.hosts if sites is None else sites
        return list(dict.fromkeys(f"{h}:{ports[s]}" for s in chosen for h in self.hosts[s]))


def alertmanagers(cfg: Config) -> Alertmanagers:
    """Where each site's Alertmanagers run (``[deploy.alertmanager]``, else derived): a site
    with neither hosts nor a Prometheus has none."""
    settings = cfg.deploy.alertmanager
    model = cfg.site_model
    for key in ("hosts", "ports", "cluster_ports"):
        check_sites(f"deploy.alertmanager.{key}", getattr(settings, key), model)
    first = {p.site: p.url for p in reversed(prometheuses(cfg, every_cluster=False))}
    hosts: dict[str, list[str]] = {}
    for name, site in model.items():
        url = site.prometheus_url or first.get(name, "")
        given = settings.hosts.get(name) or ([url_host(url)] if url else [])
        if given:
            hosts[name] = list(given)
    return Alertmanagers(
        hosts,
        {site: settings.ports.get(site, settings.port) for site in hosts},
        {site: settings.cluster_ports.get(site, settings.cluster_port) for site in hosts},
    )
