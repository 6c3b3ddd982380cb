"""Who owns a GPU: PID -> Slurm job / Kubernetes pod, and GPU -> Kubernetes container.

Two independent sources, both read once per poll by the GPU collector:

* :func:`owners_of` reads ``/proc/<pid>/cgroup`` for the compute PIDs that NVML lists
  and :func:`parse_cgroup` turns each file into an :class:`Owner`: the Slurm job id
  (``.../slurm/uid_<uid>/job_<id>/...`` on cgroup v1,
  ``.../slurmstepd.scope/job_<id>/...`` on cgroup v2) and/or the Kubernetes pod UID and
  container id (``kubepods`` hierarchies of the cgroupfs and the systemd cgroup driver).
  The exporter must run in the host PID namespace *and* the host cgroup namespace, or
  the paths are relative to its own cgroup and name nothing.
* :class:`PodResources` asks the kubelet's pod-resources API (gRPC, ``v1``, over the unix
  socket ``/var/lib/kubelet/pod-resources/kubelet.sock``), the way dcgm-exporter does, which
  container each GPU (device id = GPU or MIG UUID) is allocated to. The protobuf messages
  are decoded by hand (no ``protobuf`` dependency); only the fields used are decoded and
  every other field is skipped.

Nothing here emits metrics: the collector exports ``gotthard_gpu_job_info`` /
``gotthard_gpu_pod_info`` info series and the joins happen in PromQL.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gotthard.extras import install_hint

if TYPE_CHECKING:
    import grpc

__all__ = [
    "KUBELET_POD_RESOURCES_SOCKET",
    "Owner",
    "PodContainer",
    "PodResources",
    "PodResourcesError",
    "owners_of",
    "parse_cgroup",
    "parse_list_response",
]

#: The kubelet's default pod-resources socket.
KUBELET_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

#: Longest path a unix socket address can hold (``sun_path`` is 108 bytes with the NUL).
_MAX_UNIX_PATH = 107

#: /proc/<pid>/cgroup is a few hundred bytes; never read more than this.
_MAX_CGROUP_FILE = 64 * 1024


# --- /proc/<pid>/cgroup ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """What a process belongs to; every field is ``""`` when unknown.

    ``slurm_job_id`` is digits only; ``pod_uid`` a lowercase UUID with dashes;
    ``container_id`` 64 lowercase hex digits (the runtime's container id, without the
    ``cri-containerd-``/``docker-``/``crio-`` prefix), set only together with ``pod_uid``.
    A Slurm job running inside a pod (slurmd in Kubernetes) has both a job and a pod.
    """

    slurm_job_id: str = ""
    pod_uid: str = ""
    container_id: str = ""


_JOB = re.compile(r"job_([0-9]{1,10})", re.ASCII)
_SLURM_V1_UID = re.compile(r"uid_[0-9]+", re.ASCII)
_UUID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII | re.IGNORECASE
)
#: cgroupfs driver: ``pod<uid>`` below ``kubepods[/besteffort|/burstable]``.
_POD_CGROUPFS = re.compile(r"pod([0-9a-f-]{36})", re.ASCII | re.IGNORECASE)
_QOS_CGROUPFS = frozenset({"besteffort", "burstable"})
#: systemd driver: ``kubepods[-besteffort|-burstable]-pod<uid with _>.slice``, possibly with
#: a prefix (``kubelet-kubepods-...`` when the kubelet runs under a nested slice, as in kind).
_POD_SYSTEMD = re.compile(
    r"(?:^|-)kubepods(?:-besteffort|-burstable)?-pod([0-9a-f_]{36})\.slice\Z",
    re.ASCII | re.IGNORECASE,
)
#: ``<id>`` (cgroupfs), ``cri-containerd-<id>.scope``, ``docker-<id>.scope``,
#: ``crio-<id>.scope`` (systemd) or ``crio-<id>`` (CRI-O with cgroupfs).
_CONTAINER = re.compile(
    r"(?:(?:cri-containerd|docker|crio)-)?([0-9a-f]{64})(?:\.scope)?", re.ASCII | re.IGNORECASE
)


def parse_cgroup(text: str) -> Owner:
    """Parse the contents of ``/proc/<pid>/cgroup``; pure, never raises.

    Each line is ``<hierarchy-id>:<controllers>:<path>``. The cgroup v2 (unified) line
    ``0::<path>`` wins when it names a job or pod; otherwise (cgroup v1, or a hybrid host
    whose unified line is only systemd's) the first line that names one is used.
    Unrelated processes (``/user.slice/...``, plain Docker) and garbage give ``Owner()``.
    """
    lines = list(_split_lines(text))
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "" and (owner := _parse_path(path)) is not None:
            return owner
    for _hierarchy, _controllers, path in lines:
        if (owner := _parse_path(path)) is not None:
            return owner
    return Owner()


def _split_lines(text: str) -> Iterator[tuple[str, str, str]]:
    for line in text.split("\n"):
        parts = line.strip().split(":", 2)
        if len(parts) == 3:
            yield parts[0], parts[1], parts[2]


def _parse_path(path: str) -> Owner | None:
    """The owner a cgroup path names, or ``None`` when it names neither job nor pod."""
    parts = path.split("/")
    job = _slurm_job(parts)
    pod_uid, container_id = _kubernetes_pod(parts)
    if not job and not pod_uid:
        return None
    return Owner(slurm_job_id=job, pod_uid=pod_uid, container_id=container_id)


def _slurm_job(parts: list[str]) -> str:
    for i, part in enumerate(parts):
        job_at = -1
        if part == "slurm" or part.startswith("slurm_"):
            # v1: /slurm[_<node>]/uid_<uid>/job_<id>/step_<step>[/task_<n>]
            if i + 1 < len(parts) and _SLURM_V1_UID.fullmatch(parts[i + 1]):
                job_at = i + 2
        elif part == "slurmstepd.scope" or part.endswith("_slurmstepd.scope"):
            # v2: /system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/...
            job_at = i + 1
        if 0 < job_at < len(parts) and (match := _JOB.fullmatch(parts[job_at])):
            return match.group(1)
    return ""


def _kubernetes_pod(parts: list[str]) -> tuple[str, str]:
    for i, part in enumerate(parts):
        uid = ""
        if (match := _POD_CGROUPFS.fullmatch(part)) and _below_kubepods(parts, i):
            uid = match.group(1)
        elif match := _POD_SYSTEMD.search(part):
            uid = match.group(1).replace("_", "-")
        if uid and _UUID.fullmatch(uid):
            container = ""
            if i + 1 < len(parts) and (found := _CONTAINER.fullmatch(parts[i + 1])):
                container = found.group(1).lower()
            return uid.lower(), container
    return "", ""


def _below_kubepods(parts: list[str], i: int) -> bool:
    """``parts[i]`` sits at ``kubepods/pod<uid>`` or ``kubepods/<qos>/pod<uid>``."""
    if i >= 1 and parts[i - 1] == "kubepods":
        return True
    return i >= 2 and parts[i - 1] in _QOS_CGROUPFS and parts[i - 2] == "kubepods"


def owners_of(pids: Iterable[int], procfs: str | Path) -> tuple[dict[int, Owner], int]:
    """Read ``<procfs>/<pid>/cgroup`` for each PID; returns ``(owners, errors)``.

    ``owners`` maps every PID whose file could be read to its :class:`Owner` (``Owner()``
    when the process belongs to no job or pod). A process that is gone (it exited between
    NVML listing it and this read: ``FileNotFoundError``, ``ProcessLookupError``) is left
    out silently. ``errors`` counts the other unreadable files (permission denied, I/O
    errors), which are left out too; a steady non-zero count means a misconfigured exporter
    (not in the host PID namespace, or lacking privileges).
    """
    owners: dict[int, Owner] = {}
    errors = 0
    for pid in pids:
        if pid in owners:
            continue
        try:
            with open(Path(procfs) / str(int(pid)) / "cgroup", "rb") as handle:
                data = handle.read(_MAX_CGROUP_FILE)
        except (FileNotFoundError, ProcessLookupError):
            continue
        except (OSError, ValueError):
            errors += 1
            continue
        owners[pid] = parse_cgroup(data.decode("utf-8", errors="replace"))
    return owners, errors


# --- kubelet pod-resources API ----------------------------------------------------------------


class PodResourcesError(Exception):
    """The kubelet's pod-resources API could not be asked or answered nonsense."""


@dataclass(frozen=True, slots=True)
class PodContainer:
    """One container that the kubelet allocated a device to."""

    namespace: str
    pod: str
    container: str
    resource_name: str


_LIST_METHOD = "/v1.PodResourcesLister/List"
#: Kubelets on busy nodes answer more than gRPC's default 4 MiB.
_MAX_RESPONSE = 64 * 1024 * 1024


def _identity(data: bytes) -> bytes:
    return data


class PodResources:
    """Client of the kubelet pod-resources API (``v1.PodResourcesLister/List``).

    One call to :meth:`devices` is one RPC on a fresh channel (cheap over a unix socket,
    and it survives kubelet restarts, which recreate the socket, without gRPC's reconnect
    backoff); call it once per poll. Thread-safe.
    """

    def __init__(
        self,
        socket_path: str | Path = KUBELET_POD_RESOURCES_SOCKET,
        timeout: float = 2.0,
        resource_prefixes: tuple[str, ...] = ("nvidia.com/",),
    ) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self.resource_prefixes = resource_prefixes

    def available(self) -> bool:
        """Whether a unix socket exists at :attr:`socket_path` (no RPC is made)."""
        try:
            return stat.S_ISSOCK(os.stat(self.socket_path).st_mode)
        except (OSError, ValueError):
            return False

    def devices(self) -> dict[str, tuple[PodContainer, ...]]:
        """Device id -> the containers it is allocated to, for GPU resources only.

        Device ids are what the NVIDIA device plugin advertises: GPU UUIDs (``GPU-...``)
        or MIG UUIDs (``MIG-...``) by default, indices (``"0"``) with
        ``DEVICE_ID_STRATEGY=index``. Time-slicing replicas (``GPU-...::3``) are folded
        onto their GPU, so a shared GPU maps to several containers. Devices allocated
        through DRA (``dynamic_resources``) are not reported.

        Raises :class:`PodResourcesError` when the socket is missing, the kubelet does not
        answer within :attr:`timeout` seconds, or the answer is not a valid response.
        """
        path = self.socket_path.absolute()
        if not self.available():
            raise PodResourcesError(f"no kubelet pod-resources socket at {path}")
        if len(os.fsencode(path)) > _MAX_UNIX_PATH:
            raise PodResourcesError(
                f"kubelet socket path {path} is longer than {_MAX_UNIX_PATH} bytes"
            )
        try:
            import grpc  # only a node with a kubelet socket pays for grpcio
        except ModuleNotFoundError:
            raise PodResourcesError(
                f"reading {path} needs grpcio: {install_hint('kubelet')}"
            ) from None

        channel = grpc.insecure_channel(
            f"unix://{path}",
            options=[
                ("grpc.max_receive_message_length", _MAX_RESPONSE),
                ("grpc.enable_http_proxy", 0),
            ],
        )
        try:
            call = channel.unary_unary(
                _LIST_METHOD, request_serializer=_identity, response_deserializer=_identity
            )
            response = call(b"", timeout=self.timeout)
        except grpc.RpcError as err:
            raise PodResourcesError(_rpc_failure(err, path, self.timeout)) from None
        finally:
            channel.close()
        if not isinstance(response, bytes):  # pragma: no cover - identity deserializer
            raise PodResourcesError("kubelet pod-resources: unexpected response type")
        return parse_list_response(response, self.resource_prefixes)


def _rpc_failure(err: grpc.RpcError, path: Path, timeout: float) -> str:
    import grpc

    code = err.code() if isinstance(err, grpc.Call) else None
    details = err.details() if isinstance(err, grpc.Call) else str(err)
    where = f"kubelet pod-resources at {path}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"{where}: no answer within {timeout:g}s"
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"{where} unavailable: {details}"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return f"{where} does not serve {_LIST_METHOD} (kubelet older than 1.20?): {details}"
    name = code.name if code is not None else "error"
    return f"{where}: {name}: {details}"


# --- protobuf wire format (decode only) -------------------------------------------------------

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MAX_FIELD_NUMBER = (1 << 29) - 1


class _Malformed(Exception):
    pass


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 70, 7):
        if pos >= len(buf):
            raise _Malformed("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise _Malformed("varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes]]:
    """``(field number, wire type, raw value)`` for each field of one message.

    The raw value is the payload of a length-delimited field and the undecoded bytes of a
    varint / fixed field (this schema decodes no numbers). Groups (wire types 3, 4) are
    rejected: proto3 has none.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if not 1 <= number <= _MAX_FIELD_NUMBER:
            raise _Malformed(f"invalid field number {number}")
        start = pos
        if wire == _VARINT:
            _, pos = _read_varint(buf, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            length, start = _read_varint(buf, pos)
            pos = start + length
        else:
            raise _Malformed(f"unsupported wire type {wire} (field {number})")
        if pos > end:
            raise _Malformed(f"field {number} runs past the end of its message")
        yield number, wire, buf[start:pos]


def _len_fields(data: bytes, message: str, numbers: tuple[int, ...]) -> Iterator[tuple[int, bytes]]:
    """Yield ``(number, value)`` for the fields of *message* numbered in *numbers*.

    Every field this decoder reads is length-delimited (a string or a nested message), so a
    wanted field with another wire type is malformed; fields not wanted are skipped.
    """
    for number, wire, value in _fields(data):
        if number not in numbers:
            continue
        if wire != _LEN:
            raise _Malformed(f"{message} field {number} has wire type {wire}, expected 2")
        yield number, value


def _string(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed(f"{what} is not valid UTF-8") from None


def parse_list_response(
    data: bytes, resource_prefixes: tuple[str, ...] = ("nvidia.com/",)
) -> dict[str, tuple[PodContainer, ...]]:
    """Decode a ``ListPodResourcesResponse`` into device id -> containers.

    Only devices whose ``resource_name`` starts with one of ``resource_prefixes`` count.
    Field numbers (kubelet ``pkg/apis/podresources/v1/api.proto``)::

        ListPodResourcesResponse: 1 pod_resources (PodResources, repeated)
        PodResources:             1 name, 2 namespace, 3 containers (ContainerResources)
        ContainerResources:       1 name, 2 devices (ContainerDevices),
                                  3 cpu_ids, 4 memory, 5 dynamic_resources (skipped)
        ContainerDevices:         1 resource_name, 2 device_ids (repeated), 3 topology (skipped)

    Raises :class:`PodResourcesError` on malformed input.
    """
    found: dict[str, list[PodContainer]] = {}
    try:
        for _, value in _len_fields(data, "ListPodResourcesResponse", (1,)):
            _pod(value, resource_prefixes, found)
    except _Malformed as err:
        raise PodResourcesError(f"malformed ListPodResourcesResponse: {err}") from None
    return {device: tuple(dict.fromkeys(containers)) for device, containers in found.items()}


def _pod(data: bytes, prefixes: tuple[str, ...], found: dict[str, list[PodContainer]]) -> None:
    name = namespace = ""
    containers: list[bytes] = []
    for number, value in _len_fields(data, "PodResources", (1, 2, 3)):
        if number == 1:
            name = _string(value, "pod name")
        elif number == 2:
            namespace = _string(value, "pod namespace")
        else:
            containers.append(value)
    # a message's fields may come in any order: decode containers once name/namespace are known
    for container in containers:
        _container(container, namespace, name, prefixes, found)


def _container(
    data: bytes,
    namespace: str,
    pod: str,
    prefixes: tuple[str, ...],
    found: dict[str, list[PodContainer]],
) -> None:
    name = ""
    devices: list[tuple[str, list[str]]] = []
    for number, value in _len_fields(data, "ContainerResources", (1, 2)):
        if number == 1:
            name = _string(value, "container name")
        else:
            devices.append(_devices(value))
    for resource_name, device_ids in devices:
        if not resource_name.startswith(prefixes):
            continue
        owner = PodContainer(namespace, pod, name, resource_name)
        for device_id in device_ids:
            # time-slicing replicas are advertised as "<uuid>::<replica>"
            if device := device_id.split("::", 1)[0]:
                found.setdefault(device, []).append(owner)


def _devices(data: bytes) -> tuple[str, list[str]]:
    resource_name = ""
    device_ids: list[str] = []
    for number, value in _len_fields(data, "ContainerDevices", (1, 2)):
        if number == 1:
            resource_name = _string(value, "resource name")
        else:
            device_ids.append(_string(value, "device id"))
    return resource_name, device_ids
