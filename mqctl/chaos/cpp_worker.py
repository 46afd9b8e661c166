"""A drill's client process with the stock C++ 4.x client (PyPI ``rocketmq`` 0.4.4, unchanged):
``python -m mqctl.chaos.cpp_worker JSON``, the arguments of :mod:`mqctl.chaos.worker`.

A producer runs a thread per stream, each sending with ``send_orderly`` to its queue (stream s:
queue s % queues) one message after another (the C++ client's answer names no queue: the
stream's is recorded; the selector reads its argument through the pointer the client passes). A
consumer is the client's orderly push consumer (clustering, a queue at a time, in queue order:
RocketMQ's FIFO promise is an orderly producer and an orderly consumer). ``namesrv`` may be the proxy's
address: the C++ client then reaches the brokers through it.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

from rocketmq.client import Message, Producer, PushConsumer, SendStatus  # type: ignore[import-untyped]

from mqctl.chaos.journal import JournalWriter, queue_label
from mqctl.chaos.thread_worker import run_streams, run_worker, shut_down

SEND_TIMEOUT_MS = 3000


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def produce(args: dict[str, Any], journal: JournalWriter, stop: threading.Event) -> None:
    producer = Producer(f"{args['group']}-cpp-producer", timeout=SEND_TIMEOUT_MS)
    producer.set_namesrv_addr(";".join(args["namesrv"]))
    producer.start()
    print("ready", flush=True)
    interval = args["streams"] / args["rate"]

    def pick(size: int, msg: Any, arg: Any) -> int:
        return int(ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]) % size

    def stream(s: int) -> None:
        queue_id = s % args["queues"]
        n, due = 0, time.monotonic() + interval * s / args["streams"]
        while not stop.is_set():
            wait = due - time.monotonic()
            if wait > 0 and stop.wait(wait):
                return
            due = max(due + interval, time.monotonic() - interval)
            key = f"{args['name']}.{s}.{n}"
            n += 1
            msg = Message(args["topic"])
            msg.set_keys(key)
            msg.set_body(key)
            started = journal.now()
            try:
                result = producer.send_orderly(msg, queue_id, retry_times=0, queue_selector=pick)
            except Exception as exc:  # noqa: BLE001 - the client's exceptions share no useful base class
                why = _text(exc.args[0] if exc.args else exc).splitlines()[0]
                journal.attempt(key, started, journal.now(), "unknown", why=why, producer=args["name"])
                continue
            if result.status == SendStatus.OK:
                journal.attempt(key, started, journal.now(), "ok", queue_label(args["topic"], args["broker"], queue_id), int(result.offset),
                                producer=args["name"])
            else:
                journal.attempt(key, started, journal.now(), "unknown", why=result.status.name, producer=args["name"])

    run_streams(stream, args["streams"], stop, SEND_TIMEOUT_MS / 1000 + 5)
    shut_down(stop, journal, producer.shutdown)


def consume(args: dict[str, Any], journal: JournalWriter, stop: threading.Event) -> None:
    def on_message(msg: Any) -> None:
        journal.delivery(_text(msg.body), queue_label(args["topic"], args["broker"], msg.queue_id), int(msg.queue_offset), journal.now(),
                         args["name"], True)

    consumer = PushConsumer(args["group"], orderly=True)
    consumer.set_namesrv_addr(";".join(args["namesrv"]))
    consumer.set_instance_name(args["name"])
    consumer.subscribe(args["topic"], on_message, "*")
    consumer.start()
    print("ready", flush=True)
    shut_down(stop, journal, consumer.shutdown)


if __name__ == "__main__":
    run_worker(produce, consume)
