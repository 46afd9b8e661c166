"""Drive the official RocketMQ 5 Python client (rocketmq-python-client 5.1.2, unchanged) from a
test, one JSON line per event on stdout.

It runs in a child process with ``.venv/clients/rocketmq5`` first on PYTHONPATH (see
:func:`client_env`): that package is also named ``rocketmq``, as the C++ client's is.

    rmq5_client.py produce ENDPOINTS TOPIC SPEC_JSON      SPEC: [{body, tag, keys, props, group,
                                                           delay_s, recall, tx: commit|rollback|unknown}]
    rmq5_client.py consume ENDPOINTS GROUP TOPIC OPTIONS_JSON
                   OPTIONS: {filter, count, invisible_s, wait_s, ack: all|none, change_s, await_s,
                             stop_file}
    rmq5_client.py push ENDPOINTS GROUP TOPIC COUNT WAIT_S [WORK_S]
    rmq5_client.py produce-steady ENDPOINTS TOPIC SECONDS STOP_FILE
    rmq5_client.py bench ENDPOINTS TOPIC GROUP COUNT SIZE
    rmq5_client.py produce-many ENDPOINTS TOPIC OPTIONS_JSON
                   OPTIONS: {name, groups, per_group, plain, inflight}: a thread per message group
                   sending its messages one after another, and plain ones with send_async
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def client_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the 5.x client (installed by the Makefile) first on PYTHONPATH."""
    from mqctl.common.rmq5_client import client_env as with_client
    return with_client(env)


_EMITTING = threading.Lock()  # rows come from the client's threads too: one whole line at a time


def emit(**row: object) -> None:
    line = json.dumps(row)
    with _EMITTING:
        print(line, flush=True)


def shown(m) -> dict:  # a received message, as the tests compare it
    return {"id": m.message_id, "body": m.body.hex(), "tag": m.tag, "keys": sorted(m.keys or ()),
            "props": dict(m.properties or {}), "group": m.message_group, "attempt": m.delivery_attempt,
            "delivery_ms": m.delivery_timestamp, "topic": m.topic, "at": time.time()}


def config(endpoints: str):
    from rocketmq import ClientConfiguration, Credentials
    ak, sk = os.environ.get("RMQ5_ACCESS_KEY", ""), os.environ.get("RMQ5_SECRET_KEY", "")
    return ClientConfiguration(endpoints, Credentials(ak, sk), request_timeout=5)


def message(topic: str, spec: dict):
    from rocketmq import Message
    m = Message()
    m.topic = topic
    m.body = bytes.fromhex(spec["body_hex"]) if "body_hex" in spec else spec.get("body", "x").encode()
    if spec.get("tag"):
        m.tag = spec["tag"]
    for key in spec.get("keys") or ():
        m.keys = key  # the setter adds one key per assignment
    for k, v in (spec.get("props") or {}).items():
        m.add_property(k, v)
    if spec.get("group"):
        m.message_group = spec["group"]
    if spec.get("delay_s"):
        # 5.1.2 writes this value into Timestamp.seconds (its docstring says milliseconds, which
        # RocketMQ's proxy and ours refuse as more than 24 h ahead): epoch seconds it is
        m.delivery_timestamp = int(time.time()) + int(spec["delay_s"])
    return m


def produce(endpoints: str, topic: str, specs: list[dict]) -> None:
    from rocketmq import Producer, TransactionChecker, TransactionResolution

    checked = threading.Event()

    class Checker(TransactionChecker):  # an unknown transaction is committed when asked
        def check(self, msg):
            emit(event="check", id=msg.message_id, body=msg.body.decode(errors="replace"))
            checked.set()
            return TransactionResolution.COMMIT

    producer = Producer(config(endpoints), (topic,), Checker())
    try:
        producer.startup()
    except Exception as exc:  # e.g. refused credentials: the route query is answered UNAUTHORIZED
        emit(event="startup-failed", error=f"{type(exc).__name__}: {exc}"[:500])
        return
    unknown = 0
    try:
        for spec in specs:
            try:
                tx_mode = spec.get("tx")
                if tx_mode:
                    tx = producer.begin_transaction()
                    receipt = producer.send(message(topic, spec), tx)
                    if tx_mode == "commit":
                        tx.commit()
                    elif tx_mode == "rollback":
                        tx.rollback()
                    else:
                        unknown += 1
                else:
                    receipt = producer.send(message(topic, spec))
                emit(event="sent", id=receipt.message_id, body=spec.get("body"), recall_handle=receipt.recall_handle)
                if spec.get("recall"):  # a timer message taken back before it is due
                    emit(event="recalled", id=producer.recall_message(topic, receipt.recall_handle))
            except Exception as exc:
                emit(event="failed", error=f"{type(exc).__name__}: {exc}", body=spec.get("body"))
        if unknown:  # stay up for the broker's check-back (and its answer's delivery)
            checked.wait(float(os.environ.get("RMQ5_LINGER_S", "0")))
            time.sleep(0.5)
    finally:
        producer.shutdown()


def consume(endpoints: str, group: str, topic: str, options: dict) -> None:
    from rocketmq import FilterExpression, SimpleConsumer
    consumer = SimpleConsumer(config(endpoints), group, {topic: FilterExpression(options.get("filter", "*"))},
                              await_duration=options.get("await_s", 2))
    consumer.startup()
    got, deadline = 0, time.time() + options.get("wait_s", 20)
    stop_file = options.get("stop_file")
    try:
        while got < options.get("count", 1) and time.time() < deadline and not (stop_file and os.path.exists(stop_file)):
            try:
                received = consumer.receive(options.get("batch", 16), options.get("invisible_s", 10)) or ()
            except Exception as exc:  # a failover under way: the next receive goes on
                emit(event="receive-failed", error=f"{type(exc).__name__}: {exc}"[:300], at=time.time())
                time.sleep(0.1)
                continue
            for m in received:
                got += 1
                row = shown(m)
                if options.get("change_s") is not None:
                    consumer.change_invisible_duration(m, options["change_s"])
                    row["changed"] = True
                if options.get("ack", "all") == "all":
                    try:
                        consumer.ack(m)
                        row["acked"] = True
                    except Exception as exc:  # it comes back after its invisible time
                        row["ack_error"] = f"{type(exc).__name__}: {exc}"[:300]
                emit(event="received", **row)
    finally:
        consumer.shutdown()


def push(endpoints: str, group: str, topic: str, count: int, wait_s: float, work_s: float = 0.0) -> None:
    """Consume ``count`` messages with a push consumer whose handler takes ``work_s`` each
    (``started`` rows when a handler begins, ``consumed`` when it returns)."""
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer
    done = threading.Event()
    seen = []
    lock = threading.Lock()

    class Listener(MessageListener):
        def consume(self, m):
            row = shown(m)
            row["thread"] = threading.current_thread().name
            if work_s:
                emit(event="started", **row)
                time.sleep(work_s)
            with lock:
                seen.append(row)
                emit(event="consumed", **row)
                if len(seen) >= count:
                    done.set()
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config(endpoints), group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    try:
        done.wait(wait_s)
    finally:
        consumer.shutdown()


def produce_steady(endpoints: str, topic: str, seconds: float, stop_file: str) -> None:
    """Send one message after another until ``stop_file`` exists; a row per send."""
    from rocketmq import Producer
    producer = Producer(config(endpoints), (topic,))
    producer.startup()
    end = time.time() + seconds
    i = 0
    try:
        while time.time() < end and not os.path.exists(stop_file):
            body = f"steady-{i}"
            started = time.time()
            try:
                receipt = producer.send(message(topic, {"body": body}))
                emit(body=body, id=receipt.message_id, started_at=started, at=time.time(), status="SEND_OK")
            except Exception as exc:
                emit(body=body, started_at=started, at=time.time(), error=f"{type(exc).__name__}: {exc}"[:300])
            i += 1
    finally:
        producer.shutdown()


def bench(endpoints: str, topic: str, group: str, count: int, size: int) -> None:
    """Send ``count`` messages of ``size`` bytes one by one, then receive and ack them all."""
    from rocketmq import FilterExpression, Producer, SimpleConsumer
    producer = Producer(config(endpoints), (topic,))
    producer.startup()
    body = b"x" * size
    started = time.time()
    for _ in range(count):
        m = message(topic, {})
        m.body = body
        producer.send(m)
    sent_s = time.time() - started
    producer.shutdown()
    consumer = SimpleConsumer(config(endpoints), group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    got, started = 0, time.time()
    deadline = started + max(60.0, count / 100)
    while got < count and time.time() < deadline:
        for m in consumer.receive(32, 30) or ():
            consumer.ack(m)
            got += 1
    emit(sent=count, send_s=sent_s, received=got, receive_s=time.time() - started)
    consumer.shutdown()


def produce_many(endpoints: str, topic: str, options: dict) -> None:
    """Many sends at once from one producer: each message group's in order on a thread of its
    own (each send waits for the last), plain ones ``inflight`` at a time."""
    from concurrent.futures import wait
    producer = Producer5(config(endpoints), (topic,))
    producer.startup()
    name = options["name"]

    def group_sender(g: int) -> None:
        for i in range(options["per_group"]):
            body = f"{name}-g{g}-{i}"
            receipt = producer.send(message(topic, {"body": body, "group": f"{name}-g{g}"}))
            emit(event="sent", id=receipt.message_id, body=body)

    threads = [threading.Thread(target=group_sender, args=(g,)) for g in range(options["groups"])]
    for t in threads:
        t.start()
    pending: set = set()
    for i in range(options["plain"]):
        while len(pending) >= options["inflight"]:
            done, pending = wait(pending, return_when="FIRST_COMPLETED")
        body = f"{name}-p{i}"
        future = producer.send_async(message(topic, {"body": body}))
        future.add_done_callback(lambda f, body=body: emit(event="sent", id=f.result().message_id, body=body)
                                 if f.exception() is None else emit(event="failed", body=body, error=str(f.exception())))
        pending.add(future)
    wait(pending)
    for t in threads:
        t.join()
    producer.shutdown()


def Producer5(*args):
    from rocketmq import Producer
    return Producer(*args)


def main(argv: list[str]) -> None:
    mode, args = argv[0], argv[1:]
    if mode == "produce":
        produce(args[0], args[1], json.loads(args[2]))
    elif mode == "consume":
        consume(args[0], args[1], args[2], json.loads(args[3]))
    elif mode == "push":
        push(args[0], args[1], args[2], int(args[3]), float(args[4]), float(args[5]) if len(args) > 5 else 0.0)
    elif mode == "produce-steady":
        produce_steady(args[0], args[1], float(args[2]), args[3])
    elif mode == "produce-many":
        produce_many(args[0], args[1], json.loads(args[2]))
    elif mode == "bench":
        bench(args[0], args[1], args[2], int(args[3]), int(args[4]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
    os._exit(0)  # the client leaves non-daemon threads behind after shutdown
