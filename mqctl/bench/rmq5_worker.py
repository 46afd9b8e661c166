"""A benchmark client process driving the official RocketMQ 5 Python client:
``python -m mqctl.bench.rmq5_worker JSON_ARGS``, with the client's folder first on PYTHONPATH
(see :func:`mqctl.common.rmq5_client.client_env`).

The same protocol as ``mqctl.bench.worker``: ``ready`` once started, then ``go`` on stdin, then
one JSON result (count, bytes, elapsed, sampled latencies in ms, this process's CPU seconds).
``produce`` keeps ``inflight`` sends in flight with ``send_async``; ``consume`` receives batches
of 32 and acks each message (one after another, or with ``ack_async`` the batch's acks at once, from 32 threads),
until it has ``messages``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait

from mqctl.bench.worker import sample


def _go() -> float:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")
    return time.process_time()


def _config(endpoints: str):  # type: ignore[no-untyped-def]
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(endpoints, Credentials(os.environ.get("RMQ5_ACCESS_KEY", ""),
                                                      os.environ.get("RMQ5_SECRET_KEY", "")), request_timeout=10)


def produce(args: dict) -> dict:
    from rocketmq import Message, Producer
    producer = Producer(_config(args["endpoints"]), (args["topic"],))
    producer.startup()
    body = b"x" * args["size"]
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    cpu_at_go = _go()
    started = time.perf_counter()
    pending: set[Future] = set()

    def sent(future: Future, at: float) -> None:
        name = "SEND_OK" if future.exception() is None else type(future.exception()).__name__
        statuses[name] = statuses.get(name, 0) + 1
        if future.exception() is None:
            latencies.append((time.perf_counter() - at) * 1000)

    for _ in range(args["messages"]):
        while len(pending) >= args["inflight"]:
            done, _ = wait(pending, return_when="FIRST_COMPLETED")
            pending -= done
        msg = Message()
        msg.topic, msg.body = args["topic"], body
        at = time.perf_counter()
        future = producer.send_async(msg)
        future.add_done_callback(lambda f, at=at: sent(f, at))
        pending.add(future)
    wait(pending)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_at_go
    producer.shutdown()
    ok = statuses.get("SEND_OK", 0)
    return {"count": ok, "bytes": ok * args["size"], "elapsed": elapsed, "latencies_ms": sample(latencies),
            "statuses": statuses, "batch_requests": 0, "batched": 0, "faults": [], "cpu_s": cpu}


def consume(args: dict) -> dict:
    from rocketmq import FilterExpression, SimpleConsumer
    consumer = SimpleConsumer(_config(args["endpoints"]), args["group"], {args["topic"]: FilterExpression("*")},
                              await_duration=1)
    consumer.startup()
    # concurrent acks: SimpleConsumer.ack_async (5.1.2) returns None, so threads call ack
    pool = ThreadPoolExecutor(32) if args.get("ack_async") else None
    cpu_at_go = _go()
    started = time.perf_counter()
    got, size, latencies = 0, 0, []
    deadline = started + args.get("timeout_s", 300)
    while got < args["messages"] and time.perf_counter() < deadline:
        asked = time.perf_counter()
        batch = consumer.receive(32, 30) or ()
        if pool is not None:  # the batch's acks at once from a thread each, as a push consumer's threads ack
            list(pool.map(consumer.ack, batch))
        else:
            for message in batch:
                consumer.ack(message)
        got += len(batch)
        size += sum(len(message.body) for message in batch)
        if batch:
            latencies.append((time.perf_counter() - asked) * 1000)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_at_go
    consumer.shutdown()
    return {"count": got, "bytes": size, "elapsed": elapsed, "latencies_ms": sample(latencies), "cpu_s": cpu}


def main() -> None:
    args = json.loads(sys.argv[1])
    result = produce(args) if args["mode"] == "produce" else consume(args)
    print(json.dumps(result), flush=True)
    os._exit(0)  # the client leaves non-daemon threads behind after shutdown


if __name__ == "__main__":
    main()
