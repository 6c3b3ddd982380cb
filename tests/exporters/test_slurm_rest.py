"""The slurmrestd backend: mappers on real v0.0.38 JSON, newer shapes, HTTP behaviour
against an in-test server, and the real slurmrestd of the session's Slurm sandbox."""

from __future__ import annotations

import base64
import copy
import json
import re
import socket
import socketserver
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import pytest

from gotthard.exporters.families import render_text
from gotthard.exporters.slurm.render import render
from gotthard.sandbox import Sandbox
from gotthard.slurm.rest import SUPPORTED_VERSIONS, RestBackend, jwt_user, parse_url
from gotthard.slurm.rest_json import (
    map_diag,
    map_job,
    map_node,
    map_partition,
    map_ping,
    map_reservation,
)
from gotthard.slurm.snapshot import (
    JobGroup,
    JobRecord,
    JobTally,
    Node,
    Partition,
    PollOptions,
    Reservation,
    RpcStat,
    RunningJob,
    SlurmSnapshot,
    SlurmUnavailable,
)
from gotthard.slurm.values import count_array_tasks, gpus_from_tres

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm-22.05"
LISTINGS = ("jobs", "nodes", "partitions")
MIB = 1024 * 1024
JsonDict = dict[str, Any]


def load(endpoint: str) -> JsonDict:
    path = FIXTURES / f"slurmrestd-v0.0.38-{endpoint}.json"
    document: JsonDict = json.loads(path.read_text())
    return document


def v38_documents() -> dict[str, JsonDict]:
    return {name: load(name) for name in ("ping", "diag", "reservations", *LISTINGS)}


def wrapped(number: int) -> JsonDict:
    return {"set": True, "infinite": False, "number": number}


UNSET = {"set": False, "infinite": False, "number": 0}
META_V40 = {
    "plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld"},
    "slurm": {"version": {"major": "23", "micro": "5", "minor": "11"}, "release": "23.11.5"},
}


def v40_job(job_id: int, **fields: Any) -> JsonDict:
    record: JsonDict = {
        "job_id": job_id,
        "job_state": ["PENDING"],
        "partition": "gpu",
        "account": "ml",
        "user_name": "alice",
        "state_reason": "Priority",
        "cpus": wrapped(1),
        "node_count": wrapped(1),
        "tasks": wrapped(1),
        "array_job_id": wrapped(0),
        "array_task_id": UNSET,
        "array_task_string": "",
        "tres_per_job": "",
        "tres_per_node": "",
        "tres_per_task": "",
        "tres_per_socket": "",
        "gres_detail": [],
        "tres_alloc_str": "",
    }
    record.update(fields)
    return record


def v40_running(job_id: int, **fields: Any) -> JsonDict:
    """A running job record (no pending reason) in the v0.0.40+ style."""
    return v40_job(job_id, **{"job_state": ["RUNNING"], "state_reason": "None", **fields})


def v40_documents() -> dict[str, JsonDict]:
    """Hand-written responses in the v0.0.40+ style (wrapped numbers, list states)."""
    jobs = [
        v40_running(
            10,
            cpus=wrapped(8),
            node_count=wrapped(2),
            tasks=wrapped(2),
            tres_per_node="gres/gpu:4",
            gres_detail=["gpu:4(IDX:0-3)", "gpu:4(IDX:0-3)"],
        ),
        v40_running(
            21,
            array_job_id=wrapped(20),
            array_task_id=wrapped(3),
            tres_per_task="gres/gpu:1",
        ),
        v40_job(20, array_job_id=wrapped(20), array_task_string="0-2,4-9:2%2"),
        v40_running(30, job_state=["RUNNING", "COMPLETING"], partition="cpu"),
        v40_job(31, partition="cpu", state_reason="ReqNodeNotAvail, UnavailableNodes:n[1-3]"),
        v40_running(
            32,
            cpus=wrapped(2),
            gres_detail=["gpu:a100:2(IDX:0-1)"],
        ),
    ]
    nodes = [
        {
            "name": "n1",
            "state": ["IDLE", "DRAIN"],
            "cpus": 64,
            "alloc_cpus": 0,
            "idle_cpus": 64,
            "real_memory": 512000,
            "alloc_memory": 0,
            "free_mem": wrapped(500000),
            "gres": "gpu:a100:4(S:0-1)",
            "gres_used": "gpu:a100:0(IDX:N/A)",
            "partitions": ["gpu"],
            "reason": "bad gpu",
        },
        {
            "name": "n2",
            "state": ["MIXED"],
            "cpus": 64,
            "alloc_cpus": 16,
            "idle_cpus": 48,
            "real_memory": 512000,
            "alloc_memory": 65536,
            "gres": "gpu:a100:4(S:0-1)",
            "gres_used": "gpu:a100:2(IDX:0-1)",
            "partitions": ["gpu", "cpu"],
            "reason": "",
        },
        {
            "name": "n3",
            "state": ["DOWN", "NOT_RESPONDING"],
            "cpus": 32,
            "alloc_cpus": 0,
            "idle_cpus": 32,
            "real_memory": 128000,
            "alloc_memory": 0,
            "gres": "",
            "gres_used": "",
            "partitions": ["cpu"],
            "reason": "Not responding",
        },
    ]
    partitions = [
        {"name": "gpu", "partition": {"state": ["UP"]}, "nodes": {"configured": "n[1-2]"}},
        {"name": "cpu", "partition": {"state": ["DRAIN"]}, "cpus": {"total": 96}},
    ]
    statistics = {
        "server_thread_count": 5,
        "agent_queue_size": 1,
        "dbd_agent_queue_size": 2,
        "schedule_cycle_last": 1500,
        "schedule_cycle_max": 3000000,
        "schedule_cycle_mean": 2000,
        "schedule_cycle_total": 100,
        "schedule_queue_length": 7,
        "bf_cycle_counter": 10,
        "bf_cycle_last": 250000,
        "bf_cycle_mean": 125000,
        "bf_depth_mean": 3,
        "bf_queue_len": 4,
        "bf_backfilled_jobs": 12,
        "req_time": wrapped(int(time.time())),
        "bf_when_last_cycle": wrapped(1700000000),
        "rpcs_by_message_type": [
            {
                "type_id": 2003,
                "message_type": "REQUEST_JOB_INFO",
                "count": 5,
                "queued": 0,
                "dropped": 0,
                "cycle_last": 0,
                "cycle_max": 0,
                "total_time": 1500000,
                "average_time": wrapped(300000),
            }
        ],
        "rpcs_by_user": [
            {
                "user_id": 1000,
                "user": "alice",
                "count": 3,
                "total_time": 900,
                "average_time": wrapped(300),
            }
        ],
    }
    ping = {
        "pings": [
            {
                "hostname": "ctl",
                "pinged": "UP",
                "latency": 123,
                "mode": "primary",
                "primary": True,
                "responding": True,
            }
        ]
    }
    docs: dict[str, JsonDict] = {
        "jobs": {"jobs": jobs},
        "nodes": {"nodes": nodes},
        "partitions": {"partitions": partitions},
        "diag": {"statistics": statistics},
        "ping": ping,
        "reservations": {"reservations": []},
    }
    for document in docs.values():
        document["meta"] = copy.deepcopy(META_V40)
        document["errors"] = []
        document["warnings"] = []
    return docs


def tally(jobs: list[JobRecord], options: PollOptions | None = None) -> JobTally:
    """Feed mapped jobs to a JobTally the way RestBackend does."""
    result = JobTally(options or PollOptions())
    for job in jobs:
        result.add(job)
    return result


# The 22.05 workload of tests/fixtures/slurm-22.05/README.txt, as job groups.
FIXTURE_GROUPS = (
    JobGroup("pending", "debug", "", "JobHeldUser", "", 1, 1, 0),
    JobGroup("pending", "debug", "", "Resources", "", 4, 4, 0),
    JobGroup("pending", "gpu", "", "Dependency", "", 1, 1, 1),
    JobGroup("pending", "gpu", "", "Resources", "", 1, 2, 2),
    JobGroup("running", "debug", "", "", "", 1, 1, 0),
    JobGroup("running", "gpu", "", "", "", 1, 1, 1),
)
FIXTURE_RUNNING = (
    RunningJob("1", "root", "", "gpu"),
    RunningJob("2", "root", "", "debug"),
)


def node_of(
    name: str,
    state: str,
    partitions: tuple[str, ...],
    *,
    cpus: tuple[int, int, int, int],
    memory_mib: tuple[int, int],
    gpus: tuple[int, int],
    flags: tuple[str, ...] = (),
    reason: str = "",
    cpu_load: float | None = None,
) -> Node:
    """A Node from sinfo-like groups: CPUs (alloc, idle, other, total), memory in MiB
    (total, alloc) and GPUs (total, alloc)."""
    return Node(
        name,
        state,
        flags,
        partitions,
        *cpus,
        *(m * MIB for m in memory_mib),
        *gpus,
        reason,
        cpu_load,
    )


FIXTURE_NODE = node_of(
    "node001",
    "allocated",
    ("debug", "gpu"),
    cpus=(2, 0, 0, 2),
    memory_mib=(20000, 2000),
    gpus=(2, 1),
    cpu_load=0.16,  # slurmrestd's "cpu_load": 16, in hundredths
)
#: The recorded partitions, with the controller's totals (one node of 2 CPUs each).
FIXTURE_PARTITIONS = (
    Partition("debug", "up", True, total_cpus=2, total_nodes=1),
    Partition("gpu", "up", False, total_cpus=2, total_nodes=1),
)


# --- mappers on the real v0.0.38 fixture ------------------------------------------------------


def test_map_job_on_fixture_records() -> None:
    jobs = {job.job_id: job for job in map(map_job, load("jobs")["jobs"])}
    assert set(jobs) == {"1", "2", "3", "4_[0-3]", "5", "6"}
    assert jobs["1"] == JobRecord("1", "running", "gpu", "", "root", "None", 1, 1)
    assert jobs["2"] == JobRecord("2", "running", "debug", "", "root", "None", 1, 0)
    assert jobs["3"] == JobRecord("3", "pending", "gpu", "", "root", "Resources", 2, 2)
    # One meta record stands for the four pending array tasks.
    assert jobs["4_[0-3]"] == JobRecord(
        "4_[0-3]", "pending", "debug", "", "root", "Resources", 1, 0, count=4
    )
    assert jobs["5"].reason == "JobHeldUser"
    assert jobs["6"] == JobRecord("6", "pending", "gpu", "", "root", "Dependency", 1, 1)


def test_fixture_jobs_aggregate_to_the_documented_workload() -> None:
    result = tally([map_job(record) for record in load("jobs")["jobs"]])
    assert result.groups() == FIXTURE_GROUPS
    assert tuple(result.running) == FIXTURE_RUNNING
    # Nine jobs in all, as sdiag's "Jobs submitted: 9" counts them.
    assert sum(group.count for group in result.groups()) == 9


def test_fixture_jobs_per_user() -> None:
    result = tally([map_job(r) for r in load("jobs")["jobs"]], PollOptions(per_user=True))
    assert {group.user for group in result.groups()} == {"root"}
    assert len(result.groups()) == len(FIXTURE_GROUPS)


def test_running_job_gpus_fall_back_to_gres_detail() -> None:
    """22.05 without AccountingStorageTRES: the allocation is only in gres_detail."""
    record = copy.deepcopy(load("jobs")["jobs"][0])
    assert "gpu" not in record["tres_alloc_str"]
    record["tres_per_node"] = ""
    assert map_job(record).gpus == 1
    record["gres_detail"] = []
    assert map_job(record).gpus == 0
    record["tres_alloc_str"] = "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=3"
    assert map_job(record).gpus == 3


def test_map_node_on_fixture() -> None:
    (record,) = load("nodes")["nodes"]
    assert map_node(record) == FIXTURE_NODE


def test_map_partition_on_fixture() -> None:
    partitions = tuple(map_partition(record) for record in load("partitions")["partitions"])
    assert partitions == FIXTURE_PARTITIONS


def test_map_diag_on_fixture() -> None:
    stats = map_diag(load("diag")["statistics"])
    assert stats.server_threads == 3
    assert stats.agent_queue_size == 0
    assert stats.dbd_agent_queue_size == 0
    assert stats.queue_length == 4
    assert stats.cycles_total == 2
    assert stats.cycle_last_seconds == pytest.approx(0.001758)
    assert stats.cycle_max_seconds == pytest.approx(0.001758)
    assert stats.cycle_mean_seconds == pytest.approx(0.000891)
    assert stats.backfill_cycles_total == 1
    assert stats.backfill_cycle_last_seconds == pytest.approx(0.000510)
    assert stats.backfill_cycle_mean_seconds == pytest.approx(0.000510)
    assert stats.backfill_depth_mean == 2.0
    assert stats.backfill_queue_length == 2
    assert stats.backfilled_jobs_total == 0
    assert len(stats.rpc_by_type) == 8
    assert stats.rpc_by_type["REQUEST_JOB_INFO"].count == 6
    assert stats.rpc_by_type["REQUEST_JOB_INFO"].total_seconds == pytest.approx(0.001839)
    assert stats.rpc_by_type["REQUEST_SUBMIT_BATCH_JOB"] == RpcStat(6, pytest.approx(0.004417))
    assert stats.rpc_by_user == {"root": RpcStat(43, pytest.approx(0.013954))}


def test_map_ping_on_fixture() -> None:
    assert map_ping(load("ping")) == (True, "")
    down = copy.deepcopy(load("ping"))
    down["pings"][0]["ping"] = "DOWN"
    success, error = map_ping(down)
    assert not success
    assert "node001" in error
    assert map_ping({"pings": [], "errors": [{"error": "boom"}]}) == (False, "boom")


# --- tolerance for the v0.0.39+ shapes ------------------------------------------------------------


def test_map_job_newer_shapes() -> None:
    jobs = {job.job_id: job for job in map(map_job, v40_documents()["jobs"]["jobs"])}
    # --gres=gpu:4 on 2 nodes; 8 CPUs from {"set": true, "number": 8}.
    assert jobs["10"] == JobRecord("10", "running", "gpu", "ml", "alice", "None", 8, 8)
    # A running array task is named <array_job_id>_<task>; --gpus-per-task x 1 task.
    assert jobs["20_3"] == JobRecord("20_3", "running", "gpu", "ml", "alice", "None", 1, 1)
    # 0,1,2,4,6,8: six pending tasks behind one record.
    assert jobs["20_[0-2,4-9:2%2]"].count == 6
    assert jobs["30"].state == "completing"
    assert jobs["31"].reason.startswith("ReqNodeNotAvail")
    # Typed gres_detail of a running job without tres fields.
    assert jobs["32"].gpus == 2
    groups = tally(list(jobs.values())).groups()
    assert JobGroup("pending", "cpu", "ml", "ReqNodeNotAvail", "", 1, 1, 0) in groups
    assert JobGroup("pending", "gpu", "ml", "Priority", "", 6, 6, 0) in groups
    assert JobGroup("completing", "cpu", "ml", "", "", 1, 1, 0) in groups


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ("RUNNING", "running"),
        (["PENDING"], "pending"),
        (["PENDING", "REQUEUED"], "requeued"),
        (["RUNNING", "CONFIGURING"], "configuring"),
        (["COMPLETED"], "completed"),
        (["SOMETHING_NEW"], "something_new"),
    ],
)
def test_job_state_flags_win_like_squeue(states: Any, expected: str) -> None:
    assert map_job(v40_job(1, job_state=states)).state == expected


def test_cpus_of_a_job_cancelled_before_it_ran() -> None:
    """22.05 writes cpus/tasks null for it; squeue's %C shows the request."""
    record = copy.deepcopy(load("jobs")["jobs"][2])
    record.update(job_state="CANCELLED", cpus=None, tasks=None)
    assert record["tres_req_str"] == "cpu=2,mem=4000M,node=1,billing=2"
    job = map_job(record)
    assert (job.state, job.cpus, job.gpus) == ("cancelled", 2, 2)
    record.update(tres_req_str="", minimum_cpus_per_node=3, node_count=2)
    assert map_job(record).cpus == 6


def test_map_job_rejects_unreadable_records() -> None:
    with pytest.raises(KeyError):
        map_job({"job_state": "RUNNING"})
    with pytest.raises(ValueError):
        map_job(v40_job(1, job_state=[]))
    with pytest.raises(ValueError):
        map_job({**v40_job(1), "job_id": "not-a-number"})


def test_map_node_newer_shapes() -> None:
    n1, n2, n3 = map(map_node, v40_documents()["nodes"]["nodes"])
    assert (n1.state, n1.flags, n1.effective_state) == ("idle", ("drain",), "drained")
    # A drained node's idle CPUs count as "other", like sinfo's CPUS(A/I/O/T).
    assert (n1.cpus_alloc, n1.cpus_idle, n1.cpus_other, n1.cpus_total) == (0, 0, 64, 64)
    assert (n1.gpus_total, n1.gpus_alloc, n1.reason) == (4, 0, "bad gpu")
    assert n2 == node_of(
        "n2", "mixed", ("gpu", "cpu"), cpus=(16, 48, 0, 64), memory_mib=(512000, 65536), gpus=(4, 2)
    )
    assert (n3.state, n3.flags, n3.cpus_other, n3.gpus_total) == (
        "down",
        ("not_responding",),
        32,
        0,
    )


def test_map_node_v38_flags() -> None:
    record = copy.deepcopy(load("nodes")["nodes"][0])
    record.update(state="mixed", state_flags=["DRAIN"], alloc_cpus=1, idle_cpus=1)
    node = map_node(record)
    assert (node.state, node.flags, node.effective_state) == ("mixed", ("drain",), "draining")
    assert (node.cpus_alloc, node.cpus_idle, node.cpus_other) == (1, 0, 1)


def test_map_partition_newer_shapes() -> None:
    gpu, cpu = map(map_partition, v40_documents()["partitions"]["partitions"])
    assert gpu == Partition("gpu", "up", False)
    assert cpu == Partition("cpu", "drain", False, total_cpus=96)


def test_map_diag_newer_shapes() -> None:
    stats = map_diag(v40_documents()["diag"]["statistics"])
    assert stats.server_threads == 5
    assert stats.cycle_max_seconds == pytest.approx(3.0)
    assert stats.backfill_cycle_last_seconds == pytest.approx(0.25)
    assert stats.backfilled_jobs_total == 12
    assert stats.rpc_by_type == {"REQUEST_JOB_INFO": RpcStat(5, pytest.approx(1.5))}
    assert stats.rpc_by_user == {"alice": RpcStat(3, pytest.approx(0.0009))}


def test_map_ping_newer_shapes() -> None:
    ping = v40_documents()["ping"]
    assert map_ping(ping) == (True, "")
    ping["pings"][0].update(pinged="DOWN", responding=False)
    assert map_ping(ping)[0] is False


@pytest.mark.parametrize(
    ("text", "count"),
    [("0-3", 4), ("5", 1), ("1,3,5-7", 5), ("0-15:4", 4), ("0-99%10", 100), ("0-3,7,...", 5)],
)
def test_count_array_tasks(text: str, count: int) -> None:
    assert count_array_tasks(text) == count


def test_jwt_user_reads_the_sun_claim() -> None:
    payload = base64.urlsafe_b64encode(b'{"exp":1,"iat":0,"sun":"alice"}').rstrip(b"=")
    assert jwt_user(f"eyJhbGciOiJIUzI1NiJ9.{payload.decode()}.c2ln") == "alice"
    assert jwt_user("not-a-jwt") is None
    assert jwt_user("a.!!!.c") is None


# --- URLs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "",
        "localhost:6820",
        "ftp://host:6820",
        "http://host",
        "http://:6820",
        "https://host:99999",
        "http://host:6820/?x=1",
        "unix:relative/slurmrestd.sock",
        "unix:",
        "unix://host/slurmrestd.sock",
        "unix:/run/",
    ],
)
def test_bad_url_is_a_value_error(url: str) -> None:
    with pytest.raises(ValueError, match="slurmrestd URL"):
        RestBackend(url)


def test_good_urls() -> None:
    assert RestBackend("http://127.0.0.1:6820").url == "http://127.0.0.1:6820"
    assert RestBackend("https://ctl.example:443/restd/").url == "https://ctl.example:443/restd"
    assert RestBackend("unix:/run/slurmrestd.sock").url == "unix:/run/slurmrestd.sock"
    assert parse_url("unix:///run/x.sock").socket_path == "/run/x.sock"
    assert parse_url("http://[::1]:6820").host == "::1"
    with pytest.raises(ValueError, match=r"v0\.0\.37"):
        RestBackend("http://h:1", versions=("v0.0.37",))


# --- an in-test slurmrestd ------------------------------------------------------------------------


class FakeRestd:
    """Serves documents per OpenAPI version and answers ``update_time`` like slurmctld:
    304 when ``update_time - 1 >= last change`` (whole seconds of its own clock)."""

    def __init__(
        self,
        docs: dict[str, dict[str, JsonDict]],
        *,
        openapi: bool = True,
        skew: float = 0.0,
    ) -> None:
        self.docs = docs
        self.openapi = openapi
        self.skew = skew
        self.changed = {endpoint: int(self.now()) - 100 for endpoint in LISTINGS}
        self.overrides: dict[str, tuple[int, bytes]] = {}
        #: Listings that answer update_time with 500 when they changed (slurmrestd 22.05's
        #: /nodes does so when the nodes changed but the partitions did not).
        self.buggy_update_time: set[str] = set()
        self.requests: list[tuple[str, JsonDict, dict[str, str]]] = []
        self.lock = threading.Lock()

    def now(self) -> float:
        return time.time() + self.skew

    def touch(self, version: str, endpoint: str, document: JsonDict) -> None:
        with self.lock:
            self.docs[version][endpoint] = document
            self.changed[endpoint] = int(self.now())

    def paths(self) -> list[str]:
        return [urllib.parse.urlsplit(path).path for path, _, _ in self.requests]

    def answer(self, target: str, headers: dict[str, str]) -> tuple[int, bytes]:
        parts = urllib.parse.urlsplit(target)
        query = dict(urllib.parse.parse_qsl(parts.query))
        with self.lock:
            self.requests.append((target, query, headers))
            if parts.path in self.overrides:
                return self.overrides[parts.path]
            if parts.path in ("/openapi/v3", "/openapi") and self.openapi:
                paths = {"/openapi/v3": {}, "/openapi": {}}
                for version, endpoints in self.docs.items():
                    paths.update({f"/slurm/{version}/{name}": {} for name in endpoints})
                return 200, json.dumps({"openapi": "3.0.3", "paths": paths}).encode()
            match = re.fullmatch(r"/slurm/(v[\d.]+)/(\w+)", parts.path)
            if not match or match.group(2) not in self.docs.get(match.group(1), {}):
                return 404, b"Unable find requested URL. Please view /openapi/v3 for API reference."
            version, endpoint = match.groups()
            if endpoint in LISTINGS and "update_time" in query:
                if int(query["update_time"]) - 1 >= self.changed[endpoint]:
                    return 304, b""
                if endpoint in self.buggy_update_time:
                    body = {"errors": [{"error": "Unspecified error", "errno": -1}], endpoint: []}
                    return 500, json.dumps(body).encode()
            document = copy.deepcopy(self.docs[version][endpoint])
            if endpoint == "diag":
                statistics = document["statistics"]
                now = int(self.now())
                if isinstance(statistics.get("req_time"), dict):
                    statistics["req_time"] = wrapped(now)
                else:
                    statistics["req_time"] = now
            return 200, json.dumps(document).encode()


def handler_for(fake: FakeRestd) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = fake.answer(self.path, {k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            if status != 304:
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if status != 304:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """``serve(fake, unix_path=None) -> url``: run a FakeRestd until the test ends."""
    servers: list[socketserver.BaseServer] = []

    def start(fake: FakeRestd, unix_path: Path | None = None) -> str:
        server: socketserver.BaseServer
        if unix_path is None:
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(fake))
            url = f"http://127.0.0.1:{server.server_address[1]}"
        else:
            server = UnixHTTPServer(str(unix_path), handler_for(fake))
            url = f"unix:{unix_path}"
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return url

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def expected_v38_snapshot(probe_ok: bool = True) -> dict[str, Any]:
    return {
        "up": True,
        "backend": "rest",
        "version": "22.05.8",
        "job_groups": FIXTURE_GROUPS,
        "running_jobs": FIXTURE_RUNNING,
        "nodes": (FIXTURE_NODE,),
        "partitions": FIXTURE_PARTITIONS,
        "errors": 0,
        "probes": [("ping", probe_ok)],
    }


def summary(snapshot: SlurmSnapshot) -> dict[str, Any]:
    return {
        "up": snapshot.up,
        "backend": snapshot.backend,
        "version": snapshot.version,
        "job_groups": snapshot.job_groups,
        "running_jobs": snapshot.running_jobs,
        "nodes": snapshot.nodes,
        "partitions": snapshot.partitions,
        "errors": snapshot.errors,
        "probes": [(probe.op, probe.success) for probe in snapshot.probes],
    }


def test_poll_maps_the_fixture_and_second_poll_is_served_by_304(
    serve: Callable[..., str],
) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    backend = RestBackend(serve(fake), token="tok-123", user="alice")
    first = backend.poll(PollOptions())
    assert summary(first) == expected_v38_snapshot()
    assert first.scheduler is not None and first.scheduler.server_threads == 3
    assert first.probes[0].duration_seconds > 0
    assert backend.api_version == "v0.0.38"
    assert backend.stats["not_modified"] == 0
    assert backend.stats["full"] == 3
    # Every request carried the JWT headers.
    assert all(h.get("x-slurm-user-token") == "tok-123" for _, _, h in fake.requests)
    assert all(h.get("x-slurm-user-name") == "alice" for _, _, h in fake.requests)

    fake.requests.clear()
    second = backend.poll(PollOptions())
    assert backend.stats["not_modified"] == 3
    assert backend.stats["full"] == 3
    assert summary(second) == summary(first)
    sent = {urllib.parse.urlsplit(t).path: q for t, q, _ in fake.requests}
    for endpoint in LISTINGS:
        assert int(sent[f"/slurm/v0.0.38/{endpoint}"]["update_time"]) > fake.changed[endpoint]
    assert "update_time" not in sent["/slurm/v0.0.38/diag"]
    # Negotiation happened once.
    assert backend.stats["negotiations"] == 1
    assert "/openapi/v3" not in sent


def test_a_change_after_the_last_poll_is_fetched_again(serve: Callable[..., str]) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    backend = RestBackend(serve(fake))
    backend.poll(PollOptions())
    jobs = load("jobs")
    jobs["jobs"] = [job for job in jobs["jobs"] if job["job_id"] != 5]
    fake.touch("v0.0.38", "jobs", jobs)
    snapshot = backend.poll(PollOptions())
    assert backend.stats["not_modified"] == 2  # nodes and partitions
    assert JobGroup("pending", "debug", "", "JobHeldUser", "", 1, 1, 0) not in snapshot.job_groups
    assert len(snapshot.job_groups) == len(FIXTURE_GROUPS) - 1


def test_nodes_500_on_update_time_is_retried_in_full(serve: Callable[..., str]) -> None:
    """slurmrestd 22.05: /nodes?update_time=T -> HTTP 500 when only the nodes changed."""
    fake = FakeRestd({"v0.0.38": v38_documents()})
    fake.buggy_update_time.add("nodes")
    backend = RestBackend(serve(fake))
    backend.poll(PollOptions())
    assert backend.poll(PollOptions()).nodes == (FIXTURE_NODE,)
    assert (backend.stats["not_modified"], backend.stats["retries"]) == (3, 0)
    nodes = load("nodes")
    nodes["nodes"][0].update(state="idle", alloc_cpus=0, idle_cpus=2)
    fake.touch("v0.0.38", "nodes", nodes)
    (node,) = backend.poll(PollOptions()).nodes
    assert (node.state, node.cpus_idle) == ("idle", 2)
    assert (backend.stats["not_modified"], backend.stats["retries"]) == (5, 1)
    # A 500 that persists without update_time is still an error.
    fake.overrides["/slurm/v0.0.38/nodes"] = (500, b"down")
    fake.touch("v0.0.38", "nodes", nodes)
    with pytest.raises(SlurmUnavailable, match="HTTP 500"):
        backend.poll(PollOptions())


def test_options_change_is_remapped_from_the_304_cache(serve: Callable[..., str]) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    backend = RestBackend(serve(fake))
    backend.poll(PollOptions())
    snapshot = backend.poll(PollOptions(per_user=True, job_info=False, probe=False))
    assert backend.stats["not_modified"] == 3
    assert {group.user for group in snapshot.job_groups} == {"root"}
    assert snapshot.running_jobs == ()
    assert snapshot.probes == ()
    assert fake.paths().count("/slurm/v0.0.38/ping") == 1


def test_poll_over_a_unix_socket(serve: Callable[..., str], tmp_path: Path) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    backend = RestBackend(serve(fake, tmp_path / "restd.sock"))
    assert summary(backend.poll(PollOptions())) == expected_v38_snapshot()
    backend.poll(PollOptions())
    assert backend.stats["not_modified"] == 3


@pytest.mark.parametrize("skew", [1000.0, -1000.0])
def test_controller_clock_skew(serve: Callable[..., str], skew: float) -> None:
    """update_time is in the controller's clock: 304s still happen when it is ahead, and a
    change is still seen when it is behind."""
    fake = FakeRestd({"v0.0.38": v38_documents()}, skew=skew)
    backend = RestBackend(serve(fake))
    backend.poll(PollOptions())
    backend.poll(PollOptions())
    assert backend.stats["not_modified"] == 3
    jobs = load("jobs")
    jobs["jobs"] = jobs["jobs"][:2]
    fake.touch("v0.0.38", "jobs", jobs)
    snapshot = backend.poll(PollOptions())
    assert {group.state for group in snapshot.job_groups} == {"running"}


def test_negotiates_the_newest_supported_version(serve: Callable[..., str]) -> None:
    fake = FakeRestd(
        {
            "v0.0.36": {"ping": {}},
            "v0.0.38": v38_documents(),
            "v0.0.40": v40_documents(),
            "v0.0.99": {"ping": {}},
        }
    )
    backend = RestBackend(serve(fake))
    snapshot = backend.poll(PollOptions())
    assert backend.api_version == "v0.0.40"
    assert snapshot.version == "23.11.5"
    assert snapshot.errors == 0
    assert [node.name for node in snapshot.nodes] == ["n1", "n2", "n3"]
    assert snapshot.partitions == (Partition("gpu", "up"), Partition("cpu", "drain", total_cpus=96))
    assert {job.job_id for job in snapshot.running_jobs} == {"10", "20_3", "32"}
    assert snapshot.probes[0].success
    assert snapshot.scheduler is not None and snapshot.scheduler.queue_length == 7
    backend.poll(PollOptions())
    assert backend.stats["not_modified"] == 3

    pinned = RestBackend(serve(fake), versions=("v0.0.38",))
    assert pinned.poll(PollOptions()).version == "22.05.8"
    assert pinned.api_version == "v0.0.38"


def test_without_openapi_it_probes_ping_newest_first(serve: Callable[..., str]) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()}, openapi=False)
    backend = RestBackend(serve(fake))
    assert backend.poll(PollOptions()).version == "22.05.8"
    assert backend.api_version == "v0.0.38"
    probed = [p for p in fake.paths() if p.endswith("/ping")]
    expected = [f"/slurm/{version}/ping" for version in SUPPORTED_VERSIONS]
    assert probed[: len(expected)] == expected


def test_no_supported_version_is_unavailable_with_the_offered_list(
    serve: Callable[..., str],
) -> None:
    fake = FakeRestd({"v0.0.36": {"ping": {}}, "v0.0.37": {"ping": {}}})
    backend = RestBackend(serve(fake))
    with pytest.raises(SlurmUnavailable, match=r"v0\.0\.37, v0\.0\.36.*v0\.0\.38"):
        backend.poll(PollOptions())
    fake.openapi = False
    with pytest.raises(SlurmUnavailable, match="answers none"):
        backend.poll(PollOptions())


def test_renegotiates_after_a_404(serve: Callable[..., str]) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    backend = RestBackend(serve(fake))
    assert backend.poll(PollOptions()).version == "22.05.8"
    # slurmrestd upgraded: v0.0.38 is gone, v0.0.40 is new.
    fake.docs = {"v0.0.40": v40_documents()}
    snapshot = backend.poll(PollOptions())
    assert snapshot.version == "23.11.5"
    assert backend.api_version == "v0.0.40"
    assert backend.stats["negotiations"] == 2
    # The old version's cached listings were dropped, not sent as update_time.
    assert backend.stats["not_modified"] == 0


def test_auth_failure_names_status_and_body(serve: Callable[..., str]) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    fake.overrides["/slurm/v0.0.38/diag"] = (401, b"Authentication failure")
    backend = RestBackend(serve(fake), token="bad")
    with pytest.raises(SlurmUnavailable, match=r"HTTP 401 authentication.*Authentication failure"):
        backend.poll(PollOptions(probe=False))


def test_server_error_body_is_cut_at_200_chars(serve: Callable[..., str]) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    fake.overrides["/slurm/v0.0.38/jobs"] = (500, b"x" * 150 + b"y" * 300)
    backend = RestBackend(serve(fake))
    with pytest.raises(SlurmUnavailable, match="HTTP 500") as info:
        backend.poll(PollOptions())
    assert "x" * 150 + "y" * 50 in str(info.value)
    assert "y" * 51 not in str(info.value)


def test_controller_down_fails_fast_on_ping_with_the_slurm_error(
    serve: Callable[..., str],
) -> None:
    """What the real slurmrestd 22.05 answers when slurmctld is down (HTTP 500 + errors)."""
    fake = FakeRestd({"v0.0.38": v38_documents()})
    body = {
        "meta": load("ping")["meta"],
        "errors": [
            {
                "description": "slurmctld config is unable to load",
                "error_number": -1,
                "error": "Unspecified error",
                "source": "slurm_load_ctl_conf",
            }
        ],
    }
    fake.overrides["/slurm/v0.0.38/ping"] = (500, json.dumps(body).encode())
    backend = RestBackend(serve(fake))
    with pytest.raises(SlurmUnavailable, match="slurmctld config is unable to load"):
        backend.poll(PollOptions())
    assert "/slurm/v0.0.38/diag" not in fake.paths()


def test_ping_saying_down_is_a_failed_probe_not_a_failed_poll(
    serve: Callable[..., str],
) -> None:
    docs = v38_documents()
    docs["ping"]["pings"][0]["ping"] = "DOWN"
    backend = RestBackend(serve(FakeRestd({"v0.0.38": docs})))
    snapshot = backend.poll(PollOptions())
    assert snapshot.up
    assert not snapshot.probes[0].success
    assert "node001: DOWN" in snapshot.probes[0].error


def test_primary_down_backup_up_gives_one_series_per_controller(
    serve: Callable[..., str],
) -> None:
    docs = v38_documents()
    primary = docs["ping"]["pings"][0]
    primary["ping"] = "DOWN"
    docs["ping"]["pings"].append({**primary, "hostname": "ctl2", "ping": "UP", "mode": "backup"})
    snapshot = RestBackend(serve(FakeRestd({"v0.0.38": docs}))).poll(PollOptions())
    assert snapshot.probes[0].success and snapshot.errors == 0
    assert [(c.hostname, c.role, c.index, c.up) for c in snapshot.controllers] == [
        ("node001", "primary", 0, False),
        ("ctl2", "backup", 1, True),
    ]
    text = render_text(render(snapshot, PollOptions()))
    assert 'gotthard_slurm_controller_up{controller="node001",role="primary",index="0"} 0' in text
    assert 'gotthard_slurm_controller_up{controller="ctl2",role="backup",index="1"} 1' in text
    # without the probe there is no ping, hence no controller series
    quiet = RestBackend(serve(FakeRestd({"v0.0.38": docs}))).poll(PollOptions(probe=False))
    assert quiet.controllers == ()


def test_malformed_json_is_unavailable(serve: Callable[..., str]) -> None:
    fake = FakeRestd({"v0.0.38": v38_documents()})
    fake.overrides["/slurm/v0.0.38/nodes"] = (200, b'{"nodes": [')
    with pytest.raises(SlurmUnavailable, match="malformed JSON"):
        RestBackend(serve(fake)).poll(PollOptions())
    fake.overrides["/slurm/v0.0.38/nodes"] = (200, b"[]")
    with pytest.raises(SlurmUnavailable, match="not an object"):
        RestBackend(serve(fake)).poll(PollOptions())
    fake.overrides["/slurm/v0.0.38/nodes"] = (200, b'{"errors": [{"error": "no nodes"}]}')
    with pytest.raises(SlurmUnavailable, match="no 'nodes' list: no nodes"):
        RestBackend(serve(fake)).poll(PollOptions())


def test_unreadable_records_are_counted_and_skipped(serve: Callable[..., str]) -> None:
    docs = v38_documents()
    docs["jobs"]["jobs"] += [{"job_state": "RUNNING"}, "garbage"]
    docs["nodes"]["nodes"].append({"state": "idle"})
    docs["partitions"]["partitions"].append(None)
    backend = RestBackend(serve(FakeRestd({"v0.0.38": docs})))
    snapshot = backend.poll(PollOptions())
    assert snapshot.errors == 4
    assert snapshot.job_groups == FIXTURE_GROUPS
    assert snapshot.nodes == (FIXTURE_NODE,)
    assert snapshot.partitions == FIXTURE_PARTITIONS
    # The count survives a 304.
    assert backend.poll(PollOptions()).errors == 4
    assert backend.stats["not_modified"] == 3


def test_connection_refused_is_unavailable_quickly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = RestBackend(f"http://127.0.0.1:{port}", timeout=30.0)
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="ConnectionRefusedError"):
        backend.poll(PollOptions())
    assert time.monotonic() - started < 10, "waited for the timeout"


def test_missing_unix_socket_is_unavailable(tmp_path: Path) -> None:
    backend = RestBackend(f"unix:{tmp_path / 'absent.sock'}")
    with pytest.raises(SlurmUnavailable, match=r"absent\.sock"):
        backend.poll(PollOptions())


def test_silent_server_times_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        backend = RestBackend(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.3)
        started = time.monotonic()
        with pytest.raises(SlurmUnavailable, match="timed out"):
            backend.poll(PollOptions())
        assert time.monotonic() - started < 10, "never timed out"


# --- the real slurmrestd (Slurm 22.05 sandbox) ----------------------------------------------------

SQUEUE_FORMAT = "%i|%T|%P|%a|%u|%C|%r|%b"


def squeue_rows(sandbox: Sandbox) -> list[list[str]]:
    """Every job slurmctld still holds: slurmrestd's /jobs, like ``--states=all``, includes
    finished jobs until MinJobAge purges them."""
    out = sandbox.run_command(
        ["squeue", "-a", "-r", "-h", "--states=all", "-o", SQUEUE_FORMAT]
    ).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def expected_from_squeue(sandbox: Sandbox) -> tuple[tuple[JobGroup, ...], tuple[RunningJob, ...]]:
    """Job groups and running jobs computed from squeue's text, not from slurmrestd."""
    result = JobTally(PollOptions())
    for job_id, state, partition, account, user, cpus, reason, gres in squeue_rows(sandbox):
        result.add(
            JobRecord(
                job_id=job_id,
                state=state,
                partition=partition,
                account="" if account == "(null)" else account,
                user=user,
                reason=reason,
                cpus=int(cpus),
                gpus=gpus_from_tres(gres),
            )
        )
    return result.groups(), tuple(sorted(result.running, key=lambda job: job.job_id))


@pytest.fixture(scope="module")
def workload(slurm_sandbox: Sandbox) -> Iterator[dict[str, str]]:
    """A running job, a held job and a running GPU job, settled."""
    slurm_sandbox.cancel_all()
    jobs = {
        "running": slurm_sandbox.submit("-J", "rest-run", "-c", "1", "--wrap", "sleep 600"),
        "held": slurm_sandbox.submit("-J", "rest-held", "--hold", "--wrap", "sleep 600"),
        "gpu": slurm_sandbox.submit(
            "-J", "rest-gpu", "-c", "1", "-p", "gpu", "--gres=gpu:1", "--wrap", "sleep 600"
        ),
    }
    deadline = time.monotonic() + 30
    while True:
        states = {row[0]: row[1] for row in squeue_rows(slurm_sandbox)}
        if states.get(jobs["running"]) == "RUNNING" and states.get(jobs["gpu"]) == "RUNNING":
            break
        if time.monotonic() > deadline:
            pytest.fail(f"sandbox jobs did not start within 30 s: {states}")
        time.sleep(0.25)
    try:
        yield jobs
    finally:
        slurm_sandbox.cancel_all()


def poll_until_304(backend: RestBackend, attempts: int = 4) -> tuple[SlurmSnapshot, float]:
    """Poll until one poll is served entirely by 304s; returns it and its duration.

    slurmctld bumps its change times while the scheduler still settles jobs; a quiet
    controller answers 304 within a few seconds.
    """
    for _ in range(attempts):
        before = backend.stats["not_modified"]
        started = time.monotonic()
        snapshot = backend.poll(PollOptions())
        elapsed = time.monotonic() - started
        if backend.stats["not_modified"] - before == len(LISTINGS):
            return snapshot, elapsed
        time.sleep(1.5)
    pytest.fail(f"no poll was answered with 304s: {backend.stats}")


def check_against_cli(
    sandbox: Sandbox, snapshot: SlurmSnapshot, jobs: dict[str, str], held: int = 1
) -> None:
    groups, running = expected_from_squeue(sandbox)
    assert snapshot.job_groups == groups
    assert tuple(sorted(snapshot.running_jobs, key=lambda job: job.job_id)) == running
    by_id = {job.job_id: job for job in snapshot.running_jobs}
    assert by_id[jobs["gpu"]].partition == "gpu"
    assert by_id[jobs["running"]].partition == "debug"
    running = [(g.partition, g.count, g.gpus) for g in snapshot.job_groups if g.state == "running"]
    assert sorted(running) == [("debug", 1, 0), ("gpu", 1, 1)]
    assert jobs["held"] not in by_id
    held_groups = [g for g in snapshot.job_groups if g.reason == "JobHeldUser"]
    assert held_groups == [JobGroup("pending", "debug", "", "JobHeldUser", "", held, held, 0)]

    out = sandbox.run_command(
        [
            "sinfo",
            "-h",
            "-N",
            "-O",
            "NodeList:60,StateLong:30,CPUsState:30,Memory:20,AllocMem:20,Gres:40,GresUsed:40",
        ]
    ).stdout
    rows = {tuple(line.split()) for line in out.splitlines() if line.strip()}
    assert len(rows) == 1  # one node, printed once per partition
    name, state, cpus, memory, alloc_mem, gres, gres_used = rows.pop()
    (node,) = snapshot.nodes
    assert node.name == name
    assert node.effective_state == state
    alloc, idle, other, total = map(int, cpus.split("/"))
    assert (node.cpus_alloc, node.cpus_idle, node.cpus_other, node.cpus_total) == (
        alloc,
        idle,
        other,
        total,
    )
    assert node.memory_total_bytes == int(memory) * MIB
    assert node.memory_alloc_bytes == int(alloc_mem) * MIB
    assert node.gpus_total == gpus_from_tres(gres) == sandbox.gpus
    assert node.gpus_alloc == gpus_from_tres(gres_used) == 1
    assert set(node.partitions) == {"debug", "gpu"}
    assert node.cpu_load is not None and node.cpu_load >= 0  # slurmd reports one

    out = sandbox.run_command(["sinfo", "-h", "-o", "%P|%a|%D|%C"]).stdout
    partitions = []
    for line in out.splitlines():
        name, state, node_count, cpu_states = line.split("|")
        total_cpus = int(cpu_states.split("/")[3])
        partitions.append(
            Partition(name.rstrip("*"), state, name.endswith("*"), total_cpus, int(node_count))
        )
    assert sorted(snapshot.partitions, key=lambda p: p.name) == sorted(
        partitions, key=lambda p: p.name
    )

    version = sandbox.run_command(["sinfo", "--version"]).stdout.split()[-1]
    assert snapshot.version == version
    assert snapshot.scheduler is not None
    assert snapshot.scheduler.server_threads > 0
    assert snapshot.scheduler.rpc_by_type["REQUEST_JOB_INFO"].count > 0
    assert snapshot.probes[0].op == "ping" and snapshot.probes[0].success
    assert snapshot.errors == 0


@pytest.mark.slurm
@pytest.mark.parametrize("mode", ["unix", "jwt"])
def test_real_slurmrestd(
    slurm_sandbox: Sandbox, workload: dict[str, str], mode: Literal["unix", "jwt"]
) -> None:
    url, token = slurm_sandbox.start_slurmrestd(mode)
    assert (token is not None) == (mode == "jwt")
    # With JWT, the user name comes from the token's "sun" claim (22.05 requires it).
    backend = RestBackend(url, token=token)
    started = time.monotonic()
    first = backend.poll(PollOptions())
    first_seconds = time.monotonic() - started
    assert backend.api_version == "v0.0.38"
    assert first.up and first.backend == "rest"
    check_against_cli(slurm_sandbox, first, workload)

    quiet, quiet_seconds = poll_until_304(backend)
    check_against_cli(slurm_sandbox, quiet, workload)
    assert quiet.job_groups == first.job_groups
    print(
        f"\n{mode}: first poll {first_seconds * 1000:.1f} ms, all-304 poll "
        f"{quiet_seconds * 1000:.1f} ms, stats {backend.stats}"
    )

    # A change is seen on the next poll: a second held job appears, then is cancelled.
    extra = slurm_sandbox.submit("-J", "rest-extra", "--hold", "--wrap", "sleep 600")
    try:
        snapshot = poll_until(backend, lambda s: held_count(s) == 2)
        check_against_cli(slurm_sandbox, snapshot, workload, held=2)
    finally:
        slurm_sandbox.run_command(["scancel", extra])
    snapshot = poll_until(backend, lambda s: held_count(s) == 1)
    assert any(group.state == "cancelled" for group in snapshot.job_groups)
    check_against_cli(slurm_sandbox, snapshot, workload)


def held_count(snapshot: SlurmSnapshot) -> int:
    return sum(group.count for group in snapshot.job_groups if group.reason == "JobHeldUser")


def poll_until(
    backend: RestBackend, condition: Callable[[SlurmSnapshot], bool], timeout: float = 20.0
) -> SlurmSnapshot:
    deadline = time.monotonic() + timeout
    while True:
        snapshot = backend.poll(PollOptions())
        if condition(snapshot):
            return snapshot
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met after {timeout:.0f} s: {snapshot.job_groups}")
        time.sleep(0.5)


@pytest.mark.slurm
def test_real_slurmrestd_rejects_a_bad_token(
    slurm_sandbox: Sandbox, workload: dict[str, str]
) -> None:
    url, token = slurm_sandbox.start_slurmrestd("jwt")
    assert token
    with pytest.raises(SlurmUnavailable, match="HTTP 401"):
        RestBackend(url).poll(PollOptions())
    # A token slurmctld cannot verify: slurmrestd 22.05 answers 500 with Slurm's error.
    with pytest.raises(SlurmUnavailable, match="HTTP 500"):
        RestBackend(url, token=token[:-4] + "AAAA", user="root").poll(PollOptions())


def test_an_empty_diag_gives_no_scheduler_series_and_job_counters_are_read() -> None:
    assert map_diag({}) is None
    stats = map_diag(load("diag")["statistics"])
    assert stats is not None
    assert (stats.jobs_submitted_total, stats.jobs_started_total) == (9, 2)
    partial = map_diag({"server_thread_count": 4})
    assert partial is not None
    assert partial.server_threads == 4 and partial.cycle_max_seconds is None


def test_map_reservation_on_recorded_slurmrestd_answer() -> None:
    records = load("reservations")["reservations"]
    # recorded at 1796288667: the maintenance window had started, future_gpu had not
    now = 1796288667
    assert [map_reservation(record, now) for record in records] == [
        Reservation("maint_window", "active", "", "maint,ignore_jobs,spec_nodes", 1),
        Reservation("future_gpu", "inactive", "gpu", "overlap", 1),
    ]
    assert map_reservation(records[1], records[1]["start_time"]).state == "active"


def test_reservation_flags_follow_scontrol_order_whatever_order_slurmrestd_lists() -> None:
    # Newer slurmrestd lists flags in its own table's order (DAILY before IGNORE_JOBS);
    # the label is the same as the cli backend's, with flags it does not know last.
    record = {"name": "r", "flags": ["DAILY", "IGNORE_JOBS", "REOCCURRING", "MAINT"]}
    assert map_reservation(record, 0).flags == "maint,ignore_jobs,daily,reoccurring"
