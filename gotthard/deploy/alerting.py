"""The Alertmanager side of every target: ``alertmanager.yml`` from ``[deploy.alertmanager]``
and the flags that make every site's Alertmanagers one gossip cluster.

The file's routes, receivers and inhibitions are
:mod:`gotthard.monitoring.alertmanager`'s; this module only fills its settings from the
site model: each site's runbook webhook (``webhook_urls``, else the ``runbooks`` target
of the site's clusters), the token file (``webhook_token_file``, else ``[runbooks]
token_file``), a pager per site, and the grouping.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

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


# --- the subtree as an AlertmanagerConfig (prometheus-operator) ------------------------------

#: ``name OP "value"``, as the subtree writes its matchers.
_MATCHER = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)(=~|!~|!=|=)"(.*)"$')
#: The subtree's route keys and their AlertmanagerConfig names.
_ROUTE_KEYS = {
    "receiver": "receiver",
    "group_by": "groupBy",
    "group_wait": "groupWait",
    "group_interval": "groupInterval",
    "repeat_interval": "repeatInterval",
    "continue": "continue",
}
#: Where the file goes, beside the Kubernetes manifests.
ALERTMANAGER_CONFIG_FILE = "alertmanager-config.yaml"


def _matchers(matchers: list[str]) -> list[dict[str, str]]:
    out = []
    for text in matchers:
        found = _MATCHER.match(text)
        if not found:  # the subtree writes only this form; anything else is a bug here
            raise ValueError(f'matcher {text!r} is not NAME OP "VALUE"')
        name, op, value = found.groups()
        out.append({"name": name, "matchType": op, "value": value})
    return out


def _route(route: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {new: route[old] for old, new in _ROUTE_KEYS.items() if old in route}
    if route.get("matchers"):
        out["matchers"] = _matchers(route["matchers"])
    if route.get("routes"):
        out["routes"] = [_route(child) for child in route["routes"]]
    return out


def _receiver(receiver: dict[str, Any], token_secret: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": receiver["name"]}
    hooks = []
    for hook in receiver.get("webhook_configs", []):
        entry: dict[str, Any] = {"url": hook["url"], "sendResolved": hook["send_resolved"]}
        if "http_config" in hook:  # the token file: the same token, from a Secret
            entry["httpConfig"] = {
                "authorization": {
                    "type": "Bearer",
                    "credentials": {"name": token_secret, "key": "token"},
                }
            }
        hooks.append(entry)
    if hooks:
        out["webhookConfigs"] = hooks
    return out


def alertmanager_config(cfg: Config, labels: dict[str, str]) -> dict[str, Any]:
    """Gotthard's route, receivers and inhibitions (``alertmanager build --mode subtree``)
    as an AlertmanagerConfig (monitoring.coreos.com/v1alpha1) in the Alertmanager's
    namespace (``[deploy.kubernetes] prometheus_namespace``): kube-prometheus-stack
    selects every AlertmanagerConfig of its own namespace by default. The webhooks' bearer
    token is the ``token`` key of ``runbooks_token_secret`` in that namespace."""
    from gotthard.monitoring import rules

    kube = cfg.deploy.kubernetes
    given = settings(cfg)
    if "webhook_url" not in cfg.deploy.alertmanager.model_fields_set:
        # in the cluster, the webhook is its Service, not a port on Alertmanager's host
        service = f"http://{RUNBOOKS.full_name}.{kube.namespace}.svc:{RUNBOOKS.port}/alerts"
        given = dataclasses.replace(given, webhook_url=service)
    tree = alertmanager.subtree(rules.alert_names(cfg.monitoring), given)
    (route,) = tree["route"]["routes"]
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {
            "name": "gotthard",
            "namespace": kube.prometheus_namespace,
            "labels": labels,
        },
        "spec": {
            "route": _route(route),
            "receivers": [_receiver(r, kube.runbooks_token_secret) for r in tree["receivers"]],
            "inhibitRules": [
                {
                    "sourceMatch": _matchers(rule["source_matchers"]),
                    "targetMatch": _matchers(rule["target_matchers"]),
                    "equal": rule["equal"],
                }
                for rule in tree["inhibit_rules"]
            ],
        },
    }
