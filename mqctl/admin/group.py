"""``mqctl group set | list | delete | mode``: consumer groups declared on the brokers (RocketMQ's
subscription groups, ``mqadmin updateSubGroup``). ``--orderly`` is RocketMQ's
consumeMessageOrderly: the proxy's gRPC door hands a 5.x group declared so its messages in order
(a FIFO consumer group). ``mode`` is ``mqadmin setConsumeMode``: whether a group's clients that
let the broker balance their queues (QUERY_ASSIGNMENT) read a topic by PULL or by POP. Each goes
to every member of every broker group, so a slave or a raft follower that takes over knows it too."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import trio
import typer

from core.config import Config
from core.errors import RemotingError
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.topic_names import group_problem, topic_problem
from mqctl.common import probe
from mqctl.common.context import load, namesrv_addresses
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows

group_app = typer.Typer(help="Consumer groups declared on the brokers: set, list, delete, mode.",
                        no_args_is_help=True)


def _members(config: Config) -> list[tuple[str, str, str]]:
    """(broker group, broker id, address) of every broker the name servers know."""
    info = trio.run(probe.cluster_info, namesrv_addresses(config))
    if info is None:
        raise CliError("no name server answered")
    members = [(name, str(bid), addr) for name, data in sorted(info.get("brokerAddrTable", {}).items())
               for bid, addr in sorted((data.get("brokerAddrs") or {}).items())]
    if not members:
        raise CliError("the name servers know no broker")
    return members


def _to_every_member(config: Config, make: RemotingCommand) -> list[dict[str, Any]]:
    rows = []
    for name, bid, addr in _members(config):
        try:
            resp = trio.run(lambda: probe.call(addr, make, credentials=config.acl.credentials()))
            result = "ok" if resp.code == ResponseCode.SUCCESS else (resp.remark or f"code {resp.code}")
        except RemotingError as exc:
            result = f"no answer: {exc}"
        rows.append({"broker": name, "id": bid, "address": addr, "result": result})
    return rows


def group_request(group: str, orderly: bool = False) -> RemotingCommand:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP for ``group`` (bench topics sends the same)."""
    body = orjson.dumps({"groupName": group, "consumeMessageOrderly": orderly, "consumeEnable": True})
    return RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)


@group_app.command("set")
def set_group(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    orderly: Annotated[bool, typer.Option("--orderly/--concurrently",
                                          help="Consume in order (a 5.x FIFO group), or not.")] = False,
    as_json: JsonOutput = False,
) -> None:
    """Declare (or change) a consumer group on every broker."""
    if problem := group_problem(group):
        raise CliError(f"group {group!r}: {problem}")
    config = load(ctx)
    rows = _to_every_member(config, group_request(group, orderly))
    print_rows(rows, ("broker", "id", "address", "result"), as_json=as_json)
    if not any(r["result"] == "ok" for r in rows):
        raise CliError(f"no broker took group {group}")
    if any(r["result"] != "ok" for r in rows):
        typer.echo("mqctl: warning: not every broker took it; run it again when they are up", err=True)


@group_app.command("list")
def list_groups(ctx: typer.Context, as_json: JsonOutput = False) -> None:
    """The declared groups, as each broker group's first member to answer has them."""
    config = load(ctx)
    seen: dict[str, dict[str, Any]] = {}
    for name, _, addr in _members(config):
        if name in seen:
            continue
        try:
            resp = trio.run(lambda: probe.call(addr, RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
                                               credentials=config.acl.credentials()))
        except RemotingError:
            continue
        if resp.code == ResponseCode.SUCCESS:
            seen[name] = (orjson.loads(resp.body or b"{}").get("subscriptionGroupTable") or {})
    rows = [{"broker": broker, "group": g, "orderly": bool(doc.get("consumeMessageOrderly"))}
            for broker, table in sorted(seen.items()) for g, doc in sorted(table.items())]
    print_rows(rows, ("broker", "group", "orderly"), as_json=as_json)


@group_app.command("delete")
def delete_group(ctx: typer.Context, group: Annotated[str, typer.Argument(help="Consumer group.")],
                 as_json: JsonOutput = False) -> None:
    """Forget a declared group on every broker (its offsets stay)."""
    config = load(ctx)
    rows = _to_every_member(config, RemotingCommand(code=RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                                    ext_fields={"groupName": group}))
    print_rows(rows, ("broker", "id", "address", "result"), as_json=as_json)
    if not any(r["result"] == "ok" for r in rows):
        raise CliError(f"no broker took the deletion of {group}")


@group_app.command("mode")
def set_mode(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    topic: Annotated[str, typer.Argument(help="The topic the group reads.")],
    pop: Annotated[bool, typer.Option("--pop/--pull", help="Read by POP, or by PULL (the default).")] = False,
    pop_share: Annotated[int, typer.Option(min=-1, max=1000, help=(
        "With --pop: how many of the next clients' queues each client also POPs (0 or less: every "
        "client POPs every queue)."))] = -1,
    as_json: JsonOutput = False,
) -> None:
    """Set how a group's clients read a topic when the brokers balance its queues."""
    for kind, name, problem in (("group", group, group_problem(group)), ("topic", topic, topic_problem(topic))):
        if problem:
            raise CliError(f"{kind} {name!r}: {problem}")
    config = load(ctx)
    body = orjson.dumps({"topic": topic, "consumerGroup": group, "mode": "POP" if pop else "PULL",
                         "popShareQueueNum": pop_share})
    rows = _to_every_member(config, RemotingCommand(code=RequestCode.SET_MESSAGE_REQUEST_MODE, body=body))
    print_rows(rows, ("broker", "id", "address", "result"), as_json=as_json)
    if not any(r["result"] == "ok" for r in rows):
        raise CliError(f"no broker took the mode of {group} on {topic}")
