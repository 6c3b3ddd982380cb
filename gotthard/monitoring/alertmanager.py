"""The Alertmanager configuration: routes by severity and site, receivers, inhibitions.

Routing tree (first match wins unless ``continue``):

0. ``alertname="GotthardWatchdog"`` -> ``deadman``: the always-firing dead man's switch
   goes only to the external dead man's switch (``--deadman-url``; by default a receiver
   with no integrations), repeated every ``deadman_repeat_interval``; never to the runbook
   webhook, a pager or a ticket.
1. ``severity=~"critical|warning"`` -> ``runbook-webhook`` (``continue: true``): the
   alert-driven runbooks webhook (``gotthard runbooks serve``, bearer token from a file)
   sees every alert that pages or opens a ticket, firing and resolved. With a webhook per
   site (``--site-webhook-url SITE=URL``), the alerts of each such site go to
   ``runbook-webhook-<site>`` instead, so the webhook that owns the site's clusters gets
   them; alerts of any other site still go to ``runbook-webhook``. Both sites' clustered
   Alertmanagers then run the same file and notify each webhook once.
2. ``severity="critical"`` -> ``pager-<site>`` for the alert's ``site`` label, else
   ``pager-default``.
3. ``severity="warning"`` -> ``ticket``.
4. ``severity="info"`` -> ``null`` (a receiver with no integrations: not routed).

Before 1: ``audience="users"`` (an efficiency finding about a user's job, such as
GPUIdleWhileAllocated) -> ``efficiency`` only, grouped by job: the users' channel
(``efficiency_url``, a placeholder ``http://efficiency.invalid/`` by default; or read
``gotthard job digest``), never the runbook webhook, a pager or a ticket.

The root receiver is ``ticket``, so an alert without a known severity still reaches a
human. Pager and ticket receivers are plain webhook URLs: placeholders (``*.invalid``) by
default, to be pointed at the site's paging and ticketing bridges (``--pager-url``,
``--ticket-url``).

:func:`config` is that complete file (``--mode full``). :func:`subtree` is the same routes,
receivers and inhibitions for a site that already runs Alertmanager (``--mode subtree``):
under one route that matches Gotthard's alerts by name, with every receiver named
``gotthard-...``; :func:`merge` puts it into the site's configuration.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gotthard.monitoring.documents import dump_yaml

#: The runbook webhook (``gotthard runbooks serve`` listens on 127.0.0.1:9878).
DEFAULT_WEBHOOK_URL = "http://127.0.0.1:9878/alerts"
DEFAULT_WEBHOOK_TOKEN_FILE = "/etc/gotthard/runbooks-webhook.token"
#: Sites of the reference deployment, used when the site configuration names none.
DEFAULT_SITES = ("zurich", "lugano")

WEBHOOK_RECEIVER = "runbook-webhook"
TICKET_RECEIVER = "ticket"
NULL_RECEIVER = "null"
DEADMAN_RECEIVER = "deadman"
EFFICIENCY_RECEIVER = "efficiency"
#: The label of the alerts about users' jobs (``AlertRule.audience``).
USERS = 'audience="users"'
DEFAULT_EFFICIENCY_URL = "http://efficiency.invalid/"
#: The always-firing alert that only the dead man's switch receives.
WATCHDOG_ALERT = "GotthardWatchdog"
DEFAULT_PAGER_RECEIVER = "pager-default"

GROUP_BY = ("alertname", "site", "cluster")


def default_pager_url(site: str) -> str:
    return f"http://pager.invalid/{site}"


DEFAULT_TICKET_URL = "http://ticket.invalid/"
DEFAULT_PAGER_FALLBACK_URL = "http://pager.invalid/default"


@dataclass(frozen=True)
class Inhibition:
    source: tuple[str, ...]
    target: tuple[str, ...]
    equal: tuple[str, ...]
    why: str
    #: (source alert, name prefix) of an inhibition that mutes a whole family
    family: tuple[str, str] | tuple[()] = ()


#: The labels every inhibition compares: an alert only mutes alerts of its own cluster.
_CLUSTER = ("site", "cluster")


def _mutes_family(alert: str, family: str, *equal: str, why: str) -> Inhibition:
    """While *alert* fires, every other alert whose name starts with *family* is muted."""
    return Inhibition(
        source=(f'alertname="{alert}"',),
        target=(f'alertname=~"{family}.+"', f'alertname!="{alert}"'),
        equal=(*_CLUSTER, *equal),
        why=why,
        family=(alert, family),
    )


def _mutes(sources: tuple[str, ...], target: str, *equal: str, why: str) -> Inhibition:
    """While any of the alerts *sources* fires, the alert *target* is muted."""
    source = (
        f'alertname="{sources[0]}"' if len(sources) == 1 else f'alertname=~"{"|".join(sources)}"'
    )
    return Inhibition(
        source=(source,),
        target=(f'alertname="{target}"',),
        equal=(*_CLUSTER, *equal),
        why=why,
    )


#: While the source alert fires, matching target alerts with equal labels are muted.
INHIBITIONS: tuple[Inhibition, ...] = (
    _mutes_family(
        "SlurmControllerDown",
        "Slurm",
        why="a controller outage explains every other Slurm symptom of that cluster",
    ),
    _mutes_family(
        "GPULost", "GPU", "instance", "gpu", why="a lost GPU reports nothing else worth acting on"
    ),
    _mutes(
        ("GPUFatalXid", "GPURowRemapFailure"),
        "GPUUnhealthy",
        "instance",
        "gpu",
        why="the specific GPU fault already names why gotthard_gpu_health is 0",
    ),
    _mutes(
        ("GotthardExporterDown",),
        "GotthardCollectorDown",
        "instance",
        why="a collector of an exporter that cannot be scraped is not the problem",
    ),
    _mutes(
        ("GotthardExporterDown", "GotthardCollectorDown"),
        "GotthardCollectorStale",
        "instance",
        why="an exporter or collector that is down already says why its data is old",
    ),
    _mutes(
        ("GotthardTLSCertificateExpiryImminent",),
        "GotthardTLSCertificateExpiring",
        "instance",
        "listen",
        why="the critical tier supersedes the 14-day notice for the same certificate",
    ),
    _mutes(
        ("LustreOSTFillHigh", "LustreOSTFillCritical"),
        "LustreOSTFillPredicted",
        "fs",
        "target",
        why="the OST is already over a static fill threshold",
    ),
    _mutes(
        ("LustreOSTFillCritical",),
        "LustreOSTFillHigh",
        "fs",
        "target",
        why="the 90% alert supersedes the 85% one for the same OST",
    ),
    _mutes(
        ("LustreOSTFillCritical", "LustreOSTFillPredictedCritical"),
        "LustreOSTFillPredicted",
        "fs",
        "target",
        why="the OST already pages for its fill; the 24-hour trend adds nothing",
    ),
    _mutes(
        ("LustreOSTFillCritical",),
        "LustreOSTFillPredictedCritical",
        "fs",
        "target",
        why="the OST already pages over the static 90% threshold",
    ),
    _mutes(
        ("LustreMDTFillCritical",),
        "LustreMDTFillHigh",
        "fs",
        "target",
        why="the 90% alert supersedes the 85% one for the same MDT",
    ),
    _mutes_family(
        "SlingshotLinkDown",
        "Slingshot",
        "instance",
        "device",
        why="a down link explains the other symptoms of that NIC",
    ),
)


@dataclass(frozen=True)
class AlertmanagerSettings:
    webhook_url: str = DEFAULT_WEBHOOK_URL
    webhook_token_file: str = DEFAULT_WEBHOOK_TOKEN_FILE
    #: site -> pager webhook URL; one ``pager-<site>`` receiver and route per entry
    pager_urls: Mapping[str, str] = field(
        default_factory=lambda: {site: default_pager_url(site) for site in DEFAULT_SITES}
    )
    pager_fallback_url: str = DEFAULT_PAGER_FALLBACK_URL
    #: site -> that site's runbook webhook URL; its alerts go there, not to ``webhook_url``
    site_webhook_urls: Mapping[str, str] = field(default_factory=dict)
    ticket_url: str = DEFAULT_TICKET_URL
    #: Where efficiency findings about users' jobs go; "" = a receiver with no integrations
    efficiency_url: str = DEFAULT_EFFICIENCY_URL
    #: The dead man's switch (a URL that expects the Watchdog every few minutes, such as
    #: healthchecks.io or Dead Man's Snitch); "" = a receiver with no integrations
    deadman_url: str = ""
    deadman_repeat_interval: str = "1m"
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"
    resolve_timeout: str = "5m"


def _webhook(url: str, token_file: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"url": url, "send_resolved": True}
    if token_file:
        config["http_config"] = {
            "authorization": {"type": "Bearer", "credentials_file": token_file}
        }
    return config


def pager_receiver(site: str) -> str:
    return f"pager-{site}"


def webhook_receiver(site: str) -> str:
    """The receiver of the runbook webhook of *site* (``site_webhook_urls``)."""
    return f"{WEBHOOK_RECEIVER}-{site}"


#: Prefix of every receiver name in the subtree, so that it cannot clash with the site's.
SUBTREE_PREFIX = "gotthard-"
Mode = Literal["full", "subtree"]
MODES: tuple[Mode, ...] = ("full", "subtree")


def _receivers(settings: AlertmanagerSettings, name: Callable[[str], str]) -> list[dict[str, Any]]:
    deadman: dict[str, Any] = {"name": name(DEADMAN_RECEIVER)}
    if settings.deadman_url:
        deadman["webhook_configs"] = [{"url": settings.deadman_url, "send_resolved": False}]
    efficiency: dict[str, Any] = {"name": name(EFFICIENCY_RECEIVER)}
    if settings.efficiency_url:
        efficiency["webhook_configs"] = [_webhook(settings.efficiency_url)]
    return [
        {"name": name(NULL_RECEIVER)},
        {
            "name": name(WEBHOOK_RECEIVER),
            "webhook_configs": [_webhook(settings.webhook_url, settings.webhook_token_file)],
        },
        *(
            {
                "name": name(webhook_receiver(site)),
                "webhook_configs": [_webhook(url, settings.webhook_token_file)],
            }
            for site, url in settings.site_webhook_urls.items()
        ),
        *(
            {
                "name": name(pager_receiver(site)),
                "webhook_configs": [_webhook(url)],
            }
            for site, url in settings.pager_urls.items()
        ),
        {
            "name": name(DEFAULT_PAGER_RECEIVER),
            "webhook_configs": [_webhook(settings.pager_fallback_url)],
        },
        {"name": name(TICKET_RECEIVER), "webhook_configs": [_webhook(settings.ticket_url)]},
        deadman,
        efficiency,
    ]


def _routes(settings: AlertmanagerSettings, name: Callable[[str], str]) -> list[dict[str, Any]]:
    """The severity/site routes below the root (see the module docstring)."""
    actionable = 'severity=~"critical|warning"'
    own = list(settings.site_webhook_urls)
    # the shared webhook gets the alerts of every site without a webhook of its own
    others = [f'site!~"{"|".join(own)}"'] if own else []
    return [
        {
            "receiver": name(DEADMAN_RECEIVER),
            "matchers": [f'alertname="{WATCHDOG_ALERT}"'],
            "group_wait": "0s",
            "group_interval": settings.deadman_repeat_interval,
            "repeat_interval": settings.deadman_repeat_interval,
        },
        {
            "receiver": name(EFFICIENCY_RECEIVER),
            "matchers": [USERS],
            "group_by": [*GROUP_BY, "job_id"],
        },
        *(
            {
                "receiver": name(webhook_receiver(site)),
                "matchers": [actionable, f'site="{site}"'],
                "continue": True,
            }
            for site in own
        ),
        {
            "receiver": name(WEBHOOK_RECEIVER),
            "matchers": [actionable, *others],
            "continue": True,
        },
        {
            "receiver": name(DEFAULT_PAGER_RECEIVER),
            "matchers": ['severity="critical"'],
            "routes": [
                {"receiver": name(pager_receiver(site)), "matchers": [f'site="{site}"']}
                for site in settings.pager_urls
            ],
        },
        {"receiver": name(TICKET_RECEIVER), "matchers": ['severity="warning"']},
        {"receiver": name(NULL_RECEIVER), "matchers": ['severity="info"']},
    ]


def _grouping(settings: AlertmanagerSettings) -> dict[str, Any]:
    return {
        "group_by": list(GROUP_BY),
        "group_wait": settings.group_wait,
        "group_interval": settings.group_interval,
        "repeat_interval": settings.repeat_interval,
    }


def _target(rule: Inhibition, alert_names: Sequence[str] | None) -> list[str]:
    """*rule*'s target matchers. Given Gotthard's *alert_names*, a family target names
    its members instead of a prefix, so that it cannot mute a site's own alerts."""
    if alert_names is None or not rule.family:
        return list(rule.target)
    source, prefix = rule.family
    members = sorted(n for n in alert_names if n.startswith(prefix) and n != source)
    return [f'alertname=~"{"|".join(members)}"']


def _inhibit_rules(alert_names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """:data:`INHIBITIONS` as Alertmanager writes them (see :func:`_target`)."""
    return [
        {
            "source_matchers": list(rule.source),
            "target_matchers": _target(rule, alert_names),
            "equal": list(rule.equal),
        }
        for rule in INHIBITIONS
    ]


def config(settings: AlertmanagerSettings | None = None) -> dict[str, Any]:
    """The complete ``alertmanager.yml`` (``--mode full``)."""
    settings = settings or AlertmanagerSettings()

    def same(name: str) -> str:
        return name

    return {
        "global": {"resolve_timeout": settings.resolve_timeout},
        "route": {
            "receiver": TICKET_RECEIVER,
            **_grouping(settings),
            "routes": _routes(settings, same),
        },
        "inhibit_rules": _inhibit_rules(),
        "receivers": _receivers(settings, same),
    }


def gotthard_matcher(alert_names: Iterable[str]) -> str:
    """The matcher that selects exactly Gotthard's alerts (by their names)."""
    return f'alertname=~"{"|".join(sorted(alert_names))}"'


def subtree_name(name: str) -> str:
    return SUBTREE_PREFIX + name


def subtree(
    alert_names: Iterable[str], settings: AlertmanagerSettings | None = None
) -> dict[str, Any]:
    """``--mode subtree``: Gotthard's route, receivers and inhibitions, to merge into a
    site's own configuration.

    The document is itself a valid configuration: its root route (receiver
    ``gotthard-null``) only holds the one route to merge, ``route.routes[0]``. That route
    matches Gotthard's alerts by name and does not continue, so the site's own routes
    never see them; every receiver is named ``gotthard-...``; every inhibition names
    Gotthard's alerts on both sides, so it never mutes the site's own alerts.
    """
    settings = settings or AlertmanagerSettings()
    names = sorted(alert_names)
    route = {
        "receiver": subtree_name(TICKET_RECEIVER),
        "matchers": [gotthard_matcher(names)],
        **_grouping(settings),
        "routes": _routes(settings, subtree_name),
    }
    return {
        "route": {"receiver": subtree_name(NULL_RECEIVER), "routes": [route]},
        "inhibit_rules": _inhibit_rules(names),
        "receivers": _receivers(settings, subtree_name),
    }


class MergeError(ValueError):
    """The site's configuration cannot take the subtree."""


def merge(existing: Any, tree: dict[str, Any]) -> dict[str, Any]:
    """*existing* (a parsed ``alertmanager.yml``) with the subtree *tree* merged in.

    Gotthard's route becomes the first child of the site's root route; its receivers and
    inhibitions are appended. Parts of an earlier merge (receivers named ``gotthard-...``,
    root children routed to them, inhibitions equal to the new ones) are replaced, so
    merging again gives the same file. A site receiver already named ``gotthard-...`` that
    the subtree also defines is replaced too: the prefix is Gotthard's.
    """
    if not isinstance(existing, dict) or not isinstance(existing.get("route"), dict):
        raise MergeError("not an Alertmanager configuration: no top-level route")
    merged = copy.deepcopy(existing)
    route = merged["route"]
    if not route.get("receiver"):
        raise MergeError("the root route has no receiver")
    (gotthard_route,) = tree["route"]["routes"]

    def ours(name: object) -> bool:
        return isinstance(name, str) and name.startswith(SUBTREE_PREFIX)

    children = [r for r in route.get("routes") or [] if not ours(r.get("receiver"))]
    route["routes"] = [copy.deepcopy(gotthard_route), *children]
    receivers = [r for r in merged.get("receivers") or [] if not ours(r.get("name"))]
    merged["receivers"] = [*receivers, *copy.deepcopy(tree["receivers"])]
    inhibitions = [
        rule for rule in merged.get("inhibit_rules") or [] if rule not in tree["inhibit_rules"]
    ]
    merged["inhibit_rules"] = [*inhibitions, *copy.deepcopy(tree["inhibit_rules"])]
    return merged


HEADER = (
    "# Generated by `gotthard rules build` from gotthard/monitoring/alertmanager.py; do not edit.\n"
)


def render(settings: AlertmanagerSettings | None = None) -> str:
    return HEADER + dump_yaml(config(settings))


def render_document(document: dict[str, Any], command: str = "gotthard rules build") -> str:
    """*document* as YAML under a header naming the *command* that wrote it."""
    return HEADER.replace("`gotthard rules build`", f"`{command}`") + dump_yaml(document)
