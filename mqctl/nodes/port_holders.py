"""Who holds a TCP port on this host: ``mqctl start`` checks a node's ports are free before it
starts anything, and that the process answering on a port is the one it started. Test and
bench clusters take their ports from a :class:`PortPicker`.

Linux's ``/proc/net/tcp`` (and ``tcp6``) list listening sockets with their inode; the holder is
the process with that socket among its ``/proc/<pid>/fd`` links. A holder this user may not
look at is reported without a pid.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path

from core.addresses import split_address

LISTEN_STATE = "0A"
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int | None
    command: str  # its command line, or "" when unknown

    def shown(self) -> str:
        if self.pid is None:
            return "another process (not visible to this user)"
        return f"pid {self.pid} ({self.command[:160]})" if self.command else f"pid {self.pid}"


def held_port(listens: list[str]) -> str | None:
    """The first of a node's addresses (``Config.listens_of``) that another process holds, as
    "host:port is held by ..."; None when all are free (port 0: the node picks its own)."""
    for listen in listens:
        host, port = split_address(listen)
        if port and not port_is_free(host, port):
            holder = listener_of(host, port)
            return f"{host}:{port} is held by {holder.shown() if holder else 'another socket'}"
    return None


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now (as the nodes bind: SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def listener_of(host: str, port: int) -> Holder | None:
    """The process listening on ``host:port`` (or on every address at ``port``), if any."""
    inodes = _listening_inodes(host, port)
    if not inodes:
        return None
    sockets = {f"socket:[{inode}]" for inode in inodes}
    for pid_dir in PROC.iterdir():
        if pid_dir.name.isdigit() and sockets & _fd_links(pid_dir):
            return Holder(int(pid_dir.name), _command(pid_dir))
    return Holder(None, "")


def _fd_links(pid_dir: Path) -> set[str]:
    try:
        fds = list((pid_dir / "fd").iterdir())
    except (FileNotFoundError, PermissionError, ProcessLookupError, NotADirectoryError):
        return set()
    links = set()
    for fd in fds:
        try:
            links.add(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    return links


def _listening_inodes(host: str, port: int) -> set[str]:
    wanted = ipaddress.ip_address(host) if host not in ("", "localhost") else ipaddress.ip_address("127.0.0.1")
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN_STATE:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) != port:
                continue
            local = _proc_address(address)
            if local == wanted or local.is_unspecified:
                inodes.add(fields[9])
    return inodes


def _proc_address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A /proc/net/tcp address: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _command(pid_dir: Path) -> str:
    try:
        return pid_dir.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, PermissionError, ProcessLookupError):
        return ""


class PortPicker:
    """Free loopback ports for the nodes of configs made on the spot (bench and test clusters).
    One picker never hands out a port twice, so the nodes it places never share one even before
    any of them listens; give every config made in one run the same picker.

    Pickers in different processes can still pick the same free port before either node
    listens; processes that run side by side (test workers) each take a ``share`` of ``shares``
    of the range, so theirs never meet."""

    def __init__(self, share: int = 0, shares: int = 1) -> None:
        if not 0 <= share < shares:
            raise ValueError(f"share {share} is not one of {shares}")
        self.handed_out: set[int] = set()
        self.share = share
        self.shares = shares

    def take(self, span: int = 2) -> int:
        """A loopback port free with the ``span - 1`` ports after it (a broker's HA port is its
        port + 1; a proxy's doors follow its port), none of them handed out before.

        The ports come from below the kernel's ephemeral range: a port from that range can be
        taken as the source port of any outgoing connection while its node is down (a restart, a
        mode switch), and the node then cannot listen on it again."""
        low, _ = _ephemeral_range()
        first = max(1024, min(PORTS_FROM, low - 4 * span))
        width = (low - first) // self.shares
        first, low = first + self.share * width, first + (self.share + 1) * width
        for _ in range(100_000):
            port = random.randrange(first, low - span)
            wanted = set(range(port, port + span))
            if (wanted | {port - 1}) & self.handed_out:
                continue
            if all(port_is_free("127.0.0.1", p) for p in wanted):
                self.handed_out.update(wanted)
                return port
        raise RuntimeError(f"no {span} free ports left in {first}-{low} after {len(self.handed_out)} handed out")


PORTS_FROM = 20000  # above the shipped conf.toml's ports (9876, 10911...)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high
