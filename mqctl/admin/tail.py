"""``mqctl tail``: follow a topic through the client library's push consumer."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Annotated, Any

import trio
import typer

from core.client.consumer import PushConsumer
from core.client.lookup import offset_msg_id
from core.client.pull import SubscriptionRefusedError
from core.client.runtime import open_client
from formats.record import MessageRecord
from mqctl.common.context import load, namesrv_addresses
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput, ViaProxy


def _row(rec: MessageRecord) -> dict[str, Any]:
    try:
        body = rec.payload().decode("utf-8", "backslashreplace")
    except Exception as exc:  # an undecodable body still gets a line
        body = f"<{exc}>"
    return {"topic": rec.topic, "queue_id": rec.queue_id, "queue_offset": rec.queue_offset, "tags": rec.tags,
            "keys": rec.keys, "msg_id": rec.uniq_key or offset_msg_id(rec),
            "born_timestamp": rec.born_timestamp, "store_timestamp": rec.store_timestamp,
            "properties": rec.properties, "body": body}


REFUSAL_CHECK_S = 0.5


def tail(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to follow.")],
    group: Annotated[str | None, typer.Option(help="Consumer group: resumes from its committed offsets. "
                                              "Without it a private group starts at the end.")] = None,
    tags: Annotated[str, typer.Option("--tags", help="Tag expression, e.g. 'a||b'.")] = "*",
    sql: Annotated[str | None, typer.Option("--sql", metavar="EXPR",
                                            help="SQL92 selector over message properties, e.g. "
                                                 "\"region = 'eu' AND amount > 100\" (brokers need "
                                                 "broker.enable_property_filter).")] = None,
    from_beginning: Annotated[bool, typer.Option("--from-beginning", help="Start at the oldest message kept.")] = False,
    count: Annotated[int | None, typer.Option(help="Exit after this many messages.")] = None,
    proxy: ViaProxy = None,
    as_json: JsonOutput = False,
) -> None:
    """Follow a topic like tail -f; with --count, exit after that many messages."""
    config = load(ctx)
    if sql is not None and tags != "*":
        raise CliError("give --tags or --sql, not both")

    async def run() -> None:
        seen = 0
        done = trio.Event()
        lock = trio.Lock()

        async def handler(messages: list[MessageRecord]) -> int:
            nonlocal seen
            async with lock:
                taken = 0
                for rec in messages:
                    if count is not None and seen >= count:
                        break
                    row = _row(rec)
                    if as_json:
                        typer.echo(json.dumps(row))
                    else:
                        stamp = dt.datetime.fromtimestamp(rec.store_timestamp / 1000).strftime("%H:%M:%S.%f")[:-3]
                        typer.echo(f"{stamp}  {rec.queue_id}@{rec.queue_offset}  tags={rec.tags or ''}  "
                                   f"keys={' '.join(rec.keys)}  {row['body']}")
                    sys.stdout.flush()
                    seen += 1
                    taken += 1
                if count is not None and seen >= count:
                    done.set()
                return taken

        private = group is None
        name = group or f"mqctl-tail-{trio.lowlevel.current_root_task().__hash__() & 0xFFFFFF:x}"
        async with open_client(namesrv_addresses(config, proxy), credentials=config.acl.credentials()) as client:
            route = await client.route(topic)
            if route is None:
                raise CliError(f"topic {topic} does not exist (no route on the name servers)")
            # what is left after --count stays in its queue for the next reader: not given back
            consumer = PushConsumer(client, name, handler, from_beginning=from_beginning, use_committed=not private,
                                    give_back=False)
            if sql is not None:
                consumer.subscribe(topic, sql, sql=True)
            else:
                consumer.subscribe(topic, tags)
            try:
                await consumer.start()
            except SubscriptionRefusedError as exc:
                raise CliError(str(exc)) from None
            while not done.is_set():  # until --count, or a broker refuses the subscription mid-way
                with trio.move_on_after(REFUSAL_CHECK_S):
                    await done.wait()
                if consumer.refused is not None:
                    raise CliError(str(consumer.refused))

    try:
        trio.run(run)
    except KeyboardInterrupt:
        pass
