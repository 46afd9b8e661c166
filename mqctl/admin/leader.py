"""``mqctl leader``: a raft group's leadership (replication.mode = "dledger")."""

from __future__ import annotations

import time
from typing import Annotated

import trio
import typer

from core.errors import RemotingError
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from mqctl.common import probe
from mqctl.common.context import config_path, load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows
from mqctl.nodes.leadership import group_infos, leader_of

leader_app = typer.Typer(help="A raft group's leader (replication.mode = \"dledger\").", no_args_is_help=True)

TRANSFER_WAIT_S = 10.0


@leader_app.command("transfer")
def transfer(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="The member to lead, e.g. broker-a-2.")],
    wait_s: Annotated[float, typer.Option("--wait", help="Seconds to wait for it to take writes.")] = TRANSFER_WAIT_S,
    as_json: JsonOutput = False,
) -> None:
    """Hand a raft group's leadership to NODE.

    Hand a raft group's leadership to NODE once it holds every entry, and wait until it
    takes writes."""
    config = load(ctx)
    if config.replication.mode != "dledger":
        raise CliError(f"replication.mode is {config.replication.mode!r}: only dledger groups elect leaders")
    target = config.broker_node(node)
    if target is None:
        raise CliError(f"no broker node {node!r} in {config_path(ctx)}")
    started = time.monotonic()
    infos = group_infos(config, target.name)
    current = leader_of(infos)
    if current is None:
        raise CliError(f"group {target.name} has no leader right now (an election is running or a majority is down)")
    if current != node:
        leader_node = config.broker_node(current)
        assert leader_node is not None
        cmd = RemotingCommand(code=RequestCode.TRANSFER_LEADERSHIP, ext_fields={"target": node})
        try:
            resp = trio.run(lambda: probe.call(leader_node.listen, cmd, credentials=config.acl.credentials()))
        except RemotingError as exc:
            raise CliError(f"leader {current} did not answer: {exc}") from exc
        if resp.code != ResponseCode.SUCCESS:
            raise CliError(resp.remark or f"leader {current} refused with code {resp.code}")
        while leader_of(group_infos(config, target.name)) != node:
            if time.monotonic() - started > wait_s:
                raise CliError(f"{node} did not take the lead within {wait_s:g} s (see mqctl status)")
            time.sleep(0.05)
    info = (group_infos(config, target.name).get(node) or {})
    print_rows([{"group": target.name, "leader": node, "previous": current, "term": info.get("raftTerm"),
                 "seconds": round(time.monotonic() - started, 3)}],
               ("group", "leader", "previous", "term", "seconds"), as_json=as_json)
