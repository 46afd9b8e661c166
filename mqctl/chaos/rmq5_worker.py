"""A drill's client process with the official RocketMQ 5 client (rocketmq-python-client 5.1.2,
unchanged), through a proxy's gRPC door: ``python -m mqctl.chaos.rmq5_worker JSON``, the
arguments of :mod:`mqctl.chaos.worker` with ``endpoints`` (the door) for ``namesrv``.

It runs with the 5.x client first on PYTHONPATH (:func:`mqctl.common.rmq5_client.client_env`): that
package is named ``rocketmq`` too. A producer runs a thread per stream, each sending one
message after another (the proxy picks the queue: these streams are not FIFO). Its receipt's
queue is the one the client picked, not the one the proxy stored the message in (RocketMQ's
proxy selects the queue itself), so the send is recorded without a queue. A consumer is the client's push consumer (POP underneath): a
delivery's queue and queue offset are read from its receipt handle, whose fields RocketMQ
defines (``ExtraInfoUtil``: field 5 the broker, 6 the queue id, 7 the queue offset).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from mqctl.chaos.journal import JournalWriter, queue_label
from mqctl.chaos.thread_worker import run_streams, run_worker, shut_down

REQUEST_TIMEOUT_S = 3


def _config(endpoints: str) -> Any:
    from rocketmq import ClientConfiguration, Credentials  # type: ignore[import-untyped]
    return ClientConfiguration(endpoints, Credentials("", ""), request_timeout=REQUEST_TIMEOUT_S)


def place(topic: str, receipt_handle: str) -> tuple[str, int]:
    """(queue label, queue offset) from a receipt handle; ``("", -1)`` when it is not RocketMQ's."""
    fields = receipt_handle.split(" ")
    if len(fields) < 8 or not fields[6].isdigit() or not fields[7].lstrip("-").isdigit():
        return "", -1
    return queue_label(topic, fields[5], fields[6]), int(fields[7])


def produce(args: dict[str, Any], journal: JournalWriter, stop: threading.Event) -> None:
    from rocketmq import Message, Producer  # type: ignore[import-untyped]
    producer = Producer(_config(args["endpoints"]), (args["topic"],))
    producer.startup()
    print("ready", flush=True)
    streams = args["streams"]
    interval = streams / args["rate"]

    def stream(k: int) -> None:
        n, due = 0, time.monotonic() + interval * k / streams
        while not stop.is_set():
            wait = due - time.monotonic()
            if wait > 0 and stop.wait(wait):
                return
            due = max(due + interval, time.monotonic() - interval)
            key = f"{args['name']}.s{k}.{n}"
            n += 1
            msg = Message()
            msg.topic, msg.body = args["topic"], key.encode()
            msg.keys = key
            started = journal.now()
            try:
                producer.send(msg)
            except Exception as exc:  # noqa: BLE001 - the client raises its own and gRPC's exceptions
                why = f"{type(exc).__name__}: {exc}".splitlines()[0]
                journal.attempt(key, started, journal.now(), "unknown", why=why, producer=args["name"])
                continue
            journal.attempt(key, started, journal.now(), "ok", producer=args["name"])

    run_streams(stream, streams, stop, REQUEST_TIMEOUT_S * 3 + 5)
    shut_down(stop, journal, producer.shutdown)


def consume(args: dict[str, Any], journal: JournalWriter, stop: threading.Event) -> None:
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer  # type: ignore[import-untyped]

    class Recorder(MessageListener):  # type: ignore[misc]
        def consume(self, m: Any) -> Any:
            queue, offset = place(args["topic"], m.receipt_handle or "")
            journal.delivery(m.body.decode(errors="replace"), queue, offset, journal.now(), args["name"], False)
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(_config(args["endpoints"]), args["group"], Recorder(),
                            {args["topic"]: FilterExpression("*")})
    consumer.startup()
    print("ready", flush=True)
    shut_down(stop, journal, consumer.shutdown)


if __name__ == "__main__":
    run_worker(produce, consume)
