"""PID -> Slurm job / pod attribution, and the kubelet pod-resources client (fake kubelet)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gotthard.exporters.gpu.attribution import (
    Owner,
    PodContainer,
    PodResources,
    PodResourcesError,
    owners_of,
    parse_cgroup,
    parse_list_response,
)
from tests.exporters.gpu.fakekubelet import (
    FakeContainer,
    FakeDevice,
    FakePod,
    dead_socket,
    encode_len,
    encode_list_response,
    encode_uint,
    fake_kubelet,
    short_socket_dir,
)

UID = "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"
UID_ = UID.replace("-", "_")
CID = "8c1f7e0b2d3a4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6"
GPU0 = "GPU-5d8a1e2f-3b4c-5d6e-7f80-91a2b3c4d5e6"
GPU1 = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
MIG0 = "MIG-1c2d3e4f-5a6b-5c7d-8e9f-a0b1c2d3e4f5"
MIG1 = "MIG-2d3e4f5a-6b7c-5d8e-9fa0-b1c2d3e4f5a6"


# --- parse_cgroup -----------------------------------------------------------------------------

SLURM_V1 = """\
12:hugetlb:/
11:freezer:/slurm/uid_1000/job_4242/step_0
10:memory:/slurm/uid_1000/job_4242/step_0/task_0
9:cpuset:/slurm/uid_1000/job_4242/step_0
8:devices:/slurm/uid_1000/job_4242/step_0
7:pids:/system.slice/slurmd.service
6:net_cls,net_prio:/
5:perf_event:/
4:blkio:/system.slice/slurmd.service
3:cpu,cpuacct:/slurm/uid_1000/job_4242/step_0/task_0
2:rdma:/
1:name=systemd:/system.slice/slurmd.service
"""

# hybrid host: v1 controllers plus systemd's unified hierarchy, which names no job
SLURM_V1_HYBRID = SLURM_V1 + "0::/system.slice/slurmd.service\n"

SLURM_V1_MULTI_SLURMD = """\
11:freezer:/slurm_node03/uid_2001/job_77/step_batch
10:memory:/slurm_node03/uid_2001/job_77/step_batch/task_0
9:cpuset:/slurm_node03/uid_2001/job_77/step_batch
8:devices:/slurm_node03/uid_2001/job_77/step_batch
7:pids:/system.slice/slurmd@node03.service
1:name=systemd:/system.slice/slurmd@node03.service
"""

SLURM_V1_DEVICES_ONLY = """\
11:freezer:/
8:devices:/slurm/uid_0/job_5/step_extern/task_0
1:name=systemd:/user.slice
"""

K8S_CGROUPFS_V1 = f"""\
12:hugetlb:/kubepods/besteffort/pod{UID}/{CID}
11:freezer:/kubepods/besteffort/pod{UID}/{CID}
10:memory:/kubepods/besteffort/pod{UID}/{CID}
9:cpuset:/kubepods/besteffort/pod{UID}/{CID}
8:devices:/kubepods/besteffort/pod{UID}/{CID}
7:pids:/kubepods/besteffort/pod{UID}/{CID}
6:net_cls,net_prio:/kubepods/besteffort/pod{UID}/{CID}
5:perf_event:/kubepods/besteffort/pod{UID}/{CID}
4:blkio:/kubepods/besteffort/pod{UID}/{CID}
3:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{CID}
2:rdma:/
1:name=systemd:/kubepods/besteffort/pod{UID}/{CID}
"""

K8S_SYSTEMD_V1 = f"""\
12:hugetlb:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
11:freezer:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
10:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
9:cpuset:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
8:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
7:pids:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
3:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
2:rdma:/
1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope
"""

SYSTEMD_POD = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"

SLURM_JOB = Owner(slurm_job_id="4242")
POD = Owner(pod_uid=UID, container_id=CID)
POD_ONLY = Owner(pod_uid=UID)

CASES: list[tuple[str, str, Owner]] = [
    # Slurm, cgroup v1
    ("slurm v1", SLURM_V1, SLURM_JOB),
    ("slurm v1 hybrid", SLURM_V1_HYBRID, SLURM_JOB),
    ("slurm v1 multiple slurmd", SLURM_V1_MULTI_SLURMD, Owner(slurm_job_id="77")),
    ("slurm v1 devices only", SLURM_V1_DEVICES_ONLY, Owner(slurm_job_id="5")),
    ("slurm v1 job cgroup", "4:memory:/slurm/uid_1000/job_9\n", Owner(slurm_job_id="9")),
    # Slurm, cgroup v2
    (
        "slurm v2 task",
        "0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n",
        Owner(slurm_job_id="123"),
    ),
    (
        "slurm v2 multiple slurmd",
        "0::/system.slice/node03_slurmstepd.scope/job_123/step_2/user/task_1\n",
        Owner(slurm_job_id="123"),
    ),
    (
        "slurm v2 batch",
        "0::/system.slice/slurmstepd.scope/job_88/step_batch/user/task_0\n",
        Owner(slurm_job_id="88"),
    ),
    (
        "slurm v2 extern",
        "0::/system.slice/slurmstepd.scope/job_88/step_extern/user/task_special\n",
        Owner(slurm_job_id="88"),
    ),
    (
        "slurm v2 interactive",
        "0::/system.slice/slurmstepd.scope/job_88/step_interactive/user/task_0\n",
        Owner(slurm_job_id="88"),
    ),
    (
        "slurm v2 stepd itself",
        "0::/system.slice/slurmstepd.scope/job_88/step_0/slurm\n",
        Owner(slurm_job_id="88"),
    ),
    ("slurm v2 stepd system", "0::/system.slice/slurmstepd.scope/system\n", Owner()),
    # Kubernetes, cgroupfs driver
    ("k8s cgroupfs v1 besteffort", K8S_CGROUPFS_V1, POD),
    ("k8s cgroupfs v2 burstable", f"0::/kubepods/burstable/pod{UID}/{CID}\n", POD),
    ("k8s cgroupfs guaranteed", f"0::/kubepods/pod{UID}/{CID}\n", POD),
    ("k8s cgroupfs crio", f"0::/kubepods/burstable/pod{UID}/crio-{CID}\n", POD),
    ("k8s cgroupfs pod level", f"0::/kubepods/besteffort/pod{UID}\n", POD_ONLY),
    ("k8s cgroupfs upper case uid", f"0::/kubepods/pod{UID.upper()}/{CID}\n", POD),
    (
        "k8s cgroupfs nested under docker (kind)",
        f"0::/docker/{'ab' * 32}/kubepods/besteffort/pod{UID}/{CID}\n",
        POD,
    ),
    # Kubernetes, systemd driver
    ("k8s systemd v1", K8S_SYSTEMD_V1, POD),
    ("k8s systemd v2 containerd", f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope\n", POD),
    ("k8s systemd v2 docker", f"0::{SYSTEMD_POD}/docker-{CID}.scope\n", POD),
    ("k8s systemd v2 crio", f"0::{SYSTEMD_POD}/crio-{CID}.scope\n", POD),
    ("k8s systemd v2 crio conmon", f"0::{SYSTEMD_POD}/crio-conmon-{CID}.scope\n", POD_ONLY),
    ("k8s systemd pod level", f"0::{SYSTEMD_POD}\n", POD_ONLY),
    (
        "k8s systemd guaranteed",
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        POD,
    ),
    (
        "k8s systemd besteffort",
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        POD,
    ),
    (
        "k8s systemd kubelet slice (kind)",
        "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        POD,
    ),
    # Slurm inside a pod (slurmd in Kubernetes): both
    (
        "slurm in a pod",
        f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope/system.slice/slurmstepd.scope/"
        "job_31/step_0/user/task_0\n",
        Owner(slurm_job_id="31", pod_uid=UID, container_id=CID),
    ),
    # unrelated and garbage
    ("empty", "", Owner()),
    ("blank lines", "\n\n\n", Owner()),
    ("garbage", "this is not a cgroup file\x00\xff", Owner()),
    ("colons only", ":::\n::\n0::\n", Owner()),
    ("user session", "0::/user.slice/user-1000.slice/session-3.scope\n", Owner()),
    ("system service", "0::/system.slice/sshd.service\n", Owner()),
    ("root", "0::/\n", Owner()),
    ("docker without k8s v2", f"0::/system.slice/docker-{CID}.scope\n", Owner()),
    ("docker without k8s v1", f"12:devices:/docker/{CID}\n1:name=systemd:/docker/{CID}\n", Owner()),
    ("job id not digits", "0::/system.slice/slurmstepd.scope/job_12a/step_0\n", Owner()),
    (
        "job id unicode digits",
        "0::/system.slice/slurmstepd.scope/job_\u0661\u0662/step_0\n",
        Owner(),
    ),
    ("slurm v1 without uid", "4:memory:/slurm/job_9/step_0\n", Owner()),
    ("job outside slurm", "0::/home/job_42\n", Owner()),
    ("pod uid not a uuid", f"0::/kubepods/besteffort/podnot-a-uuid/{CID}\n", Owner()),
    (
        "pod uid of wrong shape",
        "0::/kubepods/besteffort/pod3f1a2b4c5d6e4f708a9b0c1d2e3f4a5b----/x\n",
        Owner(),
    ),
    ("pod outside kubepods", f"0::/system.slice/pod{UID}/{CID}\n", Owner()),
    (
        "systemd pod slice with trailing junk",
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice.old/x\n",
        Owner(),
    ),
    ("container id too short", f"0::/kubepods/pod{UID}/abc123\n", POD_ONLY),
]


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_parse_cgroup(text: str, expected: Owner) -> None:
    assert parse_cgroup(text) == expected


def test_unified_line_wins_over_v1_lines() -> None:
    text = (
        "4:memory:/slurm/uid_1000/job_8/step_0\n"
        "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n"
    )
    assert parse_cgroup(text) == Owner(slurm_job_id="7")


def test_first_v1_line_with_an_owner_wins() -> None:
    text = (
        "11:freezer:/\n"
        "10:memory:/slurm/uid_1000/job_8/step_0\n"
        "9:cpuset:/slurm/uid_1000/job_9/step_0\n"
        "0::/\n"
    )
    assert parse_cgroup(text) == Owner(slurm_job_id="8")


def test_crlf_and_surrounding_space_are_tolerated() -> None:
    assert parse_cgroup("0::/kubepods/pod" + UID + "/" + CID + "\r\n") == POD


_VALID_JOB = re.compile(r"[0-9]+", re.ASCII)
_VALID_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_VALID_CID = re.compile(r"[0-9a-f]{64}")

_COMPONENTS = st.one_of(
    st.sampled_from(
        [
            "",
            # multi-component pieces, so that valid owners come up often
            "slurm/uid_1000/job_42",
            "slurm_node1/uid_0/job_4294967295",
            "system.slice/slurmstepd.scope/job_7",
            f"kubepods/besteffort/pod{UID}",
            f"kubepods/pod{UID}/{CID}",
            "slurm",
            "slurm_node1",
            "uid_1000",
            "uid_",
            "job_42",
            "job_",
            "job_4x",
            "job_00012345678901234",
            "job_\u0663",
            "step_0",
            "system.slice",
            "slurmstepd.scope",
            "n1_slurmstepd.scope",
            "kubepods",
            "besteffort",
            "burstable",
            "kubepods.slice",
            f"pod{UID}",
            f"pod{UID.upper()}",
            f"pod{UID_}",
            "pod",
            f"kubepods-burstable-pod{UID_}.slice",
            f"kubepods-pod{UID_}.slice",
            f"kubepods-pod{UID}.slice",
            f"kubepods-pod{UID_}",
            f"cri-containerd-{CID}.scope",
            f"crio-{CID}",
            f"docker-{CID[:-1]}.scope",
            CID,
            CID.upper(),
        ]
    ),
    st.text(max_size=3),
)
_LINES = st.tuples(
    st.sampled_from(["0::", "4:memory:", "1:name=systemd:", "", ":", "0:cpu:"]),
    st.lists(_COMPONENTS, max_size=8),
    st.sampled_from(["", "\r", " ", ":"]),
).map(lambda line: line[0] + "/" + "/".join(line[1]) + line[2])
_CGROUP_TEXT = st.lists(_LINES, max_size=5).map("\n".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), _CGROUP_TEXT))
def test_parse_cgroup_never_raises_and_returns_valid_ids(text: str) -> None:
    owner = parse_cgroup(text)
    assert isinstance(owner, Owner)
    assert owner.slurm_job_id == "" or _VALID_JOB.fullmatch(owner.slurm_job_id)
    assert owner.pod_uid == "" or _VALID_UID.fullmatch(owner.pod_uid)
    assert owner.container_id == "" or _VALID_CID.fullmatch(owner.container_id)
    assert owner.pod_uid or not owner.container_id


# --- owners_of --------------------------------------------------------------------------------


def _procfs(tmp_path: Path) -> Path:
    procfs = tmp_path / "proc"
    for pid, text in {
        101: SLURM_V1,
        202: f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope\n",
        303: "0::/user.slice/user-1000.slice/session-3.scope\n",
    }.items():
        (procfs / str(pid)).mkdir(parents=True)
        (procfs / str(pid) / "cgroup").write_text(text)
    (procfs / "404").mkdir()  # exited between listing and reading: no cgroup file
    (procfs / "505" / "cgroup").mkdir(parents=True)  # unreadable as a file (EISDIR)
    (procfs / "606").mkdir()
    (procfs / "606" / "cgroup").write_bytes(b"0::/kubepods/pod" + UID.encode() + b"/\xff\xfe\n")
    return procfs


def test_owners_of(tmp_path: Path) -> None:
    owners, errors = owners_of([101, 202, 303, 404, 505, 606, 999, 101], _procfs(tmp_path))
    assert owners == {
        101: SLURM_JOB,
        202: POD,
        303: Owner(),  # readable, owned by no job or pod
        606: POD_ONLY,  # undecodable bytes are replaced, not fatal
    }
    assert errors == 1  # 505; 404 and 999 (gone) are not errors


def test_owners_of_nothing(tmp_path: Path) -> None:
    assert owners_of([], tmp_path) == ({}, 0)
    assert owners_of(iter([1, 2]), tmp_path / "missing") == ({}, 0)


# --- parse_list_response ------------------------------------------------------------------------


def _cluster_pods() -> list[FakePod]:
    return [
        FakePod(
            "trainer-0",
            "ml",
            [
                FakeContainer(
                    "pytorch",
                    [FakeDevice("nvidia.com/gpu", [GPU0, GPU1], numa_nodes=[0, 1])],
                    cpu_ids=[0, 1, 2, 3, 200],
                    memory_bytes=1 << 34,
                ),
                FakeContainer("sidecar"),
            ],
        ),
        FakePod(
            "notebook-7f9c",
            "research",
            [
                FakeContainer(
                    "jupyter",
                    [
                        FakeDevice("nvidia.com/mig-1g.10gb", [MIG0]),
                        FakeDevice("nvidia.com/mig-2g.20gb", [MIG1], numa_nodes=[1]),
                    ],
                    cpu_ids=[5, 6],
                    packed_cpu_ids=False,
                )
            ],
        ),
        FakePod(
            "dpdk-router",
            "net",
            [
                FakeContainer(
                    "router",
                    [
                        FakeDevice("intel.com/sriov_netdevice", ["0000:3b:02.1", "0000:3b:02.2"]),
                        FakeDevice("example.com/fpga", [GPU0]),  # same id, not a GPU resource
                    ],
                    cpu_ids=[8, 9, 10, 11],
                    dra_claims=["claim-a"],
                )
            ],
        ),
    ]


def _expected() -> dict[str, tuple[PodContainer, ...]]:
    return {
        GPU0: (PodContainer("ml", "trainer-0", "pytorch", "nvidia.com/gpu"),),
        GPU1: (PodContainer("ml", "trainer-0", "pytorch", "nvidia.com/gpu"),),
        MIG0: (PodContainer("research", "notebook-7f9c", "jupyter", "nvidia.com/mig-1g.10gb"),),
        MIG1: (PodContainer("research", "notebook-7f9c", "jupyter", "nvidia.com/mig-2g.20gb"),),
    }


@pytest.mark.parametrize("unknown_fields", [False, True])
def test_parse_list_response(unknown_fields: bool) -> None:
    data = encode_list_response(_cluster_pods(), unknown_fields=unknown_fields)
    assert parse_list_response(data) == _expected()


def test_parse_list_response_empty() -> None:
    assert parse_list_response(b"") == {}
    assert parse_list_response(encode_list_response([FakePod("idle", "default")])) == {}


def test_parse_list_response_prefixes() -> None:
    data = encode_list_response(_cluster_pods())
    assert set(parse_list_response(data, ("intel.com/",))) == {"0000:3b:02.1", "0000:3b:02.2"}
    assert parse_list_response(data, ()) == {}
    assert set(parse_list_response(data, ("nvidia.com/mig-",))) == {MIG0, MIG1}


def test_time_sliced_gpu_maps_to_every_sharing_container() -> None:
    shared = "nvidia.com/gpu.shared"
    pods = [
        FakePod("a", "ns", [FakeContainer("c", [FakeDevice(shared, [f"{GPU0}::0"])])]),
        FakePod("b", "ns", [FakeContainer("c", [FakeDevice(shared, [f"{GPU0}::3"])])]),
    ]
    assert parse_list_response(encode_list_response(pods)) == {
        GPU0: (PodContainer("ns", "a", "c", shared), PodContainer("ns", "b", "c", shared))
    }


def test_duplicate_device_entries_are_folded() -> None:
    device = FakeDevice("nvidia.com/gpu", [GPU0, GPU0])
    pods = [FakePod("a", "ns", [FakeContainer("c", [device, device])])]
    assert parse_list_response(encode_list_response(pods)) == {
        GPU0: (PodContainer("ns", "a", "c", "nvidia.com/gpu"),)
    }


_GOOD = encode_list_response(_cluster_pods())

MALFORMED = {
    "invalid wire type": b"\xff\xff\xff",
    "group wire type": b"\x0b\x0c",
    "field number zero": b"\x02\x00",
    "truncated varint key": b"\x80",
    "truncated length": b"\x0a",
    "length past end": b"\x0a\x05ab",
    "truncated fixed64": b"\x49\x01\x02",  # field 9, wire type 1, 2 of 8 bytes
    "truncated fixed32": b"\x4d\x01",  # field 9, wire type 5, 1 of 4 bytes
    "varint too long": b"\x08" + b"\xff" * 10 + b"\x01",
    "pod as varint": encode_uint(1, 5),
    "name as varint": encode_len(1, encode_uint(1, 5)),
    "bad utf-8 namespace": encode_len(1, encode_len(2, b"\xff\xfe")),
    "bad utf-8 device id": encode_len(
        1,
        encode_len(
            3, encode_len(2, encode_len(1, "nvidia.com/gpu") + encode_len(2, b"GPU-\xc3\x28"))
        ),
    ),
    "nested garbage": encode_len(1, encode_len(3, b"\x0a\x09short")),
    "truncated real response": _GOOD[:-7],
    "text": b"not a protobuf message at all",
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_parse_list_response_malformed(data: bytes) -> None:
    with pytest.raises(PodResourcesError, match="malformed ListPodResourcesResponse"):
        parse_list_response(data)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.integers(0, len(_GOOD)).map(lambda cut: _GOOD[:cut]),
        st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255)).map(
            lambda edit: _GOOD[: edit[0]] + bytes([edit[1]]) + _GOOD[edit[0] + 1 :]
        ),
    )
)
def test_parse_list_response_only_raises_pod_resources_error(data: bytes) -> None:
    try:
        result = parse_list_response(data)
    except PodResourcesError:
        return
    assert all(isinstance(key, str) and key for key in result)
    assert all(isinstance(owner, PodContainer) for owners in result.values() for owner in owners)


# --- PodResources against a fake kubelet over real gRPC ----------------------------------------


def test_devices_over_grpc() -> None:
    with fake_kubelet(encode_list_response(_cluster_pods(), unknown_fields=True)) as kubelet:
        client = PodResources(kubelet.socket_path)
        assert client.available()
        assert client.devices() == _expected()
        assert kubelet.requests == [b""]  # an empty ListPodResourcesRequest, one RPC per call
        kubelet.response = encode_list_response(_cluster_pods()[1:])
        assert set(client.devices()) == {MIG0, MIG1}
        assert kubelet.calls == 2


def test_devices_with_str_path_and_custom_prefixes() -> None:
    with fake_kubelet(encode_list_response(_cluster_pods())) as kubelet:
        client = PodResources(str(kubelet.socket_path), resource_prefixes=("intel.com/",))
        assert set(client.devices()) == {"0000:3b:02.1", "0000:3b:02.2"}


def test_devices_garbage_response() -> None:
    with (
        fake_kubelet(b"\xff\xff\xff garbage") as kubelet,
        pytest.raises(PodResourcesError, match="malformed"),
    ):
        PodResources(kubelet.socket_path).devices()


def test_no_socket() -> None:
    with short_socket_dir() as directory:
        client = PodResources(directory / "kubelet.sock", timeout=30.0)
        assert not client.available()
        start = time.monotonic()
        with pytest.raises(PodResourcesError, match="no kubelet pod-resources socket"):
            client.devices()
        assert time.monotonic() - start < 10, "waited for the timeout"


def test_regular_file_is_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.sock"
    path.write_text("")
    assert not PodResources(path).available()
    with pytest.raises(PodResourcesError):
        PodResources(path).devices()


def test_socket_without_listener() -> None:
    with short_socket_dir() as directory:
        client = PodResources(dead_socket(directory / "kubelet.sock"), timeout=2.0)
        assert client.available()
        start = time.monotonic()
        with pytest.raises(PodResourcesError, match=r"unavailable|no answer"):
            client.devices()
        assert time.monotonic() - start < 2.0 + 8.0, "not bounded by the timeout"


def test_slow_kubelet_times_out() -> None:
    with fake_kubelet(encode_list_response(_cluster_pods())) as kubelet:
        kubelet.delay = 30.0
        start = time.monotonic()
        with pytest.raises(PodResourcesError, match=r"no answer within 0\.3s"):
            PodResources(kubelet.socket_path, timeout=0.3).devices()
        assert time.monotonic() - start < 10, "waited for the slow kubelet"


def test_kubelet_error_status() -> None:
    with fake_kubelet() as kubelet:
        kubelet.abort = grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(PodResourcesError, match="does not serve"):
            PodResources(kubelet.socket_path).devices()
        kubelet.abort = grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(PodResourcesError, match="PERMISSION_DENIED: fake kubelet"):
            PodResources(kubelet.socket_path).devices()


def test_socket_path_too_long() -> None:
    with short_socket_dir() as directory:
        deep = directory / ("d" * 100)
        deep.mkdir()
        # a socket can be bound through a short relative path, then named by its long one
        cwd = os.getcwd()
        os.chdir(deep)
        try:
            dead_socket(Path("kubelet.sock"))
        finally:
            os.chdir(cwd)
        client = PodResources(deep / "kubelet.sock")
        assert client.available()
        with pytest.raises(PodResourcesError, match="longer than 107 bytes"):
            client.devices()
