"""The exporter's routes: ``/metrics`` (scrape timeout header, gzip), ``/healthz``, ``/``.

Serving itself (TLS, basic auth and headers from the web config, timeouts, connection
limits) is :mod:`gotthard.serve`.
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Callable

from gotthard.exposition import CONTENT_TYPE
from gotthard.serve import HEALTH_ROUTE, METRICS_ROUTE, Request, Response, Server, WebConfig, text

#: Subtracted from Prometheus' scrape timeout header so the reply arrives in time.
TIMEOUT_OFFSET_SECONDS = 0.5

LANDING = """<html><head><title>Gotthard exporter</title></head><body>
<h1>Gotthard exporter</h1>
<p><a href="/metrics">Metrics</a> &middot; <a href="/healthz">Health</a></p>
</body></html>
"""


def scrape_timeout(header: str | None, default: float) -> float:
    """The time a scrape may take: Prometheus' own timeout less a margin, at most ``default``."""
    timeout = default
    if header:
        with contextlib.suppress(ValueError):
            timeout = min(timeout, max(float(header) - TIMEOUT_OFFSET_SECONDS, 0.1))
    return timeout


def make_server(
    host: str,
    port: int,
    scrape: Callable[[float], str],
    *,
    default_timeout: float,
    web: WebConfig | None = None,
) -> Server:
    """An HTTP(S) server calling ``scrape(timeout)`` for every ``/metrics`` request."""

    def metrics(request: Request) -> Response:
        timeout = scrape_timeout(
            request.header("X-Prometheus-Scrape-Timeout-Seconds"), default_timeout
        )
        body = scrape(timeout).encode()
        headers = [("Content-Type", CONTENT_TYPE)]
        if "gzip" in (request.header("Accept-Encoding") or ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        return 200, headers, body

    routes = {
        METRICS_ROUTE: metrics,
        HEALTH_ROUTE: lambda _: text(200, "ok\n"),
        "GET /": lambda _: text(200, LANDING, "text/html; charset=utf-8"),
    }
    return Server((host, port), routes, web=web, name="gotthard-exporter")
