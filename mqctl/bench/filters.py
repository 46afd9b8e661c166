"""``mqctl bench consume --compare-filters``: what a selective SQL92 subscription costs next
to a tag subscription that selects the same messages, and next to reading everything.

One run sends a fresh topic a mixed stream (tags T0..T9; properties ``region`` and ``amount``),
then reads it from start to end in rounds, each round every subscription once, in a rotated
order:

```
all   TAG   *                                   every message
tag   TAG   T3                                  1 in 10, by the ConsumeQueue's tagsCode
sql   SQL92 region = 'eu' AND amount > 100      the same 1 in 10, by each record's properties
```

Every mode reads the whole topic, so its rate is ConsumeQueue entries scanned per second, and
CPU is per entry scanned, for each node of the cluster and for the client processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median
from types import MappingProxyType
from typing import Any

import trio

from core.client.producer import Message, Producer
from core.client.pull import SubscriptionRefusedError, check_subscription
from core.client.runtime import open_client
from core.clock import now_ms
from core.config import Config
from mqctl.bench.runs import machine, run_workers
from mqctl.common.errors import CliError

MODES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "all": ("TAG", "*"),
    "tag": ("TAG", "T3"),
    "sql": ("SQL92", "region = 'eu' AND amount > 100"),
})
ROUTE_WAIT_S = 60.0
SENDERS = 64  # concurrent sends while filling the topic (auto-batched)


def mixed_message(topic: str, i: int, body: bytes) -> Message:
    """Message ``i``: tag T<i % 10>; region eu for 3 and 7, amount above 100 only for 3, so the
    SQL92 selector picks exactly the T3 messages and evaluates both of its terms for 1 in 5."""
    digit = i % 10
    return Message(topic, body, tags=f"T{digit}", properties={
        "region": "eu" if digit in (3, 7) else "us", "amount": "150" if digit == 3 else "50", "idx": str(i)})


def compare_filters(config: Config, messages: int, size: int, rounds: int, processes: int) -> dict[str, Any]:
    topic = f"BenchFilter-{now_ms()}"
    trio.run(_fill, config.namesrv_addresses, topic, messages, size)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    order = list(MODES)
    for round_no in range(rounds):
        for mode in order[round_no % len(order):] + order[:round_no % len(order)]:
            kind, expression = MODES[mode]
            result = run_workers("consume", {"namesrv": config.namesrv_addresses, "topic": topic,
                                             "expression": expression, "expression_type": kind,
                                             "group": f"bench-{mode}"}, processes, config)
            runs[mode].append(_scanned(result, messages))
    selected = {mode: {r["delivered"] for r in rows} for mode, rows in runs.items()}
    return {"mode": "consume-filters", "machine": machine(), "topic": topic, "messages": messages, "size": size,
            "rounds": rounds, "processes": processes,
            "subscriptions": {mode: f"{kind} {expression}" for mode, (kind, expression) in MODES.items()},
            "same_messages": selected["tag"] == selected["sql"] == {messages // 10 + (messages % 10 > 3)},
            "median": {mode: _median(rows) for mode, rows in runs.items()}, "runs": runs}


def _scanned(result: dict[str, Any], messages: int) -> dict[str, Any]:
    seconds = float(result["seconds"])
    return {"delivered": result["messages"], "pulls": result["pulls"], "seconds": seconds,
            "scanned_per_s": round(messages / seconds) if seconds else 0,
            "cpu_us_per_entry": {name: round(s / messages * 1e6, 2) for name, s in result["cpu_s"].items()}}


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    names = rows[0]["cpu_us_per_entry"]
    return {"scanned_per_s": round(median(r["scanned_per_s"] for r in rows)),
            "delivered": rows[0]["delivered"], "pulls": round(median(r["pulls"] for r in rows)),
            "cpu_us_per_entry": {n: round(median(r["cpu_us_per_entry"][n] for r in rows), 2) for n in names}}


async def _fill(namesrv: list[str], topic: str, messages: int, size: int) -> None:
    body = b"x" * size
    async with open_client(namesrv, instance="bench-filters") as client:
        producer = Producer(client, "mqctl-bench", compression=None, timeout_s=10)
        await producer.send(mixed_message(topic, 0, body))
        await _check_sql92_served(client, topic)
        failures: list[str] = []

        async def sender(start: int) -> None:
            for i in range(start, messages, SENDERS):
                result = await producer.send(mixed_message(topic, i, body))
                if result.status != "SEND_OK":
                    failures.append(result.status)

        async with trio.open_nursery() as nursery:
            for start in range(1, min(SENDERS, messages) + 1):
                nursery.start_soon(sender, start)
        if failures:
            raise CliError(f"{len(failures)} sends of the stream failed (first: {failures[0]})")


async def _check_sql92_served(client: Any, topic: str) -> None:
    route = None
    with trio.move_on_after(ROUTE_WAIT_S):  # the new topic reaches the name servers at the next registration
        while (route := await client.route(topic)) is None:
            await trio.sleep(0.2)
    if route is None:
        raise CliError(f"the name servers did not route {topic} within {ROUTE_WAIT_S:.0f}s")
    kind, expression = MODES["sql"]
    try:
        await check_subscription(client, "bench-sql", topic, expression, kind)
    except SubscriptionRefusedError as exc:
        raise CliError(f"{exc}; set broker.enable_property_filter = true and restart") from None


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """The comparison as lines of text."""
    lines = [(f"consume, {result['messages']:,} messages of {result['size']} bytes in {result['topic']}, median of "
             f"{result['rounds']} rounds ({result['machine']}), {result['processes']} client process(es):"),
             f"{'mode':<5} {'subscription':<42} {'delivered':>9} {'pulls':>6} {'entries/s':>10}  CPU us per entry"]
    for mode, row in result["median"].items():
        cpu = ", ".join(f"{name} {us}" for name, us in row["cpu_us_per_entry"].items())
        lines.append(f"{mode:<5} {result['subscriptions'][mode]:<42} {row['delivered']:>9,} {row['pulls']:>6,} "
                     f"{row['scanned_per_s']:>10,}  {cpu}")
    tag, sql = result["median"]["tag"], result["median"]["sql"]
    lines.append(f"sql / tag entries per second: {sql['scanned_per_s'] / max(1, tag['scanned_per_s']):.2f}; "
                 f"same messages selected: {'yes' if result['same_messages'] else 'NO'}")
    return lines
