"""``mqctl send``: produce through the client library (also the queue selection and fault table
that bench reuses)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import trio
import typer

from core.client.fault import FaultRow, FaultSettings
from core.client.producer import Message, Producer, SendError
from core.client.runtime import ClientError, open_client
from core.client.selection import QueueSelector
from mqctl.common.context import load, namesrv_addresses
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput, LatencyFault, ViaProxy
from plugins import plugin_host


def _parse_props(props: list[str]) -> dict[str, str]:
    out = {}
    for item in props:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--prop takes key=value, not {item!r}")
        out[key] = value
    return out


def queue_selector(latency_fault: bool) -> QueueSelector | None:
    """The producers' queue selection, from the plugins (the built-in ``selection`` one)."""
    return plugin_host().queue_selector(FaultSettings(enabled=latency_fault))


def fault_table(rows: list[FaultRow]) -> str:
    """The latency fault table as ``mqctl send --faults`` prints it."""
    lines = [f"{'BROKER':<20} {'LATENCY_MS':>10} {'ISOLATED_S':>10} {'FAILURES':>8}"]
    lines += [f"{r.broker:<20} {r.latency_ms:>10.1f} {r.isolated_for_s:>10.1f} {r.failures:>8}" for r in rows]
    return "\n".join(lines)


def send(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to send to.")],
    body: Annotated[str | None, typer.Argument(help="Message body; read from stdin (one message per line) when absent.")] = None,
    tag: Annotated[str | None, typer.Option("--tag", help="The message tag.")] = None,
    key: Annotated[list[str] | None, typer.Option("--key", help="A message key (repeatable).")] = None,
    prop: Annotated[list[str] | None, typer.Option("--prop", help="A user property k=v (repeatable).")] = None,
    count: Annotated[int, typer.Option(help="Send the body this many times.")] = 1,
    delay: Annotated[int, typer.Option(help="Delay level (1 = the first of store.delay_levels); 0 sends now.",
                                       min=0)] = 0,
    group: Annotated[str, typer.Option(help="Producer group.")] = "mqctl-producer",
    retries: Annotated[int, typer.Option(help="Extra attempts, each on another broker when there is one, "
                                              "when a send fails.", min=0)] = 2,
    timeout: Annotated[float, typer.Option(help="Seconds for each message, retries included.")] = 3.0,
    latency_fault: LatencyFault = False,
    retry_not_store_ok: Annotated[bool, typer.Option(
        "--retry-not-store-ok/--no-retry-not-store-ok",
        help="Retry on another broker when a message is stored but not flushed or replicated "
             "as asked (FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE).")] = False,
    faults: Annotated[bool, typer.Option("--faults", help="Print the latency fault table at the end.")] = False,
    proxy: ViaProxy = None,
    as_json: JsonOutput = False,
) -> None:
    """Send messages and print status, msgId, queue and offset of each."""
    config = load(ctx)
    props = _parse_props(prop or [])
    bodies = [body] * count if body is not None else [line.rstrip("\n") for line in sys.stdin]

    async def run() -> int:
        failed = 0
        async with open_client(namesrv_addresses(config, proxy), credentials=config.acl.credentials()) as client:
            producer = Producer(client, group, retries=retries, timeout_s=timeout,
                                retry_another_broker_when_not_store_ok=retry_not_store_ok,
                                selector=queue_selector(latency_fault))
            for text in bodies:
                msg = Message(topic, text.encode(), tags=tag, keys=key or (), properties=dict(props), delay_level=delay)
                try:
                    result = await producer.send(msg)
                except (SendError, ClientError) as exc:
                    failed += 1
                    typer.echo(json.dumps({"status": "FAILED", "error": str(exc)}) if as_json
                               else f"FAILED  {exc}", err=not as_json)
                    continue
                row = {"status": result.status, "msg_id": result.msg_id, "offset_msg_id": result.offset_msg_id,
                       "topic": topic, "broker": result.queue.broker_name, "queue_id": result.queue.queue_id,
                       "queue_offset": result.queue_offset}
                typer.echo(json.dumps(row) if as_json else
                           f"{result.status}  msgId={result.msg_id}  queue={result.queue.broker_name}/"
                           f"{result.queue.queue_id}  offset={result.queue_offset}")
            if faults:
                rows = producer.fault_rows()
                typer.echo(json.dumps({"faults": [r._asdict() for r in rows]}) if as_json else fault_table(rows))
        return failed

    failed = trio.run(run)
    if failed:
        raise CliError(f"{failed} of {len(bodies)} message(s) failed")
