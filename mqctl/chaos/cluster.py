"""The cluster a chaos drill runs on: a name server and one broker group of the chosen mode, each
broker on a loopback address of its own (127.0.0.11, .12, ...) behind fault proxies.

```
 clients (127.0.0.1) ----> proxy :Q (advertise) ----> broker listen :P
 other members ----------> proxy :R (ha_advertise) -> broker HA / raft port :P+1
 brokers, clients -------> proxy (advertise) -------> name server
```

With ``disk-full`` among the faults every broker's store is on a small tmpfs of its own (mounting
needs root), which a fault fills past ``store.disk_max_used_ratio`` and its heal empties again.

Every link into a broker passes one of its proxies, and a broker connects out from its own
address (see :func:`core.remoting.client.connect_from`), so a proxy can tell who calls: a
partition of node X drops and refuses everything X's proxies carry and everything the other
proxies carry from X, its registrations with the name server included.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import trio

from core.addresses import shifted
from core.config import Config, load_config
from core.store.retention import disk_used_ratio
from mqctl.chaos.fault_proxy import FaultProxy
from mqctl.common.errors import CliError
from mqctl.nodes.commands import start_nodes
from mqctl.nodes.processes import NodeSpec, nodes_of, running_pid, stop

GROUP = "broker-a"
MEMBERS = MappingProxyType({"async": 2, "sync": 2, "dledger": 3, "controller": 3})
NAMESRV_HOST = "127.0.0.10"
PROXY_HOST = "127.0.0.20"
START_TIMEOUT_S = 60.0
DISK_BYTES = 1024 * 1024 * 1024  # each broker's tmpfs when disks are drilled (RAM only as used)
AUTO_RENEW_SLICE_MS = 10_000
DELAY_MS = 150  # a delay fault: every chunk into the node held this long
FILLED_RATIO = 0.95  # a full disk: above the store's 0.90 limit
FILLER = "chaos-disk-filler"


def node_host(index: int) -> str:
    return f"127.0.0.{11 + index}"


class Ports:
    """Free ports for the drill, none handed out twice and none a broker's HA port (its + 1)."""

    def __init__(self) -> None:
        self.taken: set[tuple[str, int]] = set()

    def take(self, host: str, *, with_next: bool = False) -> int:
        while True:
            with socket.socket() as s:
                s.bind((host, 0))
                port: int = s.getsockname()[1]
            wanted = {(host, port), (host, port + 1)} if with_next else {(host, port)}
            if wanted & self.taken or (with_next and not _bindable(host, port + 1)):
                continue
            self.taken |= wanted
            return port


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class Member:
    node: str  # "broker-a-0"
    host: str
    listen: str
    advertise: str  # its client proxy
    ha_advertise: str  # its HA / raft proxy
    proxies: list[FaultProxy] = field(default_factory=list)


def write_drill_config(directory: Path, mode: str) -> tuple[Path, list[Member]]:
    """The drill's ``conf.toml`` in ``directory``; returns it and the group's members."""
    ports = Ports()
    members = []
    for i in range(MEMBERS[mode]):
        host = node_host(i)
        port = ports.take(host, with_next=True)
        members.append(Member(f"{GROUP}-{i}", host, f"{host}:{port}", f"{host}:{ports.take(host)}",
                              f"{host}:{ports.take(host)}"))
    proxy_port = ports.take(PROXY_HOST, with_next=True)  # its door for broker-a takes the next port
    path = directory / "conf.toml"
    # the name server's port + 1 is its controller's raft port (controller mode)
    namesrv = (f"{NAMESRV_HOST}:{ports.take(NAMESRV_HOST, with_next=True)}",
               f"{NAMESRV_HOST}:{ports.take(NAMESRV_HOST, with_next=True)}")
    path.write_text(drill_settings(mode, "one broker group behind fault proxies")
                    + drill_nodes(namesrv, members, f"{PROXY_HOST}:{proxy_port}", f"{PROXY_HOST}:{ports.take(PROXY_HOST)}"))
    return path, members


def drill_nodes(namesrv: tuple[str, str] | list[tuple[str, str]], members: list[Member], proxy: str,
                grpc: str) -> str:
    """The nodes' tables of a drill's conf.toml: the name servers (listen, advertise; ns1, ns2,
    ...), the group's members and the proxy with its gRPC door."""
    namesrvs = [namesrv] if isinstance(namesrv, tuple) else namesrv
    brokers = "".join(
        f'[[brokers]]\nname = "{GROUP}"\nid = {i}\nlisten = "{m.listen}"\nadvertise = "{m.advertise}"\n'
        f'ha_advertise = "{m.ha_advertise}"\n' for i, m in enumerate(members))
    tables = "".join(f'[[nameservers]]\nname = "ns{i + 1}"\nlisten = "{listen}"\nadvertise = "{advertise}"\n'
                     for i, (listen, advertise) in enumerate(namesrvs))
    return (f'{tables}{brokers}'
            f'[[proxies]]\nname = "proxy1"\nlisten = "{proxy}"\ngrpc_listen = "{grpc}"\n')


def drill_settings(mode: str, what: str) -> str:
    """The settings every drill's conf.toml starts with: small stores, quick heartbeats and
    registrations, so that faults are noticed within seconds. Mode ``controller`` is a sync
    group under a controller (its name server hosts a controller group of one)."""
    replication = 'mode = "sync"\ncontroller = true' if mode == "controller" else f'mode = "{mode}"'
    return f"""# written by mqctl chaos: {what}
[cluster]
data_dir = "data"
[store]
segment_size_bytes = 16777216
index_slots = 10007
index_entries = 40000
[replication]
{replication}
ha_heartbeat_interval_ms = 1000
ha_housekeeping_interval_ms = 5000
ha_reconnect_interval_ms = 1000
[broker]
register_interval_ms = 2000
[namesrv]
scan_interval_ms = 2000
broker_expiry_ms = 10000
[proxy]
# a 5.x push consumer's message comes back this soon when its answer was lost (RocketMQ: 60 s)
auto_renew_slice_ms = {AUTO_RENEW_SLICE_MS}
auto_renew_ahead_ms = 3000
"""


class DrillCluster:
    """A drill's processes and the faults every kind of drill cluster can put them through:
    kill and restart, pause and resume, a full disk. Partitions, loss, rate limits and delay are
    the subclasses' (:class:`LoopbackCluster` here, ``LabCluster`` in mqctl/chaos/lab_cluster.py)."""

    kinds: tuple[str, ...] = ("kill", "pause", "disk-full")
    in_loop: tuple[str, ...] = ()  # kinds whose actions run on the drill's event loop (not in a thread)
    where = ""  # one line for the report: where the nodes run and how faults are made

    def __init__(self, mode: str, path: Path, members: list[Member]) -> None:
        self.mode = mode
        self.path, self.members = path, members
        self.config: Config = load_config(self.path)
        self.specs = {s.name: s for s in nodes_of(self.config)}
        self._paused: set[str] = set()
        self._mounted: list[Path] = []

    def store_dir(self, node: str) -> Path:
        return self.config.data_dir / node

    @property
    def namesrv(self) -> list[str]:
        return self.config.namesrv_addresses

    @property
    def proxy_doors(self) -> tuple[str | None, str | None]:
        """The proxy's 4.x door and gRPC door (advertised addresses)."""
        if not self.config.proxies:
            return None, None
        proxy = self.config.proxies[0]
        return proxy.advertise or proxy.listen, proxy.grpc_listen or None

    def member(self, node: str) -> Member:
        return next(m for m in self.members if m.node == node)

    def pids(self) -> dict[str, int]:
        """The running nodes' processes."""
        return {name: pid for name in self.specs if (pid := running_pid(self.config, name)) is not None}

    def mount_disks(self) -> None:
        """Give every broker a tmpfs of its own for its store (before the brokers start)."""
        for m in self.members:
            where = self.store_dir(m.node)
            where.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(where)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.unmount_disks()
                raise CliError(f"the disk-full fault needs a tmpfs per broker and could not mount one "
                               f"({done.stderr.strip() or 'mount failed'}); run as root or drop disk-full")
            self._mounted.append(where)

    def unmount_disks(self) -> None:
        for where in self._mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
        self._mounted.clear()

    async def serve_proxies(self, nursery: trio.Nursery) -> None:
        """Start what must run in this process before the nodes start (fault proxies)."""

    def start(self) -> None:
        """Start every node and wait until they serve and registered (blocking)."""
        start_nodes(self.config, list(self.specs.values()), time.monotonic() + START_TIMEOUT_S)

    def stop(self) -> None:
        for node in self._paused:
            self._signal(node, signal.SIGCONT)
        for spec in reversed(list(self.specs.values())):
            stop(self.config, spec, force=False)
        self.unmount_disks()

    def actions(self) -> dict[str, tuple[Callable[[str], None], Callable[[str], None]]]:
        """Per fault kind: how to inject it on a node and how to heal it (blocking, unless the
        kind is ``in_loop``)."""
        return {"kill": (self.kill, self.restart), "pause": (self.pause, self.resume),
                "disk-full": (self.fill_disk, self.free_disk)}

    # ---------------------------------------------------------------- process and disk faults

    def kill(self, node: str) -> None:
        stop(self.config, self.specs[node], force=True)  # SIGKILL; reaps it and clears its pid file

    def restart(self, node: str) -> None:
        spec: NodeSpec = self.specs[node]
        start_nodes(self.config, [spec], time.monotonic() + START_TIMEOUT_S)

    def pause(self, node: str) -> None:
        self._signal(node, signal.SIGSTOP)
        self._paused.add(node)

    def resume(self, node: str) -> None:
        self._signal(node, signal.SIGCONT)
        self._paused.discard(node)

    def fill_disk(self, node: str) -> None:
        """Take the node's disk past the store's limit: its store refuses writes within a check."""
        where = self.store_dir(node)
        st = os.statvfs(where)
        want = int(st.f_blocks * FILLED_RATIO) - (st.f_blocks - st.f_bfree)
        if want > 0:
            with open(where / FILLER, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, want * st.f_frsize)
        assert disk_used_ratio(where) >= FILLED_RATIO - 0.01

    def free_disk(self, node: str) -> None:
        (self.store_dir(node) / FILLER).unlink(missing_ok=True)

    def _signal(self, node: str, sig: signal.Signals) -> None:
        pid = running_pid(self.config, node)
        if pid is not None:
            os.kill(pid, sig)


class LoopbackCluster(DrillCluster):
    """Every node on a loopback address of its own, every link into a broker through a fault
    proxy of this process (the module docstring)."""

    kinds = ("kill", "pause", "partition", "disk-full", "delay")
    in_loop = ("partition", "delay")  # the proxies belong to the drill's loop
    where = "on loopback addresses, partitions and delay through fault proxies"

    def __init__(self, directory: Path, mode: str) -> None:
        super().__init__(mode, *write_drill_config(directory, mode))
        self.namesrv_proxies: list[FaultProxy] = []

    async def serve_proxies(self, nursery: trio.Nursery) -> None:
        """Put the proxies in front of the name server and every member (before they start)."""
        for ns in self.config.nameservers:
            proxy = FaultProxy(ns.listen)
            await nursery.start(proxy.serve, ns.advertise)
            self.namesrv_proxies.append(proxy)
        for m in self.members:
            for listen, upstream in ((m.advertise, m.listen), (m.ha_advertise, shifted(m.listen, 1))):
                proxy = FaultProxy(upstream)
                await nursery.start(proxy.serve, listen)
                m.proxies.append(proxy)

    def actions(self) -> dict[str, tuple[Callable[[str], None], Callable[[str], None]]]:
        return {**super().actions(), "partition": (self.isolate, self.reconnect),
                "delay": (self.delay, self.undelay)}

    def isolate(self, node: str) -> None:
        """Cut every link to and from ``node``: its proxies refuse everyone, the others it."""
        target = self.member(node)
        for proxy in self.namesrv_proxies:
            proxy.cut_from({target.host})
        for m in self.members:
            for proxy in m.proxies:
                proxy.cut() if m is target else proxy.cut_from({target.host})

    def reconnect(self, node: str) -> None:
        target = self.member(node)
        for proxy in self.namesrv_proxies:
            proxy.heal_from({target.host})
        for m in self.members:
            for proxy in m.proxies:
                proxy.heal() if m is target else proxy.heal_from({target.host})

    def delay(self, node: str) -> None:
        for proxy in self.member(node).proxies:
            proxy.state.delay_s = DELAY_MS / 1000

    def undelay(self, node: str) -> None:
        for proxy in self.member(node).proxies:
            proxy.state.delay_s = 0.0
