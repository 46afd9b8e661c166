"""A drill's client process with mqctl's own 4.x client: ``python -m mqctl.chaos.worker JSON``.

Arguments (one JSON object): ``role`` produce | consume, ``name``, ``namesrv`` (a list),
``topic``, ``group``, ``journal`` (its file), ``t0``, ``broker``; a producer also ``rate``
(messages a second offered in all), ``streams`` and ``queues`` (how many the topic has).

A producer with ``fifo`` runs ``streams`` **streams**: stream s sends to queue s % queues, one message after
another (``send_orderly``: an answer before the next send), so its acknowledged queue offsets
must rise in send order (the history's FIFO check). Keys are ``<name>.<s>.<n>``, and the body
is the key. Without ``fifo`` it sends in bulk: ``send_async`` at the rate, batched, keys
``<name>.b.<n>``. A consumer is an orderly push consumer of
``group`` from the beginning (RocketMQ's FIFO promise is an orderly producer and an orderly
consumer); each delivery is recorded with its queue and queue offset.

Prints ``ready`` when started; ``stop`` on stdin ends the sending (a producer) or the process
(a consumer); stdin closing ends either.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import trio

from core.client.consumer import PushConsumer
from core.client.producer import Message, MessageQueue, Producer, SendResult
from core.client.runtime import ClientError, open_client
from core.errors import RemotingError
from formats.record import MessageRecord
from mqctl.chaos.journal import JournalWriter, queue_label
from mqctl.chaos.reasons import why_not_acknowledged

SEND_TIMEOUT_S = 3.0
BULK_TICK_S = 0.01
BULK_INFLIGHT = 4000


async def _stop_requested(stop: trio.Event) -> None:
    while True:
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line or line.strip() == "stop":
            stop.set()
            return


async def produce(args: dict[str, Any], journal: JournalWriter, stop: trio.Event) -> None:
    async with open_client(args["namesrv"], instance=args["name"]) as runtime:
        producer = Producer(runtime, f"{args['group']}-producer", timeout_s=SEND_TIMEOUT_S,
                            auto_batch=not args["fifo"])
        print("ready", flush=True)
        if not args["fifo"]:
            await _bulk(producer, args, journal, stop)
            return
        interval = args["streams"] / args["rate"]
        async with trio.open_nursery() as nursery:
            for stream in range(args["streams"]):
                nursery.start_soon(_stream, producer, args, stream, interval, journal, stop)


async def _bulk(producer: Producer, args: dict[str, Any], journal: JournalWriter, stop: trio.Event) -> None:
    """Not FIFO: ``send_async`` at the rate, concurrent sends sharing batch requests (the way an
    application with volume sends); at most ``BULK_INFLIGHT`` unanswered, then the offer waits."""
    inflight = 0
    answered = trio.Event()
    n = 0
    began = due = trio.current_time()

    def sent(key: str, started: float) -> Callable[[SendResult | Exception], None]:
        def done(result: SendResult | Exception) -> None:
            nonlocal inflight, answered
            inflight -= 1
            answered.set()
            _record(journal, args, key, started, result)
        return done

    while not stop.is_set():
        due += BULK_TICK_S
        await trio.sleep_until(due)
        # what the rate owes by now: a late tick sends more, a stall of over a second is forgiven
        owed = int((trio.current_time() - began) * args["rate"]) - n
        if owed > args["rate"]:
            began, owed = trio.current_time() - n / args["rate"], 0
        for _ in range(owed):
            while inflight >= BULK_INFLIGHT and not stop.is_set():
                answered = trio.Event()
                await answered.wait()
            key = f"{args['name']}.b.{n}"
            n += 1
            inflight += 1
            producer.send_async(Message(args["topic"], key.encode(), keys=[key]), sent(key, journal.now()))
    with trio.move_on_after(SEND_TIMEOUT_S * 2):
        while inflight:
            answered = trio.Event()
            await answered.wait()


def _record(journal: JournalWriter, args: dict[str, Any], key: str, started: float,
            result: SendResult | Exception) -> None:
    """A send's outcome: SEND_OK acknowledges; another status or an error leaves it unknown."""
    if isinstance(result, Exception):
        journal.attempt(key, started, journal.now(), "unknown", why=why_not_acknowledged(str(result)),
                        producer=args["name"])
    elif result.status == "SEND_OK":
        journal.attempt(key, started, journal.now(), "ok",
                        queue_label(args["topic"], result.queue.broker_name, result.queue.queue_id),
                        result.queue_offset, producer=args["name"])
    else:  # stored, not replicated as asked: it may or may not be kept
        journal.attempt(key, started, journal.now(), "unknown", why=result.status, producer=args["name"])


async def _stream(producer: Producer, args: dict[str, Any], stream: int, interval: float,
                  journal: JournalWriter, stop: trio.Event) -> None:
    def pick(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return next((q for q in queues if q.queue_id == arg), queues[arg % len(queues)])

    queue_id = stream % args["queues"]
    n = 0
    due = trio.current_time() + interval * stream / args["streams"]  # streams spread over the interval
    while not stop.is_set():
        await trio.sleep_until(due)
        due = max(due + interval, trio.current_time() - interval)  # no burst to catch up after a stall
        key = f"{args['name']}.{stream}.{n}"
        n += 1
        started = journal.now()
        result: SendResult | Exception
        try:
            result = await producer.send_orderly(Message(args["topic"], key.encode(), keys=[key]), pick, queue_id)
        except (ClientError, RemotingError) as exc:
            result = exc
        _record(journal, args, key, started, result)


async def consume(args: dict[str, Any], journal: JournalWriter, stop: trio.Event) -> None:
    async def handle(records: list[MessageRecord]) -> bool:
        at = journal.now()
        for rec in records:
            journal.delivery(rec.body.decode(errors="replace"), queue_label(args["topic"], args["broker"], rec.queue_id), rec.queue_offset,
                             at, args["name"], True)
        return True

    async with open_client(args["namesrv"], instance=args["name"]) as runtime:
        consumer = PushConsumer(runtime, args["group"], handle, from_beginning=True, orderly=True)
        consumer.subscribe(args["topic"])
        await consumer.start()
        print("ready", flush=True)
        await stop.wait()
        await consumer.stop()


async def main(args: dict[str, Any]) -> None:
    journal = JournalWriter(args["journal"], args["t0"])
    stop = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_requested, stop)

            async def flusher() -> None:
                while True:
                    await trio.sleep(0.2)
                    journal.flush()
            nursery.start_soon(flusher)
            await (produce if args["role"] == "produce" else consume)(args, journal, stop)
            nursery.cancel_scope.cancel()
    finally:
        journal.close()


if __name__ == "__main__":
    trio.run(main, json.loads(sys.argv[1]))
