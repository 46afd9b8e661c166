"""``mqctl consumer progress | reset-offset | list``: a consumer group's lag, moving its offsets,
and its online members, asked of every master broker the name servers know."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import orjson
import trio
import typer

from core.client.route import parse_route
from core.config import Config
from core.errors import RemotingError
from core.remoting.client import RemotingClient, open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from mqctl.common import probe
from mqctl.common.context import load, namesrv_addresses
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput, parse_time
from mqctl.common.output import print_rows

consumer_app = typer.Typer(help="Consumer groups: progress, reset-offset, list.", no_args_is_help=True)

CALL_TIMEOUT_S = 5.0
TO_BEGINNING = 0  # INVOKE_BROKER_TO_RESET_OFFSET timestamps: before every message ...
TO_END = -1  # ... and the max offset of each queue
T = TypeVar("T")


def _masters(config: Config) -> dict[str, str]:
    """Broker name -> master address, from the name servers' cluster info."""
    info = trio.run(probe.cluster_info, namesrv_addresses(config))
    if info is None:
        raise CliError("no name server answered")
    masters = {name: data["brokerAddrs"]["0"] for name, data in sorted(info.get("brokerAddrTable", {}).items())
               if "0" in (data.get("brokerAddrs") or {})}
    if not masters:
        raise CliError("the name servers know no master broker")
    return masters


def _topic_masters(config: Config, topic: str) -> dict[str, str]:
    """Broker name -> master address of the brokers serving ``topic``."""
    resp = trio.run(probe.ask_namesrv, namesrv_addresses(config),
                    RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}))
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        raise CliError(f"topic {topic} does not exist (no route on the name servers)")
    if resp.code != ResponseCode.SUCCESS:
        raise CliError(resp.remark or f"no route for {topic}")
    route = parse_route(topic, resp.body)
    masters = {name: addr for name in sorted(route.brokers) if (addr := route.master(name)) is not None}
    if not masters:
        raise CliError(f"no master broker serves topic {topic}")
    return masters


def _ask_each(config: Config, masters: dict[str, str],
              make: Callable[[str], RemotingCommand]) -> dict[str, RemotingCommand | str]:
    """``make(broker name)`` sent to each master at once: its response, or why there is none."""
    async def run() -> dict[str, RemotingCommand | str]:
        answers: dict[str, RemotingCommand | str] = {}

        async def one(client: RemotingClient, name: str, addr: str) -> None:
            try:
                answers[name] = await client.invoke(addr, make(name), CALL_TIMEOUT_S)
            except RemotingError as exc:
                answers[name] = f"broker {name} ({addr}) did not answer: {exc}"

        credentials = config.acl.credentials()
        async with open_remoting_client(connect_timeout_s=CALL_TIMEOUT_S, credentials=credentials) as client, \
                trio.open_nursery() as nursery:
            for name, addr in masters.items():
                nursery.start_soon(one, client, name, addr)
        return dict(sorted(answers.items()))

    return trio.run(run)


def _warn(message: str) -> None:
    typer.echo(f"mqctl: warning: {message}", err=True)


def _answered(answers: dict[str, RemotingCommand | str], accept: Callable[[RemotingCommand], T | None],
              nothing: str) -> dict[str, T]:
    """The brokers' answers ``accept`` takes (None: not taken, its remark becomes a warning);
    a CliError when no broker gave one."""
    taken: dict[str, T] = {}
    problems = []
    for name, answer in answers.items():
        value = accept(answer) if isinstance(answer, RemotingCommand) else None
        if value is not None:
            taken[name] = value
        else:
            problems.append(answer if isinstance(answer, str) else f"broker {name}: {answer.remark or answer.code}")
    if not taken:
        raise CliError("; ".join([nothing, *problems]) if problems else nothing)
    for problem in problems:
        _warn(problem)
    return taken


def _stamp(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _body(resp: RemotingCommand) -> dict[str, Any]:
    doc = orjson.loads(resp.body) if resp.body else {}
    return doc if isinstance(doc, dict) else {}


def _offset_table(resp: RemotingCommand) -> list[dict[str, Any]] | None:
    """The ``offsetTable`` of a successful answer (consume stats, reset offsets)."""
    return _body(resp).get("offsetTable", []) if resp.code == ResponseCode.SUCCESS else None


@consumer_app.command("progress")
def progress(ctx: typer.Context, group: Annotated[str, typer.Argument(help="Consumer group.")],
             as_json: JsonOutput = False) -> None:
    """Per queue: broker offset, consumer offset, lag, last consumed time.

    Per queue: broker offset, committed consumer offset, lag and the last consumed message's time."""
    config = load(ctx)
    answers = _ask_each(config, _masters(config), lambda _: RemotingCommand(
        code=RequestCode.GET_CONSUME_STATS, ext_fields={"consumerGroup": group}))

    tables = _answered(answers, _offset_table, f"no broker answered for consumer group {group}")
    rows = [{"topic": q["topic"], "broker": q["brokerName"], "queue_id": q["queueId"],
             "broker_offset": q["brokerOffset"], "consumer_offset": q["consumerOffset"],
             "lag": max(0, q["brokerOffset"] - q["consumerOffset"]), "last_timestamp": q.get("lastTimestamp") or None}
            for queues in tables.values() for q in queues]
    if not rows:
        raise CliError(f"consumer group {group} is unknown: no broker has offsets or online members for it")
    rows.sort(key=lambda r: (r["topic"], r["broker"], r["queue_id"]))
    columns = ("topic", "broker", "queue_id", "broker_offset", "consumer_offset", "lag", "last_timestamp")
    if as_json:
        print_rows(rows, columns, as_json=True)
        return
    total = {"topic": "TOTAL", "broker_offset": sum(r["broker_offset"] for r in rows),
             "consumer_offset": sum(r["consumer_offset"] for r in rows), "lag": sum(r["lag"] for r in rows)}
    shown = [{**r, "last_timestamp": _stamp(r["last_timestamp"])} for r in rows]
    print_rows([*shown, total], columns, as_json=False)


@consumer_app.command("reset-offset")
def reset_offset(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    topic: Annotated[str, typer.Argument(help="Topic whose offsets move.")],
    to_timestamp: Annotated[str | None, typer.Option(
        "--to-timestamp", help="The first message stored at or after this time: epoch ms or ISO-8601.")] = None,
    to_beginning: Annotated[bool, typer.Option("--to-beginning", help="The oldest message kept.")] = False,
    to_end: Annotated[bool, typer.Option("--to-end", help="After the newest message: skip the backlog.")] = False,
    as_json: JsonOutput = False,
) -> None:
    """Move a group's offsets on a topic; running members jump at once."""
    chosen = [c for c, on in (("--to-timestamp", to_timestamp is not None), ("--to-beginning", to_beginning),
                              ("--to-end", to_end)) if on]
    if len(chosen) != 1:
        raise CliError("choose one of --to-timestamp, --to-beginning and --to-end")
    if to_timestamp is not None:
        stamp = parse_time(to_timestamp, "--to-timestamp")
    else:
        stamp = TO_BEGINNING if to_beginning else TO_END
    config = load(ctx)
    answers = _ask_each(config, _topic_masters(config, topic), lambda _: RemotingCommand(
        code=RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        ext_fields={"topic": topic, "group": group, "timestamp": str(stamp), "isForce": "true"}))

    tables = _answered(answers, _offset_table, f"the offsets of {group} on {topic} were not reset")
    rows = sorted(({"topic": q["topic"], "broker": q["brokerName"], "queue_id": q["queueId"], "offset": q["offset"]}
                   for queues in tables.values() for q in queues),
                  key=lambda r: (r["broker"], r["queue_id"]))
    print_rows(rows, ("topic", "broker", "queue_id", "offset"), as_json=as_json)
    if len(tables) < len(answers):
        raise CliError(f"the offsets were reset on {len(tables)} of {len(answers)} brokers")


def _subscription_text(sub: dict[str, str]) -> str:
    """Topic(expression); an SQL92 selector is marked as one."""
    kind = "" if sub["type"] == "TAG" else f"{sub['type']}: "
    return f"{sub['topic']}({kind}{sub['expression']})"


@consumer_app.command("list")
def list_members(ctx: typer.Context, group: Annotated[str, typer.Argument(help="Consumer group.")],
                 as_json: JsonOutput = False) -> None:
    """The group's online members, their subscriptions, message model and consume type."""
    config = load(ctx)
    answers = _ask_each(config, _masters(config), lambda _: RemotingCommand(
        code=RequestCode.GET_CONSUMER_CONNECTION_LIST, ext_fields={"consumerGroup": group}))

    bodies, problems = {}, []
    for name, answer in answers.items():
        if isinstance(answer, str):
            problems.append(answer)
        elif answer.code == ResponseCode.SUCCESS:
            bodies[name] = _body(answer)
        elif answer.code != ResponseCode.CONSUMER_NOT_ONLINE:  # members heartbeat to every broker
            problems.append(f"broker {name}: {answer.remark or answer.code}")
    if not bodies:
        raise CliError("; ".join([f"consumer group {group} has no online member", *problems]))
    for problem in problems:
        _warn(problem)
    members: dict[str, dict[str, Any]] = {}
    for broker, body in bodies.items():
        subscriptions = [{"topic": s["topic"], "expression": s.get("subString", "*"),
                          "type": s.get("expressionType") or "TAG"}
                         for s in (body.get("subscriptionTable") or {}).values()]
        for conn in body.get("connectionSet") or []:
            row = members.setdefault(conn["clientId"], {
                "client_id": conn["clientId"], "address": conn.get("clientAddr"), "language": conn.get("language"),
                "version": conn.get("version"), "message_model": body.get("messageModel"),
                "consume_type": body.get("consumeType"), "consume_from_where": body.get("consumeFromWhere"),
                "subscriptions": subscriptions, "brokers": []})
            row["brokers"].append(broker)
    rows = [members[c] for c in sorted(members)]
    columns = ("client_id", "address", "language", "version", "message_model", "consume_type", "subscriptions")
    if as_json:
        print_rows(rows, (*columns, "consume_from_where", "brokers"), as_json=True)
        return
    print_rows([{**r, "subscriptions": ",".join(_subscription_text(s) for s in r["subscriptions"])}
                for r in rows], columns, as_json=False)
