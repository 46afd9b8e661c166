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

from core.config import BrokerNode, Config
from mqctl import probe
from mqctl.errors import CliError
from mqctl.processes import NodeSpec, running_pid
from mqctl.replication_view import RuntimeInfo, caught_up, link_of, refused

POLL_S = 0.1
MASTER_SLAVE_MODES = ("async", "sync")


def restart_order(config: Config, specs: list[NodeSpec]) -> list[NodeSpec]:
    """``specs`` in the order to restart them: name servers, then per broker group (in config
    order) its slaves by id, then its master."""
    by_name = {s.name: s for s in specs}
    order = [s for s in specs if s.kind == "nameserver"]
    for group in dict.fromkeys(b.name for b in config.brokers):
        members = sorted((b for b in config.brokers if b.name == group), key=lambda b: (b.is_master, b.id))
        order += [by_name[b.node] for b in members if b.node in by_name]
    return order


def is_master_slave(config: Config) -> bool:
    """Whether the groups replicate master to slave (the waits here read that engine's links)."""
    return config.replication.mode in MASTER_SLAVE_MODES


def master_of(config: Config, slave: BrokerNode) -> BrokerNode | None:
    return next((b for b in config.brokers if b.name == slave.name and b.is_master), None)


def slaves_of(config: Config, master: BrokerNode) -> list[BrokerNode]:
    return [b for b in config.brokers if b.name == master.name and not b.is_master]


def _info(node: BrokerNode) -> RuntimeInfo | None:
    return trio.run(probe.runtime_info, node.listen)


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
        slave_info, master_info = _info(slave), _info(master)
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
        master_info = _info(master)
        connected = 0
        waiting.clear()
        for slave in slaves:
            if running_pid(config, slave.node) is None:
                continue
            slave_info = _info(slave)
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
    want = {b.listen for b in config.brokers if running_pid(config, b.node) is not None}
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
