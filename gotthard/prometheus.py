"""The Prometheus HTTP API, the few calls Gotthard makes: one client for every area.

``gotthard dashboards check`` sends panel queries through it, the runbook webhook asks it
whether an alert's condition is repaired, and the DR placement controller reads site
health with it. Standard library only (urllib), so any role can import it. Over HTTPS it
presents the process's X.509-SVID when ``[spiffe]`` configures one (:mod:`gotthard.spiffe`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from gotthard import spiffe


class PrometheusError(Exception):
    """Prometheus answered with an error, or could not be reached."""

    def __init__(self, message: str, *, status: int = 0, error_type: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


class Prometheus:
    """The few HTTP API calls Gotthard makes (query, label values, build info)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, params: Sequence[tuple[str, str]], *, post: bool = False) -> Any:
        encoded = urllib.parse.urlencode(list(params))
        url = f"{self.url}{path}"
        if post:
            request = urllib.request.Request(
                url,
                data=encoded.encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
        else:
            request = urllib.request.Request(f"{url}?{encoded}" if encoded else url)
        try:
            # over HTTPS the process's SVID, when [spiffe] configures one (mTLS)
            context = spiffe.client_context() if url.startswith("https:") else None
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                body = response.read()
                status = response.status
        except urllib.error.HTTPError as err:
            body = err.read()
            status = err.code
        except (urllib.error.URLError, OSError, spiffe.SvidError) as err:
            reason = getattr(err, "reason", err)
            raise PrometheusError(f"cannot reach {self.url}: {reason}") from None
        try:
            envelope = json.loads(body)
        except ValueError:
            snippet = body[:200].decode(errors="replace").strip()
            raise PrometheusError(
                f"HTTP {status} from {path}, not a Prometheus API answer: {snippet!r}",
                status=status,
            ) from None
        if status >= 400 or envelope.get("status") != "success":
            error_type = str(envelope.get("errorType", ""))
            raise PrometheusError(
                str(envelope.get("error", f"HTTP {status}")), status=status, error_type=error_type
            )
        return envelope.get("data")

    def buildinfo(self) -> dict[str, Any]:
        return self._call("/api/v1/status/buildinfo", ())

    def label_values(self, label: str, selector: str = "") -> list[str]:
        params = [("match[]", selector)] if selector else []
        return sorted(self._call(f"/api/v1/label/{urllib.parse.quote(label)}/values", params))

    def query(self, expr: str, at: float | None = None) -> tuple[str, list[Any]]:
        """*expr* evaluated now, or at the Unix time *at*."""
        params = [("query", expr)] + ([("time", f"{at:.3f}")] if at is not None else [])
        data = self._call("/api/v1/query", params, post=True)
        result = data.get("result")
        if data.get("resultType") in ("scalar", "string"):
            return data["resultType"], [result]
        return str(data.get("resultType")), list(result or [])

    def scalar(self, expr: str, at: float | None = None) -> float | None:
        """The first sample's value of *expr* (now, or at *at*), or None when empty."""
        _, result = self.query(expr, at)
        if not result:
            return None
        sample = result[0]
        value = sample.get("value") if isinstance(sample, dict) else sample
        return float(value[1])
