"""A fake kubelet pod-resources server and a tiny protobuf encoder, for tests only.

This is NOT the kubelet: it is a real gRPC server (``grpcio``) on a unix socket that
answers ``/v1.PodResourcesLister/List`` with whatever bytes a test gives it, so that
:class:`gotthard.exporters.gpu.attribution.PodResources` is exercised over real gRPC.

Encoding (hand-written protobuf wire format, no ``protobuf`` package)::

    FakeDevice(resource_name, device_ids=(), numa_nodes=())       # ContainerDevices
    FakeContainer(name, devices=(), cpu_ids=(), packed_cpu_ids=True,
                  memory_bytes=0, dra_claims=())                  # ContainerResources
    FakePod(name, namespace, containers=())                       # PodResources
    encode_list_response(pods, *, unknown_fields=False) -> bytes  # ListPodResourcesResponse

``numa_nodes``, ``cpu_ids``, ``memory_bytes`` and ``dra_claims`` encode the fields the
client must skip (topology, cpu_ids packed or not, memory, dynamic_resources);
``unknown_fields=True`` adds fields of wire types 0, 1, 2 and 5 with unassigned numbers
to every message. Low-level pieces: :func:`encode_varint`, :func:`encode_key`,
:func:`encode_len` (length-delimited field from bytes or str), :func:`encode_uint`,
:func:`encode_unknown_fields`.

Server::

    with short_socket_dir() as d:                      # /tmp/gk..., removed afterwards
        with fake_kubelet(encode_list_response([...]), socket_path=d / "kubelet.sock") as k:
            PodResources(k.socket_path).devices()
            k.calls, k.requests                        # RPCs seen, request bytes
            k.response = b"..."                        # change the answer
            k.delay = 5.0                              # answer late (woken on exit)
            k.abort = grpc.StatusCode.UNIMPLEMENTED    # fail every RPC with this code

``fake_kubelet()`` without ``socket_path`` makes (and removes) its own short directory:
unix socket paths are limited to 107 bytes, too short for pytest's ``tmp_path``.
:func:`dead_socket` leaves a socket file with nothing listening on it.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

SERVICE = "v1.PodResourcesLister"
METHOD = "List"

# --- protobuf wire format (encode only) -----------------------------------------------------

VARINT, I64, LEN, I32 = 0, 1, 2, 5


def encode_varint(value: int) -> bytes:
    """Base-128 varint; negative numbers as their 64-bit two's complement (like int64)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode_key(number: int, wire: int) -> bytes:
    return encode_varint(number << 3 | wire)


def encode_len(number: int, payload: bytes | str) -> bytes:
    """A length-delimited field (string, bytes, embedded message or packed numbers)."""
    data = payload.encode() if isinstance(payload, str) else payload
    return encode_key(number, LEN) + encode_varint(len(data)) + data


def encode_uint(number: int, value: int) -> bytes:
    return encode_key(number, VARINT) + encode_varint(value)


def encode_unknown_fields() -> bytes:
    """One field of each wire type 0, 1, 5, 2, with numbers no pod-resources message uses."""
    return (
        encode_uint(100, 300)
        + encode_key(101, I64)
        + b"\x01\x02\x03\x04\x05\x06\x07\x08"
        + encode_key(102, I32)
        + b"\xff\xfe\xfd\xfc"
        + encode_len(103, b"\x0a\x03abc")
        + encode_uint(536_870_911, 1)  # the largest field number
    )


@dataclass(frozen=True)
class FakeDevice:
    """``ContainerDevices``: 1 resource_name, 2 device_ids, 3 topology."""

    resource_name: str
    device_ids: Sequence[str] = ()
    numa_nodes: Sequence[int] = ()

    def encode(self, extra: bytes = b"") -> bytes:
        out = encode_len(1, self.resource_name)
        for device_id in self.device_ids:
            out += encode_len(2, device_id)
        if self.numa_nodes:
            nodes = b"".join(encode_len(1, encode_uint(1, node)) for node in self.numa_nodes)
            out += encode_len(3, nodes)
        return out + extra


@dataclass(frozen=True)
class FakeContainer:
    """``ContainerResources``: 1 name, 2 devices, 3 cpu_ids, 4 memory, 5 dynamic_resources."""

    name: str
    devices: Sequence[FakeDevice] = ()
    cpu_ids: Sequence[int] = ()
    packed_cpu_ids: bool = True
    memory_bytes: int = 0
    dra_claims: Sequence[str] = ()

    def encode(self, extra: bytes = b"") -> bytes:
        out = b""
        # fields deliberately out of number order: decoders must not depend on it
        for device in self.devices:
            out += encode_len(2, device.encode(extra))
        out += encode_len(1, self.name)
        if self.cpu_ids and self.packed_cpu_ids:
            out += encode_len(3, b"".join(encode_varint(cpu) for cpu in self.cpu_ids))
        else:
            out += b"".join(encode_uint(3, cpu) for cpu in self.cpu_ids)
        if self.memory_bytes:
            memory = encode_len(1, "memory") + encode_uint(2, self.memory_bytes)
            memory += encode_len(3, encode_len(1, encode_uint(1, 0)))
            out += encode_len(4, memory)
        for claim in self.dra_claims:
            cdi = encode_len(1, encode_len(1, f"nvidia.com/gpu={claim}"))
            resource = cdi + encode_len(2, "gpu.nvidia.com") + encode_len(4, "gpu-0")
            out += encode_len(
                5, encode_len(2, claim) + encode_len(3, "ns") + encode_len(4, resource)
            )
        return out + extra


@dataclass(frozen=True)
class FakePod:
    """``PodResources``: 1 name, 2 namespace, 3 containers."""

    name: str
    namespace: str
    containers: Sequence[FakeContainer] = field(default_factory=tuple)

    def encode(self, extra: bytes = b"") -> bytes:
        out = b"".join(encode_len(3, container.encode(extra)) for container in self.containers)
        return out + encode_len(2, self.namespace) + encode_len(1, self.name) + extra


def encode_list_response(pods: Sequence[FakePod], *, unknown_fields: bool = False) -> bytes:
    """``ListPodResourcesResponse``: 1 pod_resources (repeated)."""
    extra = encode_unknown_fields() if unknown_fields else b""
    return b"".join(encode_len(1, pod.encode(extra)) for pod in pods) + extra


# --- the fake server --------------------------------------------------------------------------


@contextmanager
def short_socket_dir() -> Iterator[Path]:
    """A short directory under /tmp for unix sockets, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gk"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def dead_socket(path: Path) -> Path:
    """Leave a unix socket file at ``path`` with nothing listening on it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    finally:
        sock.close()
    return path


class FakeKubelet:
    """A fake kubelet's ``PodResourcesLister.List``; see the module docstring."""

    def __init__(self, socket_path: Path, response: bytes) -> None:
        self.socket_path = socket_path
        self.response = response
        self.delay = 0.0
        self.abort: grpc.StatusCode | None = None
        self.requests: list[bytes] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def _list(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self.requests.append(request)
        if self.delay:
            self._stopping.wait(self.delay)
        if self.abort is not None:
            context.abort(self.abort, "fake kubelet: told to fail")
        return self.response


@contextmanager
def fake_kubelet(
    response: bytes = b"", *, socket_path: Path | None = None
) -> Iterator[FakeKubelet]:
    """Serve a :class:`FakeKubelet` on ``socket_path`` (default: a fresh short dir)."""
    with _socket_path(socket_path) as path:
        kubelet = FakeKubelet(path, response)
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                METHOD: grpc.unary_unary_rpc_method_handler(
                    kubelet._list, request_deserializer=None, response_serializer=None
                )
            },
        )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"unix:{path}")
        server.start()
        try:
            yield kubelet
        finally:
            kubelet._stopping.set()
            server.stop(grace=None).wait(5)


@contextmanager
def _socket_path(socket_path: Path | None) -> Iterator[Path]:
    if socket_path is not None:
        yield socket_path
        return
    with short_socket_dir() as directory:
        yield directory / "kubelet.sock"
