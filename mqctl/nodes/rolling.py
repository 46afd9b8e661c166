"""``mqctl restart`` as a rolling restart: the order nodes go in and the waits between them.

Name servers go first (brokers register with them), then each broker group: its slaves, then
its master. A restarted slave must be back on its master with nothing left to copy before the
next node goes down, and a master goes down only while its running slaves are caught up, so
consumers that fail over to a slave meanwhile find every message there. Each wait has a
deadline; missing it stops the restart with a clear error, before any master goes down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from core.config import Config
from core.node_specs import BrokerNode
from core.store.checkpoint import read_checkpoint
from mqctl.common import probe
from mqctl.common.errors import CliError
from mqctl.nodes.leadership import caught_up_with_leader, group_infos, leader_of
from mqctl.nodes.processes import NodeSpec, nodes_of, running_pid, stop
from mqctl.nodes.replication_view import RuntimeInfo, caught_up, link_of, refused

POLL_S = 0.1
MASTER_SLAVE_MODES = ("async", "sync")


def restart_order(config: Config, specs: list[NodeSpec]) -> list[NodeSpec]:
    """``specs`` in the order to restart them: name servers, then per broker group (in config
    order) its slaves by id, then its master, then the proxies."""
    by_name = {s.name: s for s in specs}
    order = [s for s in specs if s.kind == "nameserver"]
    for group in dict.fromkeys(b.name for b in config.brokers):
        members = sorted((b for b in config.brokers if b.name == group), key=lambda b: (b.is_master, b.id))
        order += [by_name[b.node] for b in members if b.node in by_name]
    return order + [s for s in specs if s.kind == "proxy"]


def is_master_slave(config: Config) -> bool:
    """Whether the groups replicate master to slave (the waits here read that engine's links)."""
    return config.replication.mode in MASTER_SLAVE_MODES


def master_of(config: Config, slave: BrokerNode) -> BrokerNode | None:
    return next((b for b in config.brokers if b.name == slave.name and b.is_master), None)


def slaves_of(config: Config, master: BrokerNode) -> list[BrokerNode]:
    return [b for b in config.brokers if b.name == master.name and not b.is_master]


def _info(config: Config, node: BrokerNode) -> RuntimeInfo | None:
    return trio.run(lambda: probe.runtime_info(node.listen, credentials=config.acl.credentials()))


def _poll(deadline: float, check: Callable[[], Any], timed_out: Callable[[], str]) -> Any:
    """``check()``'s first truthy answer, polled until ``deadline``; then a CliError."""
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            raise CliError(timed_out())
        time.sleep(POLL_S)


def _refusal(config: Config, slave: BrokerNode, info: RuntimeInfo | None) -> CliError | None:
    reason = refused(info)
    if reason is None:
        return None
    return CliError(f"{slave.node} has stopped replicating: {reason}. Stopping the restart here. To copy the master afresh: mqctl stop {slave.node}, delete "
                    f"{config.data_dir / slave.node}, mqctl start {slave.node}; or stop it and restart without it")


def wait_caught_up(config: Config, slave: BrokerNode, deadline: float) -> dict[str, Any]:
    """Wait until ``slave``'s master lists it connected with lag 0, or the master is not running.
    Returns what was seen: ``note`` for the operator and ``acked_offset``."""
    master = master_of(config, slave)
    if master is None:
        return {"note": "no master configured", "acked_offset": None}
    seen: dict[str, Any] = {"lag": "not connected"}

    def check() -> dict[str, Any] | None:
        if running_pid(config, master.node) is None:
            return {"note": f"{master.node} is not running: nothing to catch up with", "acked_offset": None}
        slave_info, master_info = _info(config, slave), _info(config, master)
        error = _refusal(config, slave, slave_info)
        if error is not None:
            raise error
        link = caught_up(slave_info, master_info)
        if link is not None:
            return {"note": f"caught up with {master.node} at offset {link.ack_offset}", "acked_offset": link.ack_offset}
        linked = link_of(slave_info, master_info)
        seen["lag"] = "not connected" if linked is None else f"{linked.lag_bytes} bytes behind"
        return None

    result: dict[str, Any] = _poll(deadline, check, lambda: (
        f"{slave.node} did not catch up with its master {master.node} in time ({seen['lag']}); "
        f"not restarting further nodes, so {master.node} stays up"))
    return result


def wait_slaves_caught_up(config: Config, master: BrokerNode, deadline: float) -> list[str]:
    """Before ``master`` goes down: every running slave of its group caught up. Returns their names."""
    running = [s for s in slaves_of(config, master) if running_pid(config, s.node) is not None]
    for slave in running:
        wait_caught_up(config, slave, deadline)
    return [s.node for s in running]


def wait_slaves_connected(config: Config, master: BrokerNode, deadline: float) -> dict[str, Any]:
    """After ``master`` is back: every running slave of its group connected to it again.
    Returns ``note`` and ``slaves_connected``."""
    slaves = slaves_of(config, master)
    waiting: list[str] = []

    def check() -> dict[str, Any] | None:
        master_info = _info(config, master)
        connected = 0
        waiting.clear()
        for slave in slaves:
            if running_pid(config, slave.node) is None:
                continue
            slave_info = _info(config, slave)
            error = _refusal(config, slave, slave_info)
            if error is not None:
                raise error
            if link_of(slave_info, master_info) is None:
                waiting.append(slave.node)
            else:
                connected += 1
        if waiting:
            return None
        return {"note": f"{connected}/{len(slaves)} slave(s) connected", "slaves_connected": connected}

    result: dict[str, Any] = _poll(deadline, check, lambda: (
        f"{master.node} is back but {', '.join(waiting)} did not reconnect to it in time"))
    return result


def wait_brokers_registered(config: Config, nameserver: NodeSpec, deadline: float) -> dict[str, Any]:
    """After a name server restart: every running broker registered with it again (brokers do
    every ``broker.register_interval_ms``). Returns ``note`` and ``brokers_registered``."""
    want = {b.registered_address for b in config.brokers if running_pid(config, b.node) is not None}
    missing: set[str] = set(want)

    def check() -> dict[str, Any] | None:
        info = trio.run(probe.cluster_info, [nameserver.listen])
        seen = {addr for data in (info or {}).get("brokerAddrTable", {}).values()
                for addr in data.get("brokerAddrs", {}).values()}
        missing.clear()
        missing.update(want - seen)
        if missing:
            return None
        return {"note": f"{len(want)} broker(s) registered again", "brokers_registered": len(want)}

    result: dict[str, Any] = _poll(deadline, check, lambda: (
        f"brokers {', '.join(sorted(missing))} did not register with {nameserver.name} again in time"))
    return result


# ---------------------------------------------------------------------- raft groups


def running_engine(config: Config, members: list[BrokerNode]) -> str | None:
    """The replication mode the group's running members report (None: none answers)."""
    for member in members:
        info = _info(config, member) if running_pid(config, member.node) is not None else None
        if info and info.get("haMode"):
            return info["haMode"]
    return None


def wait_raft_caught_up(config: Config, member: BrokerNode, deadline: float) -> dict[str, Any]:
    """After a raft member restarted: its group has a leader and the member holds everything
    the leader committed. Returns ``note``."""
    def check() -> dict[str, Any] | None:
        infos = group_infos(config, member.name)
        leader = caught_up_with_leader(infos, member.node)
        if leader is None:
            return None
        return {"note": f"holds index {(infos[member.node] or {}).get('raftCommitIndex')} (leader {leader})"}

    result: dict[str, Any] = _poll(deadline, check, lambda: (
        f"{member.node} did not catch up with its group's leader in time; not restarting further nodes"))
    return result


def stop_group_for_raft(config: Config, master: BrokerNode, deadline: float,
                        progress: Callable[[BrokerNode, str], None]) -> None:
    """Stop a running master-slave group so that it can start as raft members with identical
    classic logs: its slaves caught up, the master stopped (no more writes), each slave given
    the master's last byte, then stopped (RocketMQ's upgrade to DLedger asks the same: equal
    CommitLogs before the first raft start). A rolling restart would let a member with a
    shorter log win an election and reuse queue offsets."""
    if running_pid(config, master.node) is not None:
        ready = wait_slaves_caught_up(config, master, deadline)
        progress(master, f"slaves caught up: {', '.join(ready) or 'none running'}")
        progress(master, f"stopping: {stop(config, nodes_of(config, [master.node])[0], force=False)}")
    final = read_checkpoint(config.data_dir / master.node / "checkpoint")
    end = final.commitlog_flushed_offset if final is not None else 0
    for slave in slaves_of(config, master):
        if running_pid(config, slave.node) is None:
            continue

        def holds_end(s: BrokerNode = slave) -> bool:
            return int((_info(config, s) or {}).get("commitLogMaxOffset", -1)) >= end

        def too_late(s: BrokerNode = slave) -> str:
            return (f"{s.node} did not receive the master's log up to {end} in time; start the group in its "
                    "old mode (mqctl config set replication.mode ...) and try again")

        _poll(deadline, holds_end, too_late)
        progress(slave, f"holds the master's log up to {end}; stopping: "
                        f"{stop(config, nodes_of(config, [slave.node])[0], force=False)}")


def stop_group_leaving_raft(config: Config, group: str, progress: Callable[[BrokerNode, str], None]) -> None:
    """Stop every running member of raft group ``group``, its leader first: the followers
    cannot commit anything after it (a majority of them would need a new election first,
    and they are stopped right after). Sealing then keeps the log raft would keep."""
    members = [b for b in config.brokers if b.name == group]
    leader = leader_of(group_infos(config, group))
    for member in sorted(members, key=lambda b: b.node != leader):
        if running_pid(config, member.node) is not None:
            note = "leader" if member.node == leader else "follower"
            progress(member, f"{note}, stopping: {stop(config, nodes_of(config, [member.node])[0], force=False)}")
