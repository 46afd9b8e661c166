"""A benchmark client process: ``python -m mqctl.bench.worker JSON_ARGS``.

Prints ``ready`` once connected, waits for ``go`` on stdin, runs, prints one JSON result:
count, bytes, elapsed seconds and a quantile-preserving sample of latencies (ms). A producer
counts only SEND_OK answers (and their latencies) and reports how many sends got each status;
both report their own CPU seconds from the go to the end.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any, cast

import trio

from core.client.producer import Message, Producer, SendResult
from core.client.pull import PullStatus, max_offset, pull
from core.client.runtime import open_client
from mqctl.admin.send import queue_selector

SAMPLE_MAX = 20_000
SEND_OK = "SEND_OK"


def sample(latencies: list[float]) -> list[float]:
    latencies.sort()
    if len(latencies) <= SAMPLE_MAX:
        return latencies
    step = len(latencies) / SAMPLE_MAX
    return [latencies[int(i * step)] for i in range(SAMPLE_MAX)]


async def wait_go() -> float:
    """Wait for the go; returns this process's CPU seconds at that moment."""
    print("ready", flush=True)
    line = await trio.to_thread.run_sync(sys.stdin.readline)
    if line.strip() != "go":
        raise SystemExit("no go")
    return time.process_time()


async def produce(args: dict[str, Any]) -> dict[str, Any]:
    body = b"x" * args["size"]
    latencies: list[float] = []  # of SEND_OK answers: only those count toward throughput
    statuses: Counter[str] = Counter()
    async with open_client(args["namesrv"], instance=f"bench-{args['worker']}") as client:
        producer = Producer(client, "mqctl-bench", compression=None, timeout_s=10, auto_batch=args["auto_batch"],
                            batch_messages_max=args["batch_max"],
                            selector=queue_selector(args.get("latency_fault", False)))
        await producer.send(Message(args["topic"], body))  # routes and connections warm
        sent_before = producer.batch_statistics()
        cpu_at_go = await wait_go()
        start = time.perf_counter()
        if args["api"] == "async":
            await _produce_async(producer, args, body, latencies, statuses)
        else:
            await _produce_sync(producer, args, body, latencies, statuses)
        elapsed = time.perf_counter() - start
        requests, batched = (now - before for now, before in zip(producer.batch_statistics(), sent_before))
        faults = [row._asdict() for row in producer.fault_rows()]
    return {"count": len(latencies), "bytes": len(latencies) * args["size"], "elapsed": elapsed,
            "latencies_ms": sample(latencies), "batch_requests": requests, "batched": batched, "faults": faults,
            "statuses": dict(statuses), "cpu_s": time.process_time() - cpu_at_go}


def _answered(result: SendResult, t0: float, latencies: list[float], statuses: Counter[str]) -> None:
    statuses[result.status] += 1
    if result.status == SEND_OK:
        latencies.append((time.perf_counter() - t0) * 1000)


async def _produce_sync(producer: Producer, args: dict[str, Any], body: bytes, latencies: list[float],
                        statuses: Counter[str]) -> None:
    """``inflight`` tasks, each sending and awaiting one message at a time."""
    left = args["messages"]

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            _answered(await producer.send(Message(args["topic"], body)), t0, latencies, statuses)

    async with trio.open_nursery() as nursery:
        for _ in range(args["inflight"]):
            nursery.start_soon(sender)


async def _produce_async(producer: Producer, args: dict[str, Any], body: bytes, latencies: list[float],
                         statuses: Counter[str]) -> None:
    """``send_async`` with a window: each answer sends the next message, so ``inflight``
    messages are always out (RocketMQ's benchmark with async sends)."""
    left = args["messages"]
    answered = 0
    failures: list[Exception] = []
    finished = trio.Event()

    def send_next() -> None:
        nonlocal left
        left -= 1
        t0 = time.perf_counter()

        def on_done(result: object) -> None:
            nonlocal answered
            answered += 1
            if isinstance(result, Exception):
                failures.append(result)
            else:
                _answered(cast(SendResult, result), t0, latencies, statuses)
            if left > 0 and not failures:
                send_next()
            elif answered == args["messages"] or failures:
                finished.set()

        producer.send_async(Message(args["topic"], body), on_done)

    for _ in range(min(args["inflight"], left)):
        send_next()
    await finished.wait()
    if failures:
        raise SystemExit(f"send failed: {failures[0]}")


async def consume(args: dict[str, Any]) -> dict[str, Any]:
    """Pull each queue of the worker's share from 0 to its end, by the subscription of
    ``expression`` / ``expression_type`` (default: every message)."""
    latencies: list[float] = []
    count = 0
    size = 0
    pulls = 0
    group = args.get("group", "mqctl-bench")
    expression, expression_type = args.get("expression", "*"), args.get("expression_type", "TAG")
    async with open_client(args["namesrv"], instance=f"bench-{args['worker']}") as client:
        route = await client.route(args["topic"])
        if route is None:
            raise SystemExit(f"no route for {args['topic']}")
        queues = sorted(route.read_queues)[args["worker"]::args["workers"]]
        cpu_at_go = await wait_go()
        start = time.perf_counter()

        async def drain(mq, end: int) -> None:  # type: ignore[no-untyped-def]
            nonlocal count, size, pulls
            offset = 0
            while offset < end:
                t0 = time.perf_counter()
                result = await pull(client, group, mq, offset, max_nums=32, expression=expression,
                                    expression_type=expression_type)
                pulls += 1
                latencies.append((time.perf_counter() - t0) * 1000)
                count += len(result.messages)
                size += sum([len(m.body) for m in result.messages])
                if result.status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL) and result.next_offset <= offset:
                    break
                offset = result.next_offset

        ends = {mq: await max_offset(client, mq) for mq in queues}
        async with trio.open_nursery() as nursery:
            for mq in queues:
                nursery.start_soon(drain, mq, ends[mq])
        elapsed = time.perf_counter() - start
    return {"count": count, "bytes": size, "elapsed": elapsed, "latencies_ms": sample(latencies),
            "cpu_s": time.process_time() - cpu_at_go, "pulls": pulls}


def main() -> None:
    args = json.loads(sys.argv[1])
    fn = produce if args["mode"] == "produce" else consume
    result = trio.run(fn, args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
