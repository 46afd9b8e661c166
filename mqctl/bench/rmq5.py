"""``mqctl bench grpc``: the official RocketMQ 5 client through a proxy's gRPC door, beside our
4.x remoting client through the same proxy's door, in the same run.

Rounds alternate which path goes first, so the host's drift cancels. Each path sends
``messages`` 1 KiB messages with ``inflight`` in flight (no batching on either side: the 5.x
client sends one message a request), then the 5.x client receives and acks them (POP): half with
``ack`` one after another, half with ``ack_async`` over each received batch. Every
process's CPU per message is read from /proc beside the throughput.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Annotated

import typer

from core.config import Config
from mqctl.bench.runs import machine, run_workers
from mqctl.common.context import load, namesrv_addresses
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput, help_text
from mqctl.common.rmq5_client import client_env

Run = dict[str, object]


def _grpc_endpoint(config: Config, proxy: str | None) -> tuple[str, str]:
    """(the proxy's name, its gRPC address)."""
    candidates = [p for p in config.proxies if p.grpc_listen and (proxy is None or p.name == proxy)]
    if not candidates:
        raise CliError(f"bench grpc needs a proxy with grpc_listen in {config.source}"
                       + (f" named {proxy!r}" if proxy else ""))
    return candidates[0].name, candidates[0].grpc_listen


def _rate(run: Run) -> float:
    return float(run["msgs_per_s"])  # type: ignore[arg-type]


def _summary(runs: list[Run]) -> Run:
    cpu: dict[str, list[float]] = {}
    for run in runs:
        for name, us in dict(run.get("cpu_us_per_msg", {})).items():  # type: ignore[call-overload]
            if us is not None:
                cpu.setdefault(name, []).append(us)
    return {"msgs_per_s": round(statistics.median(_rate(r) for r in runs)),
            "p50_ms": round(statistics.median(float(r["p50_ms"]) for r in runs), 2),  # type: ignore[arg-type]
            "p99_ms": round(statistics.median(float(r["p99_ms"]) for r in runs), 2),  # type: ignore[arg-type]
            "cpu_us_per_msg": {name: round(statistics.mean(v), 1) for name, v in cpu.items()}}


def bench_grpc(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option(help="Topic to send to (it must exist: 5.x clients do not create topics).")]
    = "BenchGrpc",
    messages: Annotated[int, typer.Option(help="Messages per path and round.", min=1)] = 5_000,
    inflight: Annotated[int, typer.Option(help="Sends in flight.", min=1)] = 32,
    rounds: Annotated[int, typer.Option(help="Rounds; each runs both paths.", min=1)] = 3,
    proxy: Annotated[str | None, typer.Option(help=help_text("The proxy (a [[proxies]] name with grpc_listen)."))] = None,
    as_json: JsonOutput = False,
) -> None:
    """The RocketMQ 5 client (gRPC, POP) vs our 4.x client, through the proxy.

    The RocketMQ 5 client (gRPC, POP) against our 4.x remoting client, both through the
    proxy: msgs/s, p50/p99 and CPU per message of every process, alternating rounds."""
    config = load(ctx)
    name, endpoints = _grpc_endpoint(config, proxy)
    env = client_env()
    paths: dict[str, list[Run]] = {"grpc_send": [], "remoting_send": [], "grpc_receive_ack": [],
                                   "grpc_receive_ack_async": []}
    for r in range(rounds):
        order = ("grpc", "remoting") if r % 2 == 0 else ("remoting", "grpc")
        for path in order:
            if path == "grpc":
                run = run_workers("produce", {"endpoints": endpoints, "topic": topic, "messages": messages,
                                              "size": 1024, "inflight": inflight}, 1, config,
                                  module="mqctl.bench.rmq5_worker", env=env)
            else:
                run = run_workers("produce", {"namesrv": namesrv_addresses(config, name), "topic": topic,
                                              "messages": messages, "size": 1024, "inflight": inflight,
                                              "auto_batch": False, "api": "async", "batch_max": 1,
                                              "latency_fault": False}, 1, config)
            paths[f"{path}_send"].append(run)
            if not as_json:
                typer.echo(f"round {r + 1} {path:<8} send: {run['msgs_per_s']:>6,} msgs/s, "
                           f"p50 {float(run['p50_ms']):.2f} ms, p99 {float(run['p99_ms']):.2f} ms", err=True)
        left = 2 * messages  # both paths' sends; the first consumer may take a little more than its half
        for path, ack_async in (("grpc_receive_ack", False), ("grpc_receive_ack_async", True)):
            run = run_workers("consume", {"endpoints": endpoints, "topic": topic, "group": f"{topic}-bench",
                                          "messages": messages if not ack_async else left, "ack_async": ack_async},
                              1, config,
                              module="mqctl.bench.rmq5_worker", env=env)
            paths[path].append(run)
            left -= int(run["messages"])  # type: ignore[call-overload]
            if not as_json:
                typer.echo(f"round {r + 1} grpc     receive+ack{' (async)' if ack_async else ''}: "
                           f"{run['msgs_per_s']:>6,} msgs/s", err=True)
    result: Run = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "rounds": rounds, "messages": messages,
                   "inflight": inflight, "proxy": name, **{path: _summary(runs) for path, runs in paths.items()}}
    if as_json:
        typer.echo(json.dumps(result))
        return
    for path in paths:
        part = result[path]
        assert isinstance(part, dict)
        cpu = ", ".join(f"{node} {us} us" for node, us in part["cpu_us_per_msg"].items())
        typer.echo(f"{path:<23} {part['msgs_per_s']:>7,} msgs/s (median), p50 {part['p50_ms']:.2f} ms, "
                   f"p99 {part['p99_ms']:.2f} ms; CPU per message: {cpu}")
