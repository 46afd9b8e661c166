"""``mqctl start | stop | restart | status``: the local cluster's processes."""

from __future__ import annotations

import time
from typing import Annotated

import trio
import typer

from core.config import Config
from mqctl import probe
from mqctl.context import load
from mqctl.errors import CliError
from mqctl.options import JsonOutput
from mqctl.output import print_rows
from mqctl.processes import (
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

NodeNames = Annotated[list[str] | None, typer.Argument(help="Nodes to act on (default: all).")]


def _wait_serving(config: Config, spec: NodeSpec, pid: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        if wait_exited(pid, 0):
            raise CliError(f"{spec.name} exited while starting; its log ends with:\n{tail_of_log(config, spec.name)}")
        if trio.run(probe.serves, spec.listen):
            return
        time.sleep(0.1)
    raise CliError(f"{spec.name} did not serve on {spec.listen} within the timeout; its log ends with:\n"
                   f"{tail_of_log(config, spec.name)}")


def _wait_registered(config: Config, brokers: list[NodeSpec], deadline: float) -> None:
    if not config.nameservers or not brokers:
        return
    want = {b.listen for b in brokers}
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
    specs = nodes_of(config, nodes)
    deadline = time.monotonic() + timeout
    rows = []
    for kind in ("nameserver", "broker"):
        started = []
        for spec in (s for s in specs if s.kind == kind):
            pid = running_pid(config, spec.name)
            if pid is not None:
                rows.append({"node": spec.name, "address": spec.listen, "pid": pid, "state": "already running"})
                continue
            started.append((spec, spawn(config, spec)))
        for spec, pid in started:
            _wait_serving(config, spec, pid, deadline)
            rows.append({"node": spec.name, "address": spec.listen, "pid": pid, "state": "started"})
        if kind == "broker":
            _wait_registered(config, [s for s, _ in started], deadline)
    print_rows(rows, ("node", "address", "pid", "state"), as_json=as_json)


def stop_cmd(ctx: typer.Context, nodes: NodeNames = None,
             force: Annotated[bool, typer.Option("--force", help="SIGKILL instead of a graceful stop.")] = False,
             timeout: Annotated[float, typer.Option(help="Seconds to wait for each node.")] = STOP_TIMEOUT_S,
             as_json: JsonOutput = False) -> None:
    """Stop nodes: brokers first (they flush and unregister), then name servers."""
    config = load(ctx)
    rows = []
    for spec in reversed(nodes_of(config, nodes)):
        rows.append({"node": spec.name, "state": stop(config, spec, force=force, timeout_s=timeout)})
    print_rows(rows, ("node", "state"), as_json=as_json)


def restart(ctx: typer.Context, nodes: NodeNames = None,
            timeout: Annotated[float, typer.Option(help="Seconds to wait for the nodes to serve.")] = START_TIMEOUT_S,
            as_json: JsonOutput = False) -> None:
    """Stop then start nodes one at a time: name servers first (brokers register with them
    when they start), then brokers."""
    config = load(ctx)
    for spec in nodes_of(config, nodes):
        stop(config, spec, force=False)
        start(ctx, [spec.name], timeout=timeout, as_json=as_json)


def status(ctx: typer.Context, as_json: JsonOutput = False) -> None:
    """Each node: role, address, pid, whether it serves, its CommitLog max offset."""
    config = load(ctx)
    rows = []
    for spec in nodes_of(config):
        pid = running_pid(config, spec.name)
        serving = pid is not None and trio.run(probe.serves, spec.listen)
        row = {"node": spec.name, "role": spec.kind, "address": spec.listen, "pid": pid,
               "alive": serving, "max_offset": None}
        if spec.kind == "broker":
            broker = config.broker_node(spec.name)
            row["role"] = "master" if broker is not None and broker.id == 0 else "slave"
            if serving:
                info = trio.run(probe.runtime_info, spec.listen)
                if info is not None:
                    row["max_offset"] = int(info.get("commitLogMaxOffset", 0))
        rows.append(row)
    print_rows(rows, ("node", "role", "address", "pid", "alive", "max_offset"), as_json=as_json)
