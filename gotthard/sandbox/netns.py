"""A network and UTS namespace for a site's backup slurmctld, so that two controllers of
one cluster run on one machine.

slurmctld binds ``INADDR_ANY`` on ``SlurmctldPort`` (the primary's RPC manager and the
backup's standby one alike), and finds its role by comparing its hostname with the
``SlurmctldHost`` entries (the first is the primary). A second slurmctld on the same host
would fail to bind and would think itself the primary. So the backup runs in a network
namespace of its own (a veth pair: the host end carries the primary's and the nodes'
address, the namespace end the backup's) under a hostname of its own (a UTS namespace),
and in a mount namespace where its ``run/`` directory is a separate one: slurmctld kills
the process named in ``SlurmctldPidFile`` as it starts, which would otherwise be the
primary.

Needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN (``ip netns``, ``unshare --uts``,
``mount --bind``); without them :func:`create` raises :class:`SandboxError` naming what
failed.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from gotthard.sandbox.processes import SandboxError, find_binary, run_capture

#: The private range the host/backup address pairs (one /30 each) are taken from.
POOL = ipaddress.ip_network("10.213.0.0/16")
#: What a missing capability looks like to the user.
NEEDS = "root with CAP_NET_ADMIN and CAP_SYS_ADMIN (network, UTS and mount namespaces)"


@dataclass(frozen=True)
class ControllerNet:
    """The backup controller's namespace and the two ends of its veth pair."""

    #: ``ip netns`` name (``/run/netns/<name>``)
    name: str
    host_if: str
    #: the host end: where the primary slurmctld and the slurmd are reached
    host_addr: str
    #: the namespace end: the backup slurmctld's address
    backup_addr: str


def _digest(directory: Path) -> str:
    return hashlib.sha256(str(Path(directory).absolute()).encode()).hexdigest()


def netns_name(directory: Path) -> str:
    """The namespace of the sandbox in *directory* (stable, so ``down`` finds it)."""
    return f"gotthard-{_digest(directory)[:12]}"


def _ip(*args: str, netns: str = "") -> tuple[int, str]:
    argv = [find_binary("ip"), *(("netns", "exec", netns, find_binary("ip")) if netns else ())]
    done = run_capture([*argv, *args], env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=15)
    return done.returncode, (done.stderr or done.stdout).strip()


def _checked(*args: str, netns: str = "") -> None:
    code, out = _ip(*args, netns=netns)
    if code != 0:
        where = f" in namespace {netns}" if netns else ""
        raise SandboxError(
            f"backup controller: `ip {' '.join(args)}`{where} failed: {out or code}; "
            f"a second slurmctld needs {NEEDS}"
        )


def _used_networks() -> list[ipaddress.IPv4Network]:
    code, out = _ip("-o", "-4", "addr", "show")
    if code != 0:
        raise SandboxError(f"backup controller: `ip -o -4 addr show` failed: {out}; needs {NEEDS}")
    found = []
    for line in out.splitlines():
        words = line.split()
        if "inet" in words:
            found.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
    return found


def _free_block(directory: Path) -> ipaddress.IPv4Network:
    """A /30 of :data:`POOL` that no interface uses, starting where the directory hashes."""
    blocks = list(POOL.subnets(new_prefix=30))
    start = int(_digest(directory)[:8], 16) % len(blocks)
    used = _used_networks()
    for offset in range(len(blocks)):
        block = blocks[(start + offset) % len(blocks)]
        if not any(block.overlaps(net) for net in used):
            return block
    raise SandboxError(f"backup controller: no free /30 left in {POOL}")


def exists(directory: Path) -> bool:
    return Path("/run/netns", netns_name(directory)).exists()


def remove(directory: Path) -> bool:
    """Delete the namespace (and with it the veth pair); True if there was one."""
    if not exists(directory):
        return False
    _ip("netns", "del", netns_name(directory))
    return True


def create(directory: Path) -> ControllerNet:
    """A fresh namespace for the backup of the sandbox in *directory*: veth pair, addresses,
    loopback up; a left-over one of the same directory is replaced."""
    remove(directory)
    name = netns_name(directory)
    tag = _digest(directory)[:8]
    host_if, peer_if = f"gth{tag}", f"gtb{tag}"
    _ip("link", "del", host_if)  # left over from a namespace deleted under it: ignore errors
    _checked("netns", "add", name)
    try:
        block = _free_block(directory)
        host_addr, backup_addr = (str(a) for a in list(block.hosts())[:2])
        _checked("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        _checked("link", "set", peer_if, "netns", name)
        _checked("addr", "add", f"{host_addr}/30", "dev", host_if)
        _checked("link", "set", host_if, "up")
        _checked("addr", "add", f"{backup_addr}/30", "dev", peer_if, netns=name)
        _checked("link", "set", peer_if, "up", netns=name)
        _checked("link", "set", "lo", "up", netns=name)
    except SandboxError:
        remove(directory)
        _ip("link", "del", host_if)
        raise
    net = ControllerNet(name, host_if, host_addr, backup_addr)
    argv = wrap(net, "gotthard-probe", None, ["true"])
    probe = run_capture(argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=15)
    if probe.returncode != 0:
        remove(directory)
        raise SandboxError(
            "backup controller: cannot enter the namespace with a hostname of its own "
            f"(`ip netns exec {name} unshare --uts`): {probe.stderr.strip()}; needs {NEEDS}"
        )
    return net


#: Run by ``sh -c`` in the namespace: own hostname, own run directory, then the program.
_SCRIPT = (
    'echo "$1" > /proc/sys/kernel/hostname && '
    'if [ -n "$2" ]; then mount --bind "$2" "$3"; fi && shift 3 && exec "$@"'
)


def wrap(
    net: ControllerNet, hostname: str, run_dirs: tuple[Path, Path] | None, argv: list[str]
) -> list[str]:
    """*argv* run in the namespace *net* (``ip netns exec`` also gives it a mount namespace
    of its own), under *hostname*, with ``run_dirs[0]`` mounted over ``run_dirs[1]``."""
    source, target = (str(run_dirs[0]), str(run_dirs[1])) if run_dirs else ("", "")
    return [
        find_binary("ip"),
        "netns",
        "exec",
        net.name,
        find_binary("unshare"),
        "--uts",
        "--",
        "/bin/sh",
        "-c",
        _SCRIPT,
        "gotthard-backup-controller",
        hostname,
        source,
        target,
        *argv,
    ]
