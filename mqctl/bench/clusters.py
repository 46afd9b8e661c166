"""Throwaway local clusters for benchmarks: a conf.toml on free loopback ports in a directory
of its own, started and stopped as ``mqctl start | stop`` do, and the questions a replication
benchmark asks them (is the slave linked, has it caught up)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trio

from core.config import Config, load_config
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from mqctl.common import probe
from mqctl.common.errors import CliError
from mqctl.nodes import replication_view
from mqctl.nodes.commands import start_nodes
from mqctl.nodes.port_holders import PortPicker
from mqctl.nodes.processes import START_TIMEOUT_S, node_cpu_seconds, nodes_of, stop
from mqctl.nodes.replication_view import SlaveLink

# one broker; a master and a slave, async; the same, sync; a raft group of three
SETUPS = ("single", "async", "sync", "dledger")
GROUP = "bench"
SEGMENT_SIZE_BYTES = 64 * 1024 * 1024  # the shipped conf.toml's
POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class BenchCluster:
    config: Config
    master: str  # a raft group's leader when it started
    slave: str | None  # None for the single broker and a raft group


def write_config(directory: Path, setup: str, *, metrics: bool = True, ports: PortPicker | None = None) -> Path:
    """``directory/conf.toml``: one name server and broker group ``bench`` (id 0; id 1 for a
    master-slave pair; ids 0-2 for a raft group) in replication mode ``setup``, data under
    ``directory``; ``metrics``: whether the nodes serve (and count) metrics; ``ports``: the
    picker of the run (else one for this config)."""
    free_port = (ports or PortPicker()).take
    if setup not in SETUPS:
        raise CliError(f"unknown setup {setup!r} (setups: {', '.join(SETUPS)})")
    ids = {"single": (0,), "dledger": (0, 1, 2)}.get(setup, (0, 1))
    nodes = "".join(f'[[brokers]]\nname = "{GROUP}"\nid = {i}\nlisten = "127.0.0.1:{free_port()}"\n\n' for i in ids)
    path = directory / "conf.toml"
    path.write_text(f"""[cluster]
name = "BenchCluster"
data_dir = "data"

[store]
segment_size_bytes = {SEGMENT_SIZE_BYTES}
index_slots = 500000
index_entries = 2000000

[replication]
mode = "{'async' if setup == 'single' else setup}"

[metrics]
enabled = {'true' if metrics else 'false'}

[[nameservers]]
name = "ns1"
listen = "127.0.0.1:{free_port()}"

{nodes}""")
    return path


@contextlib.contextmanager
def running(directory: Path, setup: str, timeout_s: float = START_TIMEOUT_S, *,
            metrics: bool = True) -> Iterator[BenchCluster]:
    """Start a ``setup`` cluster in ``directory`` (its slave linked to the master); stop every
    node afterwards, brokers first."""
    path = write_config(directory, setup, metrics=metrics)
    config = load_config(path)
    specs = nodes_of(config)
    brokers = sorted(config.brokers, key=lambda b: b.id)
    raft = setup == "dledger"
    cluster = BenchCluster(config, brokers[0].listen, brokers[1].listen if setup in ("async", "sync") else None)
    try:
        start_nodes(config, specs, time.monotonic() + timeout_s)
        if cluster.slave is not None:
            wait_slave_linked(cluster, timeout_s)
        if raft:
            cluster = BenchCluster(config, wait_leader(config, timeout_s), None)
        yield cluster
    finally:
        for spec in reversed(specs):
            try:
                stop(config, spec, force=False)
            except CliError:
                stop(config, spec, force=True)


def broker_roles(config: Config) -> dict[str, str]:
    """Each broker's role by node: "master" and "slave", or a raft group's "leader" and
    "follower1", "follower2" (as the members say now)."""
    if config.replication.mode != "dledger":
        return {b.node: "master" if b.id == 0 else "slave" for b in config.brokers}
    leaders = raft_leaders(config)
    roles, followers = {}, 0
    for broker in sorted(config.brokers, key=lambda b: b.node):
        if broker.node in leaders:
            roles[broker.node] = "leader"
        else:
            followers += 1
            roles[broker.node] = f"follower{followers}"
    return roles


def raft_leaders(config: Config) -> dict[str, str]:
    """The members that take writes now (node -> address): one, or none during an election."""
    tables = trio.run(probe.runtime_infos, {b.node: b.listen for b in config.brokers})
    return {b.node: b.listen for b in config.brokers if (tables.get(b.node) or {}).get("raftWritable") == "true"}


def broker_cpu_seconds(cluster: BenchCluster, roles: dict[str, str]) -> dict[str, float]:
    """CPU seconds (user + system) each broker has used so far, by its role in ``roles``."""
    by_node = node_cpu_seconds(cluster.config)
    return {role: by_node[node] for node, role in roles.items() if node in by_node}


def wait_leader(config: Config, timeout_s: float) -> str:
    """Until a member of the raft group takes writes; its address."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = raft_leaders(config)
        if leaders:
            return next(iter(leaders.values()))
        time.sleep(POLL_S)
    raise CliError(f"no raft leader within {timeout_s:.0f}s")


def _runtime(address: str) -> dict[str, str]:
    return trio.run(probe.runtime_info, address) or {}


def slave_links(cluster: BenchCluster) -> list[SlaveLink]:
    """The master's view of its connected slaves."""
    return replication_view.slave_links(_runtime(cluster.master))


def wait_slave_linked(cluster: BenchCluster, timeout_s: float) -> None:
    """Until the slave says it is connected and the master lists it: before that a sync send
    would be answered SLAVE_NOT_AVAILABLE at once."""
    assert cluster.slave is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _runtime(cluster.slave).get("haConnected") == "true" and slave_links(cluster):
            return
        time.sleep(POLL_S)
    raise CliError(f"the slave {cluster.slave} did not connect to its master within {timeout_s:.0f}s")


def create_topic(cluster: BenchCluster, topic: str, queues: int, timeout_s: float = 30.0) -> None:
    """``mqctl topic create``, then wait until the name server routes the topic (the broker
    registers the change in the background)."""
    assert cluster.config.source is not None
    done = subprocess.run([sys.executable, "-m", "mqctl", "--config", str(cluster.config.source), "topic", "create",
                           topic, "--queues", str(queues), "--json"],
                          check=False, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise CliError(f"mqctl topic create {topic} failed: {done.stderr.strip() or done.stdout.strip()}")
    deadline = time.monotonic() + timeout_s
    ask = RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
    while time.monotonic() < deadline:
        resp = trio.run(probe.ask_namesrv, cluster.config.namesrv_addresses, ask)
        if resp.code == ResponseCode.SUCCESS:
            return
        time.sleep(POLL_S)
    raise CliError(f"the name server did not route {topic} within {timeout_s:.0f}s")


@dataclass(frozen=True, slots=True)
class CatchUp:
    caught_up: bool
    master_offset: int
    slave_offset: int
    seconds: float  # from the call until the offsets matched (or the deadline)


def wait_caught_up(cluster: BenchCluster, timeout_s: float) -> CatchUp:
    """Until the slave's CommitLog ends where the master's does (the master's no longer grows)."""
    assert cluster.slave is not None
    start = time.monotonic()
    master = slave = -1
    while True:
        master = int(_runtime(cluster.master).get("commitLogMaxOffset", -1))
        slave = int(_runtime(cluster.slave).get("commitLogMaxOffset", -1))
        elapsed = time.monotonic() - start
        if master >= 0 and master == slave:
            return CatchUp(True, master, slave, elapsed)
        if elapsed >= timeout_s:
            return CatchUp(False, master, slave, elapsed)
        time.sleep(POLL_S)
