"""``mqctl message query``: find stored messages by key, by offset msgId or by UNIQ_KEY."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import trio
import typer

from core.client.lookup import (
    DEFAULT_MAX_NUM,
    END_OF_TIME_MS,
    MessageNotFoundError,
    find_by_id,
    offset_msg_id,
    query_messages,
)
from core.client.runtime import ClientError, open_client
from formats.errors import CompressionError
from formats.msgid import is_uniq_key
from formats.record import MessageRecord
from mqctl.common.context import load, namesrv_addresses
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput, parse_time
from mqctl.common.output import print_rows

message_app = typer.Typer(help="Messages: look stored messages up.", no_args_is_help=True)

COLUMNS = ("msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "tags", "keys", "store_time", "born_host",
           "reconsume_times", "body_size")


def _store_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _payload(rec: MessageRecord) -> bytes | None:
    try:
        return rec.payload()
    except CompressionError:  # an unreadable compressed body still gets its row
        return None


def message_row(rec: MessageRecord, *, with_body: bool, as_json: bool) -> dict[str, Any]:
    payload = _payload(rec)
    host, port = rec.born_host
    row: dict[str, Any] = {
        "msg_id": offset_msg_id(rec), "uniq_key": rec.uniq_key, "topic": rec.topic, "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset, "tags": rec.tags, "keys": rec.keys if as_json else " ".join(rec.keys),
        "store_time": _store_time(rec.store_timestamp),
        "born_host": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "reconsume_times": rec.reconsume_times, "body_size": len(payload if payload is not None else rec.body),
    }
    if as_json:
        row["store_timestamp"] = rec.store_timestamp
    if with_body:
        text = (payload.decode("utf-8", "backslashreplace") if payload is not None
                else "<compressed body that cannot be inflated>")
        row["body"] = text if as_json else text.replace("\n", "\\n")  # one table line per message
    return row


@message_app.command("query")
def query(
    ctx: typer.Context,
    key: Annotated[str | None, typer.Option("--key", help="A message key (needs --topic).")] = None,
    msg_id: Annotated[str | None, typer.Option("--id", help="An offset msgId, or a UNIQ_KEY (needs --topic).")] = None,
    topic: Annotated[str | None, typer.Option("--topic", help="The topic to search.")] = None,
    begin: Annotated[str | None, typer.Option("--begin", help="Stored at or after: epoch ms or ISO 8601.")] = None,
    end: Annotated[str | None, typer.Option("--end", help="Stored at or before: epoch ms or ISO 8601.")] = None,
    max_num: Annotated[int, typer.Option("--max", min=1, help="At most this many messages (the newest).")]
    = DEFAULT_MAX_NUM,
    as_json: JsonOutput = False,
    with_body: Annotated[bool, typer.Option("--body", help="Show each message's body.")] = False,
) -> None:
    """Find messages by key or by msgId.

    Find messages by key, or by id: an offset msgId (the broker's), or a UNIQ_KEY (the
    client's msgId) of --topic."""
    if (key is None) == (msg_id is None):
        raise CliError("give one of --key K or --id ID")
    if key is not None and topic is None:
        raise CliError("--key needs --topic: keys are indexed per topic")
    begin_ms = parse_time(begin, "--begin") if begin is not None else 0
    end_ms = parse_time(end, "--end") if end is not None else END_OF_TIME_MS
    if begin_ms > end_ms:
        raise CliError("--begin is after --end")
    config = load(ctx)
    if not config.nameservers:
        raise CliError(f"{config.source} lists no name servers")

    async def run() -> list[MessageRecord]:
        async with open_client(namesrv_addresses(config), credentials=config.acl.credentials()) as client:
            if key is not None:
                assert topic is not None
                found = await query_messages(client, topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms)
                if not found:
                    raise CliError(f"no message of topic {topic} has the key {key}"
                                   + (" in that time range" if begin is not None or end is not None else ""))
                return found
            assert msg_id is not None
            return await find_by_id(client, msg_id, topic, begin_ms=begin_ms, end_ms=end_ms, max_num=max_num)

    try:
        records = trio.run(run)
    except MessageNotFoundError as exc:
        if msg_id is not None and topic is None and is_uniq_key(msg_id):
            raise CliError(f"{exc}; if {msg_id} is a UNIQ_KEY (the client's msgId), --topic is required") from None
        raise CliError(str(exc)) from None
    except ClientError as exc:
        raise CliError(str(exc)) from None
    columns = COLUMNS + (("body",) if with_body else ())
    print_rows([message_row(rec, with_body=with_body, as_json=as_json) for rec in records], columns,
               as_json=as_json)
