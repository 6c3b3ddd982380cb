"""Slurm backend that reads slurmrestd's OpenAPI endpoints.

One poll asks ``/slurm/{v}/ping`` (when probing), ``/diag``, ``/jobs``, ``/nodes`` and
``/partitions``. The OpenAPI version ``v`` is negotiated on the first poll (and again
after a 404): the newest version that both the server offers and this module maps.

Job, node and partition listings are fetched with ``?update_time=<epoch>``: when nothing
changed since then, slurmrestd answers ``304 Not Modified`` with an empty body (about
10 ms instead of seconds for a large queue) and the previous decoded listing, and what
was mapped from it, is reused.

The mapping from decoded JSON to the snapshot is :mod:`.rest_json` (the field table).
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import math
import re
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gotthard.slurm import rest_json, snapshot
from gotthard.slurm.values import json_number, json_text

#: OpenAPI versions this module maps, newest first.
SUPPORTED_VERSIONS: tuple[str, ...] = (
    "v0.0.44",
    "v0.0.43",
    "v0.0.42",
    "v0.0.41",
    "v0.0.40",
    "v0.0.39",
    "v0.0.38",
)

_VERSION_IN_PATH = re.compile(r"/slurm/(v\d+\.\d+\.\d+)(?:/|$)")
_BODY_SNIPPET = 200

_T = TypeVar("_T")


# --- HTTP -------------------------------------------------------------------------------------


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix stream socket (slurmrestd ``unix:/path`` listeners)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class _Target:
    scheme: str
    host: str
    port: int
    socket_path: str
    base_path: str

    @property
    def display(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.socket_path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"


def parse_url(url: str) -> _Target:
    """Validate a slurmrestd URL: ``http(s)://host:port[/prefix]`` or ``unix:/abs/path``."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("slurmrestd URL is empty; use http://host:port or unix:/path/to.sock")
    url = url.strip()
    if url.startswith("unix:"):
        path = url[len("unix:") :]
        if path.startswith("//") and not path.startswith("///"):
            raise ValueError(
                f"invalid slurmrestd URL {url!r}: a unix socket URL is unix:/absolute/path"
            )
        if not path.startswith("/"):
            raise ValueError(
                f"invalid slurmrestd URL {url!r}: the unix socket path must be absolute "
                "(unix:/run/slurmrestd.sock)"
            )
        path = "/" + path.lstrip("/")
        if path == "/" or path.endswith("/"):
            raise ValueError(f"invalid slurmrestd URL {url!r}: no socket file name")
        return _Target("unix", "", 0, path, "")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(
            f"invalid slurmrestd URL {url!r}: scheme must be http, https or unix "
            "(http://host:6820, unix:/run/slurmrestd.sock)"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid slurmrestd URL {url!r}: bad port ({exc})") from None
    if not parts.hostname:
        raise ValueError(f"invalid slurmrestd URL {url!r}: missing host")
    if port is None:
        raise ValueError(f"invalid slurmrestd URL {url!r}: missing port (slurmrestd has none)")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(
            f"invalid slurmrestd URL {url!r}: no query, fragment or credentials allowed"
        )
    return _Target(parts.scheme, parts.hostname, port, "", parts.path.rstrip("/"))


def jwt_user(token: str) -> str | None:
    """The user name (``sun`` claim) inside a Slurm JWT, without verifying it.

    slurmrestd 22.05 rejects a token sent without ``X-SLURM-USER-NAME`` (HTTP 401), so
    a token alone still works when the name can be read from it.
    """
    parts = token.strip().split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(claims, dict):
        return None
    name = claims.get("sun") or claims.get("username")
    return name if isinstance(name, str) and name else None


class _VersionGone(Exception):
    """A versioned endpoint answered 404: the server no longer offers the version."""


@dataclass(slots=True)
class _Response:
    status: int
    body: bytes
    seconds: float


@dataclass(slots=True)
class _Listing:
    """The last full answer of one listing endpoint and what was mapped from it."""

    #: Local time the request that produced ``records`` was sent.
    since: float
    records: list[Any]
    mapped_key: Any = None
    mapped: Any = None


def _snippet(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return " ".join(text[:_BODY_SNIPPET].split())


# --- backend ----------------------------------------------------------------------------------


class RestBackend:
    """Polls slurmrestd; see the module docstring.

    ``self.stats`` counts ``requests`` (HTTP requests sent), ``not_modified`` (304 answers),
    ``full`` (200 answers of the listing endpoints), ``negotiations``, ``retries`` (a
    listing asked again without ``update_time`` after a 5xx) and ``bytes`` received.
    """

    name = "rest"

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        user: str | None = None,
        timeout: float = 10.0,
        versions: tuple[str, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        self._target = parse_url(url)
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        unknown = [v for v in versions if v not in SUPPORTED_VERSIONS]
        if unknown or not versions:
            raise ValueError(
                f"unsupported OpenAPI version(s) {unknown or list(versions)}; "
                f"this backend maps {', '.join(SUPPORTED_VERSIONS)}"
            )
        # Newest first, whatever order the caller gave.
        self._versions = tuple(sorted(set(versions), key=_version_key, reverse=True))
        self._timeout = timeout
        self._ssl = ssl.create_default_context() if self._target.scheme == "https" else None
        self._headers = {"Accept": "application/json", "Connection": "close"}
        if token:
            self._headers["X-SLURM-USER-TOKEN"] = token.strip()
        user = user or (jwt_user(token) if token else None)
        if user:
            self._headers["X-SLURM-USER-NAME"] = user
        self._api: str | None = None
        self._listings: dict[str, _Listing] = {}
        #: Controller clock minus ours, estimated from /diag's ``req_time`` (a lower bound).
        self._clock_offset: float | None = None
        self.stats: dict[str, int] = {
            "requests": 0,
            "not_modified": 0,
            "full": 0,
            "negotiations": 0,
            "retries": 0,
            "bytes": 0,
        }

    @property
    def url(self) -> str:
        return self._target.display

    @property
    def api_version(self) -> str | None:
        """The negotiated OpenAPI version (``v0.0.38``), None before the first poll."""
        return self._api

    # -- HTTP plumbing --

    def _connection(self) -> http.client.HTTPConnection:
        target = self._target
        if target.scheme == "unix":
            return UnixHTTPConnection(target.socket_path, self._timeout)
        if target.scheme == "https":
            return http.client.HTTPSConnection(
                target.host,
                target.port,
                timeout=self._timeout,
                context=self._ssl,
            )
        return http.client.HTTPConnection(target.host, target.port, timeout=self._timeout)

    def _request(self, path: str, query: Mapping[str, str] | None = None) -> _Response:
        full_path = self._target.base_path + path
        if query:
            full_path += "?" + urllib.parse.urlencode(query)
        self.stats["requests"] += 1
        started = time.monotonic()
        connection = self._connection()
        try:
            connection.request("GET", full_path, headers=self._headers)
            response = connection.getresponse()
            body = response.read()
            status = response.status
        except (OSError, http.client.HTTPException) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}"
            detail = str(exc) or reason
            raise snapshot.SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} failed ({reason}: {detail})"
            ) from exc
        finally:
            connection.close()
        self.stats["bytes"] += len(body)
        return _Response(status, body, time.monotonic() - started)

    def _fail(self, path: str, response: _Response) -> snapshot.SlurmUnavailable:
        status = response.status
        if status in (401, 403):
            what = "authentication rejected (check the JWT token and user)"
        elif status >= 500:
            what = "server error"
        else:
            what = "unexpected status"
        message = f"slurmrestd {self.url}: GET {path} -> HTTP {status} {what}"
        try:
            document = json.loads(response.body)
        except (ValueError, UnicodeDecodeError):
            document = None
        errors = rest_json.errors_text(document) if isinstance(document, dict) else ""
        if errors:
            message += f": {errors}"
        body = _snippet(response.body)
        if body:
            message += f" (body: {body})"
        return snapshot.SlurmUnavailable(message)

    def _decode(self, path: str, response: _Response) -> rest_json.JsonDict:
        try:
            document = json.loads(response.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise snapshot.SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} returned malformed JSON ({exc}): "
                f"{_snippet(response.body)}"
            ) from None
        if not isinstance(document, dict):
            raise snapshot.SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} returned JSON that is not an object: "
                f"{_snippet(response.body)}"
            )
        return document

    def _get_json(self, path: str) -> tuple[rest_json.JsonDict, float]:
        response = self._request(path)
        if response.status == 404:
            raise _VersionGone(path)
        if response.status != 200:
            raise self._fail(path, response)
        return self._decode(path, response), response.seconds

    # -- version negotiation --

    def _offered_from_openapi(self) -> list[str] | None:
        """Versions listed in the server's OpenAPI description, None if it has none."""
        for path in ("/openapi/v3", "/openapi"):
            response = self._request(path)
            if response.status in (401, 403):
                raise self._fail(path, response)
            if response.status != 200:
                continue
            try:
                document = json.loads(response.body)
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(document, dict):
                continue
            offered: set[str] = set()
            paths = document.get("paths")
            if isinstance(paths, Mapping):
                for key in paths:
                    match = _VERSION_IN_PATH.search(str(key))
                    if match:
                        offered.add(match.group(1))
            servers = document.get("servers")
            if isinstance(servers, list):
                for server in servers:
                    if isinstance(server, Mapping):
                        match = _VERSION_IN_PATH.search(json_text(server.get("url")))
                        if match:
                            offered.add(match.group(1))
            return sorted(offered, key=_version_key, reverse=True)
        return None

    def _negotiate(self) -> str:
        self.stats["negotiations"] += 1
        offered = self._offered_from_openapi()
        if offered is not None:
            for version in offered:
                if version in self._versions:
                    return version
            raise snapshot.SlurmUnavailable(
                f"slurmrestd {self.url} offers OpenAPI versions "
                f"{', '.join(offered) or '(none under /slurm/)'}; this backend maps "
                f"{', '.join(self._versions)}"
            )
        # No OpenAPI description: probe /ping, newest first.
        for version in self._versions:
            path = f"/slurm/{version}/ping"
            response = self._request(path)
            if response.status == 200:
                return version
            if response.status in (401, 403) or response.status >= 500:
                raise self._fail(path, response)
        raise snapshot.SlurmUnavailable(
            f"slurmrestd {self.url} answers none of the OpenAPI versions "
            f"{', '.join(self._versions)} (no /openapi description either)"
        )

    def _forget_version(self) -> None:
        self._api = None
        self._listings.clear()

    # -- polling --

    def poll(self, options: snapshot.PollOptions) -> snapshot.SlurmSnapshot:
        try:
            return self._poll(options)
        except _VersionGone:
            self._forget_version()
        try:
            return self._poll(options)
        except _VersionGone as exc:
            self._forget_version()
            raise snapshot.SlurmUnavailable(
                f"slurmrestd {self.url}: GET {exc} -> HTTP 404 right after version negotiation"
            ) from None

    def _ping(
        self, version: str
    ) -> tuple[snapshot.ProbeResult, tuple[snapshot.Controller, ...], int]:
        """The ping probe, every controller it lists, and entries that could not be read."""
        path = f"/slurm/{version}/ping"
        response = self._request(path)
        if response.status == 404:
            raise _VersionGone(path)
        if response.status != 200:
            # slurmrestd answers 500 after ~9 s when slurmctld does not answer: the
            # other endpoints would do the same, so give up on this poll at once.
            raise self._fail(path, response)
        try:
            document = self._decode(path, response)
        except snapshot.SlurmUnavailable as exc:
            return snapshot.ProbeResult("ping", False, response.seconds, str(exc)), (), 0
        success, error = rest_json.map_ping(document)
        controllers, errors = rest_json.map_controllers(document)
        return snapshot.ProbeResult("ping", success, response.seconds, error), controllers, errors

    def _listing(self, version: str, endpoint: str) -> tuple[_Listing, bool]:
        """The records of ``/slurm/{version}/{endpoint}``, from a 304 when unchanged.

        Returns the cache entry and whether it was refreshed by a full answer.
        """
        path = f"/slurm/{version}/{endpoint}"
        cached = self._listings.get(endpoint)
        query = None
        if cached is not None:
            query = {"update_time": str(self._update_time(cached.since))}
        started = time.time()
        response = self._request(path, query)
        if response.status >= 500 and query is not None:
            # slurmrestd 22.05 (v0.0.38) answers /nodes?update_time=T with HTTP 500
            # ("Unspecified error", errno -1) when the nodes changed since T but the
            # partitions did not: it loads both with T and takes "no change" for an
            # error. The same request without update_time works.
            self.stats["retries"] += 1
            started = time.time()
            response = self._request(path)
        if response.status == 304 and cached is not None:
            self.stats["not_modified"] += 1
            return cached, False
        if response.status == 404:
            raise _VersionGone(path)
        if response.status != 200:
            raise self._fail(path, response)
        document = self._decode(path, response)
        records = document.get(endpoint)
        if not isinstance(records, list):
            errors = rest_json.errors_text(document)
            raise snapshot.SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} has no {endpoint!r} list"
                + (f": {errors}" if errors else f": {_snippet(response.body)}")
            )
        self.stats["full"] += 1
        listing = _Listing(since=started, records=records)
        self._listings[endpoint] = listing
        return listing, True

    def _poll(self, options: snapshot.PollOptions) -> snapshot.SlurmSnapshot:
        if self._api is None:
            self._api = self._negotiate()
        version = self._api
        errors = 0

        probes: tuple[snapshot.ProbeResult, ...] = ()
        controllers: tuple[snapshot.Controller, ...] = ()
        if options.probe:
            probe, controllers, ping_errors = self._ping(version)
            probes = (probe,)
            errors += ping_errors

        diag_path = f"/slurm/{version}/diag"
        diag_document, _ = self._get_json(diag_path)
        diag_received = time.time()
        statistics = diag_document.get("statistics")
        scheduler: snapshot.SchedulerStats | None = None
        if isinstance(statistics, Mapping):
            try:
                scheduler = rest_json.map_diag(statistics)
            except (KeyError, TypeError, ValueError, AttributeError):
                errors += 1
            self._update_clock_offset(statistics.get("req_time"), diag_received)
        else:
            problems = rest_json.errors_text(diag_document)
            raise snapshot.SlurmUnavailable(
                f"slurmrestd {self.url}: GET {diag_path} has no statistics"
                + (f": {problems}" if problems else "")
            )

        jobs, _ = self._listing(version, "jobs")
        job_groups, running, job_errors = self._mapped_jobs(jobs, options)
        nodes_listing, _ = self._listing(version, "nodes")
        nodes, node_errors = self._mapped(nodes_listing, rest_json.map_node)
        partitions_listing, _ = self._listing(version, "partitions")
        partitions, partition_errors = self._mapped(partitions_listing, rest_json.map_partition)
        reservations, reservation_errors = self._reservations(version)
        shares, share_errors = self._shares(version) if options.fairshare else (None, 0)

        return snapshot.SlurmSnapshot(
            up=True,
            job_groups=job_groups,
            running_jobs=running,
            nodes=nodes,
            partitions=partitions,
            scheduler=scheduler,
            probes=probes,
            errors=errors
            + job_errors
            + node_errors
            + partition_errors
            + reservation_errors
            + share_errors,
            backend=self.name,
            version=rest_json.release(diag_document),
            reservations=reservations,
            controllers=controllers,
            shares=shares,
        )

    def _shares(self, version: str) -> tuple[tuple[snapshot.Share, ...] | None, int]:
        """``/shares`` (OpenAPI v0.0.40+, Slurm 23.11+); None before (no such endpoint:
        not an error). A failure costs one error and the fair-share series."""
        if _version_key(version) < rest_json.SHARES_SINCE:
            return None, 0
        path = f"/slurm/{version}/shares"
        try:
            document, _ = self._get_json(path)
            return rest_json.map_shares(document)
        except (snapshot.SlurmUnavailable, _VersionGone, *rest_json.RECORD_ERRORS):
            return None, 1

    def _reservations(self, version: str) -> tuple[tuple[snapshot.Reservation, ...] | None, int]:
        """``/reservations``, read whole each poll (their state follows the clock).

        A failure here costs one error and the reservation series, not the poll.
        """
        path = f"/slurm/{version}/reservations"
        try:
            document, _ = self._get_json(path)
        except (snapshot.SlurmUnavailable, _VersionGone):
            return None, 1
        records = document.get("reservations")
        if not isinstance(records, list):
            return None, 1
        now = time.time() + (self._clock_offset or 0.0)
        return snapshot.map_each(
            records, lambda record: rest_json.map_reservation(record, now), rest_json.RECORD_ERRORS
        )

    def _update_time(self, since: float) -> int:
        """``update_time`` for a listing last fetched at local time ``since``.

        slurmctld answers 304 when ``update_time - 1 >= last_update`` (its clock, whole
        seconds). Sending a time at or before the controller's clock at ``since`` is
        safe: a change after ``since`` always produces a full answer. The controller's
        clock is estimated from /diag's ``req_time``; the estimate is never ahead of
        it (whole seconds, taken before our response arrived). Without one, one second
        of slack covers sub-second skew.
        """
        if self._clock_offset is None:
            return max(math.floor(since) - 1, 0)
        return max(math.floor(since + self._clock_offset), 0)

    def _update_clock_offset(self, server_time: Any, local_time: float) -> None:
        remote = json_number(server_time)
        if remote is None or remote <= 0:
            self._clock_offset = None
            return
        self._clock_offset = remote - local_time

    def _mapped_jobs(
        self, listing: _Listing, options: snapshot.PollOptions
    ) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
        key = ("jobs", options.per_user, options.job_info)
        if listing.mapped_key == key:
            return listing.mapped  # type: ignore[no-any-return]
        jobs, errors = snapshot.map_each(
            listing.records,
            lambda record: rest_json.map_job(record, options),
            rest_json.RECORD_ERRORS,
        )
        tally = snapshot.JobTally(options)
        for job in jobs:
            tally.add(job)
        result = (tally.groups(), tuple(tally.running), errors)
        listing.mapped_key = key
        listing.mapped = result
        return result

    @staticmethod
    def _mapped(
        listing: _Listing, mapper: Callable[[Mapping[str, Any]], _T]
    ) -> tuple[tuple[_T, ...], int]:
        if listing.mapped_key == "records":
            return listing.mapped  # type: ignore[no-any-return]
        items, errors = snapshot.map_each(listing.records, mapper, rest_json.RECORD_ERRORS)
        listing.mapped_key = "records"
        listing.mapped = (items, errors)
        return items, errors


def _version_key(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.lstrip("v").split("."))
    except ValueError:
        return (-1,)
