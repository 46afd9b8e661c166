"""``mqctl start | stop | restart | status``: the local cluster's processes."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Annotated, Any

import trio
import typer

from core.addresses import split_address
from core.config import Config
from core.node_specs import BrokerNode
from core.store.message_store import holds_unsealed_raft
from mqctl.common import probe
from mqctl.common.context import load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows
from mqctl.common.progress import progress_bar
from mqctl.hosts.placement import lab_number, stop_lab
from mqctl.nodes import controller_ops, replication_view, rolling
from mqctl.nodes.leadership import group_infos, leader_of
from mqctl.nodes.port_holders import held_port, listener_of
from mqctl.nodes.processes import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    NodeSpec,
    nodes_of,
    running_pid,
    spawn,
    stop,
    tail_of_log,
    wait_exited,
)
from plugins.ha_dledger import raft_message_store
from replication.dledger.seal import SealError, seal_group

NodeNames = Annotated[list[str] | None, typer.Argument(help="Nodes to act on (default: all).")]


def _wait_serving(config: Config, spec: NodeSpec, pid: int, deadline: float) -> None:
    """Wait until the process ``pid`` serves ``spec``: an answer on its port is not enough, the
    listener must be that process (another cluster on the same port answers too)."""
    host, port = split_address(spec.listen)
    while time.monotonic() < deadline:
        if wait_exited(pid, 0):
            raise CliError(f"{spec.name} exited while starting; its log ends with:\n{tail_of_log(config, spec.name)}")
        if trio.run(probe.serves, spec.listen):
            holder = listener_of(host, port)
            if holder is None or holder.pid in (pid, None):
                return
            raise CliError(f"{spec.name}: {spec.listen} is answered by {holder.shown()}, not by the node "
                           f"started (pid {pid})")
        time.sleep(0.1)
    raise CliError(f"{spec.name} did not serve on {spec.listen} within the timeout; its log ends with:\n"
                   f"{tail_of_log(config, spec.name)}")


def _wait_registered(config: Config, brokers: list[NodeSpec], deadline: float) -> None:
    if not config.nameservers or not brokers:
        return
    want = {b.registered for b in brokers}
    while time.monotonic() < deadline:
        info = trio.run(probe.cluster_info, config.namesrv_addresses)
        if info is not None:
            seen = {addr for data in info.get("brokerAddrTable", {}).values()
                    for addr in data.get("brokerAddrs", {}).values()}
            if want <= seen:
                return
        time.sleep(0.1)
    raise CliError("brokers serve but did not register with the name servers in time")


def start(ctx: typer.Context, nodes: NodeNames = None,
          timeout: Annotated[float, typer.Option(help="Seconds to wait for the nodes to serve.")] = START_TIMEOUT_S,
          as_json: JsonOutput = False) -> None:
    """Start the config's nodes in the background; returns once all of them serve."""
    config = load(ctx)
    if (warning := controller_warning(config)) is not None:
        typer.echo(f"warning: {warning}", err=True)
    rows = start_nodes(config, nodes_of(config, nodes), time.monotonic() + timeout)
    print_rows(rows, ("node", "address", "pid", "state"), as_json=as_json)


def controller_warning(config: Config) -> str | None:
    """Why the config's controller group cannot survive the loss of a name server, if so."""
    count = len(config.nameservers)
    if not config.replication.controller or count >= 3:
        return None
    if count == 1:
        return ("replication.controller with one name server: the controller is a single point of failure "
                "(fine on a laptop); run three name servers to survive the loss of one")
    return ("replication.controller with two name servers is worse than one: the controller needs both to "
            "elect a master (a majority of two), so losing either stops failovers; run three")


def start_nodes(config: Config, specs: list[NodeSpec], deadline: float) -> list[dict[str, object]]:
    """Start those of ``specs`` not running (name servers first) and wait until they serve and
    the brokers registered with the name servers; a row per node (what ``mqctl start`` prints).
    Nothing starts when a port they need is held; when one fails, those this call started are
    stopped again."""
    rows: list[dict[str, object]] = []
    running = {s.name: pid for s in specs if (pid := running_pid(config, s.name)) is not None}
    if lab_number(config) is None:  # a lab's hosts are namespaces of their own: nothing holds their ports
        check_ports_free(config, [s for s in specs if s.name not in running])
    spawned: list[NodeSpec] = []
    try:
        for kind in ("nameserver", "broker", "proxy"):
            started = []
            for spec in (s for s in specs if s.kind == kind):
                if spec.name in running:
                    rows.append({"node": spec.name, "address": spec.listen, "pid": running[spec.name],
                                 "state": "already running"})
                    continue
                started.append((spec, spawn(config, spec)))
                spawned.append(spec)
            for spec, pid in started:
                _wait_serving(config, spec, pid, deadline)
                rows.append({"node": spec.name, "address": spec.listen, "pid": pid, "state": "started"})
            if kind == "broker":
                _wait_registered(config, [s for s, _ in started], deadline)
                if config.replication.mode == "dledger" and started:
                    _wait_raft_leaders(config, deadline)
                if config.replication.controller and started:
                    _wait_controller_masters(config, deadline)
    except CliError:
        for spec in reversed(spawned):  # leave nothing half-started
            with contextlib.suppress(CliError):
                stop(config, spec, force=False)
        raise
    return rows


def check_ports_free(config: Config, specs: list[NodeSpec]) -> None:
    """Every port the nodes will listen on (a broker's HA port, a proxy's doors too) is free;
    else one error naming the node, the port and, where it can be seen, the process holding it."""
    for spec in specs:
        held = held_port(config.listens_of(spec.name))
        if held is not None:
            raise CliError(f"{spec.name} cannot start: {held}")


def _wait_raft_leaders(config: Config, deadline: float) -> None:
    """Wait until every raft group with a majority running has a leader taking writes (so a
    send right after `mqctl start` finds a master)."""
    groups = {b.name: [m for m in config.brokers if m.name == b.name] for b in config.brokers}
    for name, members in groups.items():
        running = [m for m in members if running_pid(config, m.node) is not None]
        if 2 * len(running) <= len(members):
            continue  # no majority: no leader to wait for
        while leader_of(group_infos(config, name)) is None:
            if time.monotonic() > deadline:
                raise CliError(f"raft group {name} elected no leader in time (see mqctl status and the logs)")
            time.sleep(0.05)


def _wait_controller_masters(config: Config, deadline: float) -> None:
    """Wait until every broker group with a broker running has the master its controller named
    (so a send right after `mqctl start` finds one)."""
    for name in config.broker_groups:
        if not any(running_pid(config, b.node) is not None for b in config.brokers if b.name == name):
            continue
        while replication_view.controller_master(group_infos(config, name)) is None:
            if time.monotonic() > deadline:
                raise CliError(f"the controller named no master of {name} in time (see mqctl status and the "
                               "name servers' logs)")
            time.sleep(0.05)


def stop_cmd(ctx: typer.Context, nodes: NodeNames = None,
             force: Annotated[bool, typer.Option("--force", help="SIGKILL instead of a graceful stop.")] = False,
             timeout: Annotated[float, typer.Option(help="Seconds to wait for each node.")] = STOP_TIMEOUT_S,
             as_json: JsonOutput = False) -> None:
    """Stop nodes: proxies, then brokers, then name servers.

    Stop nodes: proxies first, then brokers (they flush and unregister), then name servers."""
    config = load(ctx)
    rows = []
    for spec in reversed(nodes_of(config, nodes)):
        rows.append({"node": spec.name, "state": stop(config, spec, force=force, timeout_s=timeout)})
    if not nodes and lab_number(config) is not None and stop_lab(config):
        rows.append({"node": f"lab {lab_number(config)}", "state": "deleted"})
    print_rows(rows, ("node", "state"), as_json=as_json)


def _restart_one(config: Config, spec: NodeSpec, timeout_s: float) -> dict[str, Any]:
    """Stop ``spec`` (when it runs) and start it again; returns when it serves (and, for a
    broker, has registered) within ``timeout_s`` of its start."""
    was = stop(config, spec, force=False)
    deadline = time.monotonic() + timeout_s
    pid = spawn(config, spec)
    _wait_serving(config, spec, pid, deadline)
    if spec.kind == "broker":
        _wait_registered(config, [spec], deadline)
    return {"pid": pid, "state": "started" if was == "not running" else "restarted"}


def restart(ctx: typer.Context, nodes: NodeNames = None,
            timeout: Annotated[float, typer.Option(help="Seconds each node may take to serve again and, for a "
                                                   "slave, to catch up with its master.")] = START_TIMEOUT_S,
            as_json: JsonOutput = False) -> None:
    """Rolling restart, one node at a time, slaves before their master.

    Rolling restart, one node at a time: name servers first (then the brokers register with
    them again), then per broker group its slaves, each waited for until its master has it
    connected and caught up, then its master. A node that was not running is started."""
    config = load(ctx)
    if config.replication.mode == "dledger" and _switch_to_raft(config, timeout, as_json):
        return
    if config.replication.mode != "dledger" and _switch_from_raft(config, timeout, as_json):
        return
    order = rolling.restart_order(config, nodes_of(config, nodes))
    if config.replication.controller:
        _restart_under_controller(config, order, timeout, as_json)
        return
    waits_for_slaves = rolling.is_master_slave(config)
    width = max((len(s.name) for s in order), default=0)

    def progress(spec: NodeSpec, message: str) -> None:
        if not as_json:
            typer.echo(f"{spec.name.ljust(width)}  {message}")

    with progress_bar("rolling restart", len(order), quiet=as_json) as bar:  # the lines print above it
        for spec in order:
            broker = config.broker_node(spec.name)
            role = spec.kind if broker is None else ("master" if broker.is_master else "slave")
            row: dict[str, Any] = {"node": spec.name, "role": role, "address": spec.listen}
            if broker is not None and role == "master" and waits_for_slaves:
                ready = rolling.wait_slaves_caught_up(config, broker, time.monotonic() + timeout)
                if ready:
                    progress(spec, f"slaves caught up: {', '.join(ready)}")
            progress(spec, "stopping" if running_pid(config, spec.name) is not None else "not running: starting")
            row |= _restart_one(config, spec, timeout)
            progress(spec, f"{row['state']} (pid {row['pid']})")
            after: dict[str, Any] = {}
            if spec.kind == "proxy":
                pass  # a proxy keeps no state: serving again is all
            elif broker is None:
                # brokers come back on their next registration: allow one interval beyond the timeout
                after = rolling.wait_brokers_registered(
                    config, spec, time.monotonic() + timeout + config.broker.register_interval_ms / 1000)
            elif config.replication.mode == "dledger":
                after = rolling.wait_raft_caught_up(config, broker, time.monotonic() + timeout)
            elif waits_for_slaves and role == "slave":
                after = rolling.wait_caught_up(config, broker, time.monotonic() + timeout)
            elif waits_for_slaves and rolling.slaves_of(config, broker):
                after = rolling.wait_slaves_connected(config, broker, time.monotonic() + timeout)
            if after:
                progress(spec, after["note"])
            row |= after
            if as_json:
                typer.echo(json.dumps(row))
            bar.advance()


def _restart_under_controller(config: Config, order: list[NodeSpec], timeout_s: float, as_json: bool) -> None:
    """The rolling restart of a cluster in controller mode: name servers (controller members)
    one at a time, then per group the brokers that are slaves now, each back in the
    SyncStateSet before the next goes, then the master: first handed over to an in-sync slave
    (a planned switchover: no acknowledged message lost, no send refused through a proxy), then
    restarted as a slave of the new one."""
    width = max((len(s.name) for s in order), default=0)
    masters = {group: controller_ops.current_master(config, group) for group in config.broker_groups}
    order = ([s for s in order if s.kind == "nameserver"]
             + [s for s in order if s.kind == "broker" and s.name not in masters.values()]
             + [s for s in order if s.kind == "broker" and s.name in masters.values()]
             + [s for s in order if s.kind == "proxy"])
    with progress_bar("rolling restart", len(order), quiet=as_json) as bar:
        for spec in order:
            broker = config.broker_node(spec.name)
            role = spec.kind if broker is None else ("master" if spec.name in masters.values() else "slave")
            row: dict[str, Any] = {"node": spec.name, "role": role, "address": spec.listen}

            def progress(message: str, spec: NodeSpec = spec) -> None:
                if not as_json:
                    typer.echo(f"{spec.name.ljust(width)}  {message}")
            if broker is not None and controller_ops.current_master(config, broker.name) == spec.name:
                node, _, epoch = controller_ops.hand_over(config, broker.name, None, timeout_s)
                progress(f"handed over to {node} (epoch {epoch})")
            progress("stopping" if running_pid(config, spec.name) is not None else "not running: starting")
            row |= _restart_one(config, spec, timeout_s)
            progress(f"{row['state']} (pid {row['pid']})")
            after: dict[str, Any] = {}
            if spec.kind == "nameserver":
                after = rolling.wait_brokers_registered(
                    config, spec, time.monotonic() + timeout_s + config.broker.register_interval_ms / 1000)
            elif broker is not None:
                after = controller_ops.wait_in_sync(config, broker, time.monotonic() + timeout_s)
            if after:
                progress(after["note"])
            row |= after
            if as_json:
                typer.echo(json.dumps(row))
            bar.advance()


def _switch_to_raft(config: Config, timeout_s: float, as_json: bool) -> bool:
    """`mqctl restart` after `config set replication.mode dledger` while groups still run
    master-slave: each such group stops as a whole and starts as raft members (see
    rolling.stop_group_for_raft). False when no group needs it (a rolling restart follows)."""
    groups = [b for b in config.brokers if b.is_master
              and rolling.running_engine(config, [m for m in config.brokers if m.name == b.name]) in ("async", "sync")]
    progress = _progress_printer(as_json)

    for master in groups:
        deadline = time.monotonic() + timeout_s
        rolling.stop_group_for_raft(config, master, deadline, progress)
        members = [m.node for m in config.brokers if m.name == master.name]
        for row in start_nodes(config, nodes_of(config, members), deadline):
            progress(config.broker_node(str(row["node"])) or master, f"{row['state']} as a raft member (pid {row['pid']})")
    return bool(groups)


def _switch_from_raft(config: Config, timeout_s: float, as_json: bool) -> bool:
    """`mqctl restart` after `config set replication.mode async|sync` while stores hold raft
    entries: each such group stops as a whole, its stores are sealed (replication.dledger.seal:
    every member keeps the log raft would keep), and it starts as a master and its slaves.
    False when no store needs it (a rolling restart follows)."""
    groups = sorted({b.name for b in config.brokers if holds_unsealed_raft(config.data_dir / b.node)})
    progress = _progress_printer(as_json)
    for group in groups:
        deadline = time.monotonic() + timeout_s
        members = [b for b in config.brokers if b.name == group]
        rolling.stop_group_leaving_raft(config, group, progress)
        try:
            sealed = seal_group([config.data_dir / m.node for m in members], config.store, raft_message_store)
        except SealError as exc:
            raise CliError(f"broker group {group} cannot leave raft: {exc}") from None
        for m in sealed:
            node = config.broker_node(m.root.name) or members[0]
            progress(node, f"sealed: raft log kept through entry {m.last_index} "
                           f"({m.cut} cut, {m.copied} copied); CommitLog continues at {m.floor}")
        for row in start_nodes(config, nodes_of(config, [m.node for m in members]), deadline):
            node = config.broker_node(str(row["node"])) or members[0]
            progress(node, f"{row['state']} as {'master' if node.is_master else 'slave'} (pid {row['pid']})")
        master = next((m for m in members if m.is_master), None)
        if master is not None and rolling.slaves_of(config, master):
            progress(master, rolling.wait_slaves_connected(config, master, deadline)["note"])
    return bool(groups)


def _progress_printer(as_json: bool) -> Callable[[BrokerNode, str], None]:
    def progress(node: BrokerNode, message: str) -> None:
        if as_json:
            typer.echo(json.dumps({"node": node.node, "note": message}))
        else:
            typer.echo(f"{node.node}  {message}")
    return progress


def status(ctx: typer.Context, as_json: JsonOutput = False) -> None:
    """Each node's role, address, pid and offsets; replication lag per slave.

    Each node: role, address, pid, whether it serves, its CommitLog max offset; with
    replication, per master its mode and connected slaves, per slave whether its master has it
    connected, the offset acknowledged and the lag in bytes and seconds."""
    config = load(ctx)
    specs = nodes_of(config)
    pids = {s.name: running_pid(config, s.name) for s in specs}
    alive = {s.name: pids[s.name] is not None and trio.run(probe.serves, s.listen) for s in specs}
    brokers = {s.name: s.listen for s in specs if s.kind == "broker" and alive[s.name]}
    infos = trio.run(lambda: probe.runtime_infos(brokers, credentials=config.acl.credentials()))
    mode = config.replication.mode
    raft = mode == "dledger"
    rows = []
    for spec in specs:
        info = infos.get(spec.name)
        row: dict[str, Any] = {"node": spec.name, "role": spec.kind, "address": spec.listen,
                               "pid": pids[spec.name], "alive": alive[spec.name], "max_offset": None}
        broker = config.broker_node(spec.name)
        if broker is None:  # a name server or a proxy: serving or not
            row |= replication_view.nameserver_fields(alive[spec.name])
        elif raft:  # the members elect their master: role, term, leader, indexes
            group = [infos.get(b.node) for b in config.brokers if b.name == broker.name]
            row |= {"role": "member", "max_offset": _max_offset(info)}
            row |= replication_view.raft_fields(info, replication_view.raft_leader_info(group),
                                                alive=alive[spec.name])
        elif config.replication.controller:  # the controller names the master: as each says
            members = {b.node: infos.get(b.node) for b in config.brokers if b.name == broker.name}
            elected = replication_view.controller_master(members)
            if elected == spec.name:
                row |= {"role": "master", "max_offset": _max_offset(info)}
                row |= replication_view.master_fields(info, alive=alive[spec.name], mode_configured=mode,
                                                      slaves_configured=len(members) - 1)
            else:
                row |= {"role": "slave", "max_offset": _max_offset(info)}
                row |= replication_view.slave_fields(info, None if elected is None else members[elected],
                                                     alive=alive[spec.name], mode_configured=mode)
            row |= replication_view.controller_fields(info)
        elif broker.is_master:
            row |= {"role": "master", "max_offset": _max_offset(info)}
            row |= replication_view.master_fields(info, alive=alive[spec.name], mode_configured=mode,
                                                  slaves_configured=len(rolling.slaves_of(config, broker)))
        else:
            master = rolling.master_of(config, broker)
            row |= {"role": "slave", "max_offset": _max_offset(info)}
            row |= replication_view.slave_fields(info, None if master is None else infos.get(master.node),
                                                 alive=alive[spec.name], mode_configured=mode)
        rows.append(row)
    columns: tuple[str, ...] = ("node", "role", "address", "pid", "alive", "max_offset")
    extra = replication_view.RAFT_FIELDS if raft else replication_view.FIELDS
    rows = [{k: r.get(k) for k in columns + extra} for r in rows]
    if as_json:
        print_rows(rows, columns + extra, as_json=True)
    elif raft or any(not b.is_master for b in config.brokers):  # replication columns only where there is some
        shown = replication_view.RAFT_COLUMNS if raft else (
            replication_view.CONTROLLER_COLUMNS if config.replication.controller else replication_view.COLUMNS)
        print_rows([replication_view.table_cells(r) for r in rows], columns + shown, as_json=False)
    else:
        print_rows(rows, columns, as_json=False)


def _max_offset(info: dict[str, str] | None) -> int | None:
    return int(info.get("commitLogMaxOffset", 0)) if info is not None else None
