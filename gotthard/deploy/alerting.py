"""The Alertmanager side of every target: ``alertmanager.yml`` from ``[deploy.alertmanager]``
and the flags that make every site's Alertmanagers one gossip cluster.

The file's routes, receivers and inhibitions are
:mod:`gotthard.monitoring.alertmanager`'s; this module only fills its settings from the
site model: each site's runbook webhook (``webhook_urls``, else the ``runbooks`` target
of the site's clusters), the token file (``webhook_token_file``, else ``[runbooks]
token_file``), a pager per site, and the grouping.
"""

from __future__ import annotations

from gotthard.config import Config
from gotthard.deploy.roles import RUNBOOKS
from gotthard.deploy.topology import Alertmanagers, check_sites, clusters
from gotthard.monitoring import alertmanager
from gotthard.monitoring.alertmanager import AlertmanagerSettings

#: The file every Alertmanager of every site runs.
CONFIG_FILE = "alertmanager.yml"


def webhook_urls(cfg: Config) -> dict[str, str]:
    """site -> its runbook webhook: ``[deploy.alertmanager] webhook_urls``, else the first
    ``runbooks`` target of the site's clusters."""
    given = cfg.deploy.alertmanager.webhook_urls
    check_sites("deploy.alertmanager.webhook_urls", given, cfg.site_model)
    if given:
        return dict(given)
    found: dict[str, str] = {}
    for site, cluster in clusters(cfg):
        targets = cfg.deploy.prometheus.targets.get(cluster, {}).get(RUNBOOKS.name)
        if targets and site not in found:
            found[site] = f"http://{targets[0]}/alerts"
    return found


def settings(cfg: Config) -> AlertmanagerSettings:
    """The receivers and grouping of the site model's ``alertmanager.yml``."""
    given = cfg.deploy.alertmanager
    sites = cfg.site_model
    check_sites("deploy.alertmanager.pager_urls", given.pager_urls, sites)
    # the settings named alike in [deploy.alertmanager] and in the builder
    alike = given.model_dump(include=set(AlertmanagerSettings.__dataclass_fields__))
    alike.pop("pager_urls")
    alike.pop("webhook_token_file")
    return AlertmanagerSettings(
        **alike,
        site_webhook_urls=webhook_urls(cfg),
        webhook_token_file=given.webhook_token_file or cfg.runbooks.token_file,
        pager_urls={
            site: given.pager_urls.get(site, alertmanager.default_pager_url(site)) for site in sites
        },
    )


def config_text(cfg: Config) -> str:
    """``alertmanager.yml``, the same file for every Alertmanager of every site."""
    document = alertmanager.config(settings(cfg))
    return alertmanager.render_document(document, "gotthard deploy render")


def cluster_flags(cfg: Config, managers: Alertmanagers, listen: str) -> list[str]:
    """The ``--cluster.*`` flags of an Alertmanager gossiping on *listen*: the same peer
    list everywhere (listing itself does no harm), so an alert seen at several sites
    notifies once. A lone Alertmanager gossips with nobody."""
    peers = managers.peers()
    if len(peers) < 2:
        return ["--cluster.listen-address="]
    given = cfg.deploy.alertmanager
    return [
        f"--cluster.listen-address={listen}",
        *(f"--cluster.peer={peer}" for peer in peers),
        f"--cluster.gossip-interval={given.gossip_interval}",
        f"--cluster.pushpull-interval={given.pushpull_interval}",
    ]
