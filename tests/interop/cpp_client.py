"""The stock C++ RocketMQ client (PyPI rocketmq 0.4.4 wrapping librocketmq 1.2.3), driven as a
child process so the tests see it exactly as an application would.

    python cpp_client.py produce NAMESRV TOPIC COUNT [START [DELAY_LEVEL]]
    python cpp_client.py produce-orderly NAMESRV TOPIC COUNT KEYS
    python cpp_client.py produce-async NAMESRV TOPIC COUNT TIMEOUT_S
    python cpp_client.py produce-oneway NAMESRV TOPIC COUNT
    python cpp_client.py produce-batch NAMESRV TOPIC COUNT BATCH_SIZE
    python cpp_client.py produce-steady NAMESRV TOPIC SECONDS STOP_FILE
    python cpp_client.py consume NAMESRV GROUP TOPIC EXPRESSION COUNT TIMEOUT_S [later|orderly]
    python cpp_client.py broadcast NAMESRV GROUP TOPIC COUNT TIMEOUT_S CONSUMERS

``later``: the first delivery of each message fails (RECONSUME_LATER), later ones succeed.
``orderly``: an orderly push consumer (queue locks, one queue at a time per consumer).
``produce-orderly``: message i goes with ``send_orderly`` and sharding key i % KEYS.
``produce-async``: every message goes with ``send_async``; one line per callback (success or
exception), waiting at most TIMEOUT_S for all of them.
``produce-oneway``: ``send_oneway``, which returns nothing; one line per message handed over.
``produce-batch``: ``send_batch`` of BATCH_SIZE messages at a time; one line per batch.
``produce-steady``: ``send_sync`` one message after another, as an application does, for at
most SECONDS or until STOP_FILE exists; a failed send is a row with ``error`` and the next one
follows. Rows carry ``started_at`` and ``answered_at`` (epoch seconds).
``broadcast``: CONSUMERS broadcasting push consumers of GROUP in this process (each its own client
instance), then COUNT messages sent once all of them listen; each received row names its consumer.

With ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY in the environment, producers and consumers
sign their requests (``set_session_credentials``); ``produce`` then prints a row with ``error``
for each message the broker refused instead of stopping.

Messages i carry key ``key-i``, tag TagA (even i) or TagB (odd i), property idx=i and a body
naming i, whichever way they are sent. Each message sent or received is printed as one JSON line.
"""

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from rocketmq.client import Message, MessageModel, Producer, PushConsumer  # type: ignore[import-untyped]

WARMUP_TAG = "Warmup"


def message(topic: str, i: int) -> Message:
    msg = Message(topic)
    msg.set_keys(f"key-{i}")
    msg.set_tags("TagA" if i % 2 == 0 else "TagB")
    msg.set_property("idx", str(i))
    msg.set_body(f"message {i} from the C++ client")
    return msg


def with_credentials(client: object) -> None:
    access_key = os.environ.get("ROCKETMQ_ACCESS_KEY")
    if access_key:
        client.set_session_credentials(access_key, os.environ["ROCKETMQ_SECRET_KEY"], "ALIYUN")  # type: ignore[attr-defined]


def started_producer(namesrv: str, group: str) -> Producer:
    producer = Producer(group)
    with_credentials(producer)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    return producer


_stdout = threading.Lock()  # client threads print too: one whole line at a time


def emit(row: dict) -> None:
    with _stdout:
        print(json.dumps(row), flush=True)


def produce(namesrv: str, topic: str, count: int, start: int = 0, delay_level: int = 0) -> None:
    producer = started_producer(namesrv, "PID_interop")
    try:
        for i in range(start, start + count):
            msg = message(topic, i)
            if delay_level:
                msg.set_delay_time_level(delay_level)
            try:
                result = producer.send_sync(msg)
            except Exception as exc:  # the client's exceptions share no base class worth naming
                if not os.environ.get("ROCKETMQ_ACCESS_KEY"):
                    raise
                emit({"i": i, "error": text(exc.args[0] if exc.args else exc)})
                continue
            emit({"i": i, "status": int(result.status), "msg_id": result.msg_id,
                  "offset": result.offset, "sent_at": time.time()})
    finally:
        producer.shutdown()


def produce_steady(namesrv: str, topic: str, seconds: float, stop_file: str) -> None:
    producer = started_producer(namesrv, "PID_steady")
    try:
        ends = time.monotonic() + seconds
        i = 0
        while time.monotonic() < ends and not os.path.exists(stop_file):
            started = time.time()
            try:
                result = producer.send_sync(message(topic, i))
                emit({"i": i, "status": int(result.status), "msg_id": result.msg_id,
                      "started_at": started, "answered_at": time.time()})
            except Exception as exc:  # the client's exceptions share no base class worth naming
                emit({"i": i, "error": text(exc.args[0] if exc.args else exc),
                      "started_at": started, "answered_at": time.time()})
            i += 1
    finally:
        producer.shutdown()


def produce_orderly(namesrv: str, topic: str, count: int, keys: int) -> None:
    producer = started_producer(namesrv, "PID_orderly")
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_keys(f"key-{i % keys}")
            msg.set_property("idx", str(i))
            msg.set_body(f"ordered {i}")
            result = producer.send_orderly(msg, i % keys)
            emit({"i": i, "status": int(result.status), "msg_id": result.msg_id})
    finally:
        producer.shutdown()


def produce_async(namesrv: str, topic: str, count: int, timeout_s: float) -> None:
    done = threading.Condition()
    answered = 0

    def answer(row: dict) -> None:  # runs on a C++ client thread
        nonlocal answered
        with done:
            emit(row)
            answered += 1
            done.notify_all()

    def on_success(i: int) -> Callable:
        return lambda result: answer({"i": i, "status": int(result.status), "msg_id": result.msg_id,
                                      "offset": result.offset})

    def on_exception(i: int) -> Callable:
        return lambda exc: answer({"i": i, "error": text(exc.args[0] if exc.args else exc),
                                   "code": getattr(exc, "error", None), "type": text(getattr(exc, "type", ""))})

    producer = started_producer(namesrv, "PID_async")
    in_flight = []  # the wrapper frees a Message when it is collected: keep each until answered
    try:
        for i in range(count):
            msg = message(topic, i)
            in_flight.append(msg)
            producer.send_async(msg, on_success(i), on_exception(i))
        with done:
            done.wait_for(lambda: answered >= count, timeout_s)
    finally:
        producer.shutdown()


def produce_oneway(namesrv: str, topic: str, count: int) -> None:
    producer = started_producer(namesrv, "PID_oneway")
    try:
        for i in range(count):
            producer.send_oneway(message(topic, i))
            emit({"i": i})
    finally:
        producer.shutdown()


def produce_batch(namesrv: str, topic: str, count: int, batch_size: int) -> None:
    producer = started_producer(namesrv, "PID_batch")
    try:
        for first in range(0, count, batch_size):
            items = [message(topic, i) for i in range(first, min(first + batch_size, count))]
            result = producer.send_batch(items)
            emit({"first": first, "size": len(items), "status": int(result.status),
                  "msg_id": result.msg_id, "offset": result.offset})
    finally:
        producer.shutdown()


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def row_of(msg) -> dict:  # type: ignore[no-untyped-def]
    return {"body": text(msg.body), "tags": text(msg.tags), "keys": text(msg.keys),
            "idx": text(msg.get_property("idx")), "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "msg_id": text(msg.id), "topic": text(msg.topic),
            "reconsume_times": msg.reconsume_times, "received_at": time.time()}


def consume(namesrv: str, group: str, topic: str, expression: str, count: int, timeout_s: float,
            fail_first: bool = False, orderly: bool = False) -> None:
    got = []
    lock = threading.Lock()

    def on_message(msg) -> None:  # type: ignore[no-untyped-def]
        row = row_of(msg)
        with lock:
            got.append(row)
            emit(row)
        if fail_first and msg.reconsume_times == 0:
            raise RuntimeError("RECONSUME_LATER")

    consumer = PushConsumer(group, orderly=orderly)
    with_credentials(consumer)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message, expression)
    consumer.start()
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with lock:
            if len(got) >= count:
                break
        time.sleep(0.05)
    time.sleep(0.5)  # let a duplicate, if any, arrive before we stop
    consumer.shutdown()


def broadcast(namesrv: str, group: str, topic: str, count: int, timeout_s: float, consumers: int) -> None:
    changed = threading.Condition()
    warmed = [False] * consumers
    real = [0] * consumers

    def on_message(n: int) -> Callable:
        def handle(msg) -> None:  # type: ignore[no-untyped-def]
            row = dict(row_of(msg), consumer=n)
            with changed:
                emit(row)
                if row["tags"] == WARMUP_TAG:
                    warmed[n] = True
                else:
                    real[n] += 1
                changed.notify_all()
        return handle

    pushers = []
    for n in range(consumers):
        consumer = PushConsumer(group, message_model=MessageModel.BROADCASTING)
        consumer.set_instance_name(f"broadcast-{n}")  # its own client id, as a separate process has
        consumer.set_namesrv_addr(namesrv)
        consumer.subscribe(topic, on_message(n), "*")
        pushers.append(consumer)
    for consumer in pushers:
        consumer.start()
    producer = started_producer(namesrv, "PID_broadcast")
    deadline = time.time() + timeout_s
    try:
        # A new broadcasting consumer starts at each queue's max offset when it first rebalances, so
        # warm-up messages go until every consumer has had one; only then are its queues pinned.
        with changed:
            while not all(warmed) and time.time() < deadline:
                warmup = Message(topic)
                warmup.set_tags(WARMUP_TAG)
                warmup.set_body("warm-up")
                producer.send_sync(warmup)
                changed.wait_for(lambda: all(warmed), 0.2)
        if not all(warmed):
            sys.exit(f"consumers {[n for n in range(consumers) if not warmed[n]]} never started listening")
        for i in range(count):
            result = producer.send_sync(message(topic, i))
            emit({"i": i, "status": int(result.status), "msg_id": result.msg_id, "offset": result.offset})
        with changed:
            changed.wait_for(lambda: min(real) >= count, max(0.0, deadline - time.time()))
        time.sleep(0.5)  # let a duplicate, if any, arrive before we stop
    finally:
        producer.shutdown()
        for consumer in pushers:
            consumer.shutdown()


COMMANDS: dict[str, tuple[Callable, list[type], int]] = {
    # name: (function, argument types, how many of the trailing ones are optional)
    "produce": (produce, [str, str, int, int, int], 2),
    "produce-orderly": (produce_orderly, [str, str, int, int], 0),
    "produce-async": (produce_async, [str, str, int, float], 0),
    "produce-oneway": (produce_oneway, [str, str, int], 0),
    "produce-batch": (produce_batch, [str, str, int, int], 0),
    "produce-steady": (produce_steady, [str, str, float, str], 0),
    "consume": (consume, [str, str, str, str, int, float, str], 1),
    "broadcast": (broadcast, [str, str, str, int, float, int], 0),
}


def usage_error(problem: str) -> NoReturn:
    usage = (__doc__ or "").split("\n\n")[1]
    print(f"{problem}\nusage:\n{usage}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in COMMANDS:
        usage_error(f"unknown command {argv[0]!r}" if argv else "no command given")
    function, types, optional = COMMANDS[argv[0]]
    args = argv[1:]
    if not len(types) - optional <= len(args) <= len(types):
        wanted = f"{len(types) - optional} to {len(types)}" if optional else str(len(types))
        usage_error(f"{argv[0]} takes {wanted} arguments, got {len(args)}")
    try:
        values = [kind(arg) for kind, arg in zip(types, args)]
    except ValueError as exc:
        usage_error(f"{argv[0]}: bad argument: {exc}")
    if argv[0] == "consume":  # the trailing mode word becomes two flags
        mode = values.pop(6) if len(values) > 6 else ""
        if mode not in ("", "later", "orderly"):
            usage_error(f"consume: mode must be 'later' or 'orderly', got {mode!r}")
        values += [mode == "later", mode == "orderly"]
    function(*values)


if __name__ == "__main__":
    main(sys.argv[1:])
