"""``mqctl topic create | list | route`` and ``mqctl cluster list``."""

from __future__ import annotations

from typing import Annotated

import orjson
import trio
import typer

from core.client.route import parse_route
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from mqctl.common import probe
from mqctl.common.context import load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows

topic_app = typer.Typer(help="Topics: create, list, route.", no_args_is_help=True)


def create_topic_request(topic: str, queues: int, perm: int = 6) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC as stock admin tools send it (bench topics sends the same)."""
    return RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": str(perm), "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})


@topic_app.command("create")
def create(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument()],
    queues: Annotated[int, typer.Option(help="Read and write queues per broker.")] = 8,
    perm: Annotated[int, typer.Option(help="6 read+write, 4 read only, 2 write only.")] = 6,
    broker: Annotated[list[str] | None, typer.Option(help="Broker name(s) (default: every broker).")] = None,
    as_json: JsonOutput = False,
) -> None:
    """Create or update a topic on the masters of the cluster."""
    config = load(ctx)
    info = trio.run(probe.cluster_info, config.namesrv_addresses)
    if info is None:
        raise CliError("no name server answered")
    rows = []
    for name, data in sorted(info.get("brokerAddrTable", {}).items()):
        if broker and name not in broker:
            continue
        master = data.get("brokerAddrs", {}).get("0")
        if master is None:
            rows.append({"broker": name, "result": "no master"})
            continue
        resp = trio.run(lambda: probe.call(master, create_topic_request(topic, queues, perm),
                                           credentials=config.acl.credentials()))
        rows.append({"broker": name, "result": "ok" if resp.code == ResponseCode.SUCCESS else resp.remark})
    if not rows:
        raise CliError("no broker to create the topic on")
    print_rows(rows, ("broker", "result"), as_json=as_json)
    if any(r["result"] != "ok" for r in rows):
        raise CliError("the topic was not created everywhere")


@topic_app.command("list")
def list_topics(ctx: typer.Context, as_json: JsonOutput = False) -> None:
    """Every topic the name servers route."""
    config = load(ctx)
    resp = trio.run(probe.ask_namesrv, config.namesrv_addresses,
                    RemotingCommand(code=RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    topics = orjson.loads(resp.body).get("topicList", []) if resp.body else []
    print_rows([{"topic": t} for t in sorted(topics)], ("topic",), as_json=as_json)


@topic_app.command("route")
def route(ctx: typer.Context, topic: Annotated[str, typer.Argument()], as_json: JsonOutput = False) -> None:
    """The brokers and queues serving a topic."""
    config = load(ctx)
    resp = trio.run(probe.ask_namesrv, config.namesrv_addresses,
                    RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}))
    if resp.code != ResponseCode.SUCCESS:
        raise CliError(resp.remark or f"no route for {topic}")
    parsed = parse_route(topic, resp.body)
    doc = orjson.loads(resp.body)
    rows = []
    for q in doc.get("queueDatas", []):
        rows.append({"broker": q["brokerName"], "read_queues": q["readQueueNums"],
                     "write_queues": q["writeQueueNums"], "perm": q["perm"],
                     "addresses": ",".join(f"{i}={a}" for i, a in sorted(parsed.brokers.get(q["brokerName"], {}).items()))})
    print_rows(rows, ("broker", "read_queues", "write_queues", "perm", "addresses"), as_json=as_json)
