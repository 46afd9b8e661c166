"""A drill cluster whose nodes are hosts of a lab (mqctl/hosts/lab.py): a network namespace
per node on a bridge, the drill itself and its clients on the lab's client host, faults made by
the kernel (mqctl/hosts/faults.py).

```
 lab N (10.231.N.0/24)   .2 client host: the drill, its worker processes
                         .10 name server   .11 .12 (.13) broker-a members   .20 proxy (4.x + gRPC doors)
                         controller mode: .10 .30 .31 name servers, the controller group of three
```

| kind | made by |
|---|---|
| partition | nftables in the member's namespace: nothing in or out but its loopback |
| one-way | nftables: the member's packets to every other host dropped (it still hears them) |
| split | nftables: the member and the other members no longer reach each other; the name server, proxy and clients reach both sides (the old leader keeps its clients and loses its quorum) |
| bridge | nftables: the other members no longer reach each other, the member still reaches both (Jepsen's bridge) |
| loss | nftables ``numgen random``: LOSS_PERCENT % of the member's packets dropped, both ways |
| rate | tc tbf on the member's link: RATE_KBIT kbit/s out |
| delay | the kernel here has no netem: a fault proxy process in the member's namespace fronts both its ports (advertised to everyone), and holds every chunk DELAY_MS |
| kill, pause, disk-full | as on loopback: SIGKILL and restart, SIGSTOP and SIGCONT, a tmpfs filled |
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from core.addresses import split_address
from mqctl.chaos.cluster import DELAY_MS, GROUP, MEMBERS, DrillCluster, Member, drill_nodes, drill_settings
from mqctl.hosts.faults import Faults
from mqctl.hosts.lab import Lab
from mqctl.hosts.placement import CLIENT_HOST, CLIENT_OCTET

LOSS_PERCENT = 10
RATE_KBIT = 1000
NAMESRV_OCTET, PROXY_OCTET = 10, 20
CONTROLLER_NAMESRV_OCTETS = (10, 30, 31)  # controller mode: three name servers, the controller group


def namesrv_octets(mode: str) -> tuple[int, ...]:
    return CONTROLLER_NAMESRV_OCTETS if mode == "controller" else (NAMESRV_OCTET,)
BROKER_PORT, NAMESRV_PORT, PROXY_PORT, GRPC_PORT = 10911, 9876, 8081, 8091
DELAY_PORT_STEP = 10  # a delay proxy listens 10 ports above what it fronts


def lab_hosts(mode: str) -> list[tuple[str, int]]:
    """(host name, octet) of a drill's lab: the client host, then one a node."""
    octets = [*namesrv_octets(mode), *(11 + i for i in range(MEMBERS[mode])), PROXY_OCTET]
    return [(CLIENT_HOST, CLIENT_OCTET), *((f"h{o}", o) for o in octets)]


def write_lab_config(directory: Path, mode: str, number: int, delayed: bool) -> tuple[Path, list[Member]]:
    """The drill's conf.toml for lab ``number``; ``delayed``: members advertise their delay
    proxies' ports."""
    net = f"10.231.{number}"
    members = []
    for i in range(MEMBERS[mode]):
        host = f"{net}.{11 + i}"
        step = DELAY_PORT_STEP if delayed else 0
        members.append(Member(f"{GROUP}-{i}", host, f"{host}:{BROKER_PORT}", f"{host}:{BROKER_PORT + step}",
                              f"{host}:{BROKER_PORT + 1 + step}"))
    path = directory / "conf.toml"
    text = drill_settings(mode, f"one broker group, a host each in lab {number}").replace(
        'data_dir = "data"\n', f'data_dir = "data"\nlab = {number}\n')
    namesrvs = [(f"{net}.{o}:{NAMESRV_PORT}",) * 2 for o in namesrv_octets(mode)]
    path.write_text(text + drill_nodes(namesrvs, members, f"{net}.{PROXY_OCTET}:{PROXY_PORT}",
                                       f"{net}.{PROXY_OCTET}:{GRPC_PORT}"))
    return path, members


class LabCluster(DrillCluster):
    kinds = ("kill", "pause", "partition", "one-way", "split", "bridge", "loss", "rate", "disk-full", "delay")
    where = "in network namespaces, faults by nftables and tc (delay: fault proxies in the namespaces)"

    def __init__(self, directory: Path, mode: str, lab: Lab, delayed: bool) -> None:
        super().__init__(mode, *write_lab_config(directory, mode, lab.number, delayed))
        self.lab = lab
        self.faults = Faults(lab)
        self.delayed = delayed
        self._delay_proxies: dict[str, list[subprocess.Popen[str]]] = {}
        self.where = f"lab {lab.number}: " + self.where

    def host_of(self, node: str) -> str:
        return f"h{self.member(node).host.rsplit('.', 1)[1]}"

    def start(self) -> None:
        if self.delayed:
            for m in self.members:
                self._start_delay_proxies(m)
        super().start()

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            for procs in self._delay_proxies.values():
                for p in procs:
                    p.kill()
                    p.wait()
            self.faults.heal()

    def actions(self) -> dict[str, tuple[Callable[[str], None], Callable[[str], None]]]:
        def heal(node: str) -> None:
            self.faults.heal()

        return {**super().actions(),
                "partition": (lambda n: self.faults.isolate(self.host_of(n)), heal),
                "one-way": (self.speak_no_more, heal),
                "split": (self.split_off, heal),
                "bridge": (self.bridge, heal),
                "loss": (lambda n: self.faults.loss(self.host_of(n), LOSS_PERCENT), heal),
                "rate": (lambda n: self.faults.rate(self.host_of(n), RATE_KBIT), heal),
                "delay": (lambda n: self._tell_delay(n, DELAY_MS), lambda n: self._tell_delay(n, 0))}

    def speak_no_more(self, node: str) -> None:
        target = self.host_of(node)
        for other in self.lab.hosts:
            if other != target:
                self.faults.partition(target, other, one_way=True)

    def _others(self, node: str) -> list[str]:
        return [self.host_of(m.node) for m in self.members if m.node != node]

    def _bystanders(self) -> set[str]:
        """Hosts not a member of the group: the name server's, the proxy's, the client host."""
        members = {self.host_of(m.node) for m in self.members}
        return {h for h in self.lab.hosts if h not in members}

    def split_off(self, node: str) -> None:
        """The member on one side, the other members on the other; the rest reach both."""
        rest = self._bystanders()
        self.faults.split([{self.host_of(node), *rest}, {*self._others(node), *rest}])

    def bridge(self, node: str) -> None:
        """The other members lose each other; ``node`` and the rest reach both."""
        rest = self._bystanders() | {self.host_of(node)}
        sides = [{h, *rest} for h in self._others(node)]
        self.faults.split(sides)

    def _start_delay_proxies(self, m: Member) -> None:
        host = self.host_of(m.node)
        ip, port = split_address(m.listen)
        procs = []
        for upstream_port in (port, port + 1):
            listen = f"{ip}:{upstream_port + DELAY_PORT_STEP}"
            argv = self.lab.command(host, [sys.executable, "-m", "mqctl.chaos.fault_proxy", listen,
                                           f"{ip}:{upstream_port}"])
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            if not proc.stdout.readline().startswith("listening"):
                raise RuntimeError(f"the delay proxy {listen} of {m.node} did not start")
            procs.append(proc)
        self._delay_proxies[m.node] = procs

    def _tell_delay(self, node: str, ms: int) -> None:
        for proc in self._delay_proxies.get(node, []):
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"delay {ms}\n")
            proc.stdin.flush()
            proc.stdout.readline()
