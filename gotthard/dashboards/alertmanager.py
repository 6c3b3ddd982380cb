"""The Alertmanager configuration: routes by severity and site, receivers, inhibitions.

Routing tree (first match wins unless ``continue``):

1. ``severity=~"critical|warning"`` -> ``runbook-webhook`` (``continue: true``): the
   alert-driven runbooks webhook (``gotthard runbooks serve``, bearer token from a file)
   sees every alert that pages or opens a ticket, firing and resolved.
2. ``severity="critical"`` -> ``pager-<site>`` for the alert's ``site`` label, else
   ``pager-default``.
3. ``severity="warning"`` -> ``ticket``.
4. ``severity="info"`` -> ``null`` (a receiver with no integrations: not routed).

The root receiver is ``ticket``, so an alert without a known severity still reaches a
human. Pager and ticket receivers are plain webhook URLs: placeholders (``*.invalid``) by
default, to be pointed at the site's paging and ticketing bridges (``--pager-url``,
``--ticket-url``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gotthard.dashboards.rules import dump_yaml

#: The runbook webhook (``gotthard runbooks serve`` listens on 127.0.0.1:9878).
DEFAULT_WEBHOOK_URL = "http://127.0.0.1:9878/alerts"
DEFAULT_WEBHOOK_TOKEN_FILE = "/etc/gotthard/runbooks-webhook.token"
#: Sites of the reference deployment, used when the site configuration names none.
DEFAULT_SITES = ("zurich", "lugano")

WEBHOOK_RECEIVER = "runbook-webhook"
TICKET_RECEIVER = "ticket"
NULL_RECEIVER = "null"
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


#: The labels every inhibition compares: an alert only mutes alerts of its own cluster.
_CLUSTER = ("site", "cluster")


def _mutes_family(alert: str, family: str, *equal: str, why: str) -> Inhibition:
    """While *alert* fires, every other alert whose name starts with *family* is muted."""
    return Inhibition(
        source=(f'alertname="{alert}"',),
        target=(f'alertname=~"{family}.+"', f'alertname!="{alert}"'),
        equal=(*_CLUSTER, *equal),
        why=why,
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
        why="the specific GPU fault already names why gpu_health is 0",
    ),
    _mutes(
        ("GotthardExporterDown",),
        "GotthardCollectorDown",
        "instance",
        why="a collector of an exporter that cannot be scraped is not the problem",
    ),
    _mutes(
        ("LustreOSTFillCritical",),
        "LustreOSTFillHigh",
        "fs",
        "target",
        why="the 90% alert supersedes the 85% one for the same OST",
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
    ticket_url: str = DEFAULT_TICKET_URL
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


def config(settings: AlertmanagerSettings | None = None) -> dict[str, Any]:
    settings = settings or AlertmanagerSettings()
    sites: Sequence[str] = list(settings.pager_urls)
    receivers: list[dict[str, Any]] = [
        {"name": NULL_RECEIVER},
        {
            "name": WEBHOOK_RECEIVER,
            "webhook_configs": [_webhook(settings.webhook_url, settings.webhook_token_file)],
        },
        *(
            {"name": pager_receiver(site), "webhook_configs": [_webhook(settings.pager_urls[site])]}
            for site in sites
        ),
        {
            "name": DEFAULT_PAGER_RECEIVER,
            "webhook_configs": [_webhook(settings.pager_fallback_url)],
        },
        {"name": TICKET_RECEIVER, "webhook_configs": [_webhook(settings.ticket_url)]},
    ]
    routes: list[dict[str, Any]] = [
        {
            "receiver": WEBHOOK_RECEIVER,
            "matchers": ['severity=~"critical|warning"'],
            "continue": True,
        },
        {
            "receiver": DEFAULT_PAGER_RECEIVER,
            "matchers": ['severity="critical"'],
            "routes": [
                {"receiver": pager_receiver(site), "matchers": [f'site="{site}"']} for site in sites
            ],
        },
        {"receiver": TICKET_RECEIVER, "matchers": ['severity="warning"']},
        {"receiver": NULL_RECEIVER, "matchers": ['severity="info"']},
    ]
    return {
        "global": {"resolve_timeout": settings.resolve_timeout},
        "route": {
            "receiver": TICKET_RECEIVER,
            "group_by": list(GROUP_BY),
            "group_wait": settings.group_wait,
            "group_interval": settings.group_interval,
            "repeat_interval": settings.repeat_interval,
            "routes": routes,
        },
        "inhibit_rules": [
            {
                "source_matchers": list(rule.source),
                "target_matchers": list(rule.target),
                "equal": list(rule.equal),
            }
            for rule in INHIBITIONS
        ],
        "receivers": receivers,
    }


HEADER = (
    "# Generated by `gotthard rules build` from gotthard/dashboards/alertmanager.py; do not edit.\n"
)


def render(settings: AlertmanagerSettings | None = None) -> str:
    return HEADER + dump_yaml(config(settings))
