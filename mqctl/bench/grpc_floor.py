"""``mqctl bench grpc-floor``: what the proxy's gRPC door costs by itself. The door
(core/proxy/grpc/server.py: HTTP/2, HPACK, gRPC framing, a task per call) serves a service that
does nothing but answer, in a process of its own; the official RocketMQ 5 client sends to it as
``mqctl bench grpc`` does. The door's CPU per call is the floor under every 5.x send and every
ack through the proxy, whatever the proxy does with them. No cluster is needed.

The door runs in a process of its own (mqctl/bench/noop_door.py).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Annotated

import typer

from mqctl.bench.runs import machine, run_workers
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.rmq5_client import client_env
from mqctl.nodes.port_holders import PortPicker
from mqctl.nodes.processes import cpu_seconds


def bench_grpc_floor(
    messages: Annotated[int, typer.Option(help="Messages per round.", min=1)] = 5_000,
    rounds: Annotated[int, typer.Option(help="Rounds.", min=1)] = 3,
    as_json: JsonOutput = False,
) -> None:
    """The gRPC door alone: its CPU per call with a service that does nothing.

    The gRPC door alone, with a service that does nothing: its CPU per call (the floor under
    every 5.x send and ack through the proxy) and the official client's rate against it."""
    port = PortPicker().take()
    door = subprocess.Popen([sys.executable, "-m", "mqctl.bench.noop_door", str(port)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert door.stdout is not None
        if not door.stdout.readline().startswith("serving"):
            raise CliError("the gRPC door did not start")
        runs = []
        for r in range(rounds):
            before = cpu_seconds(door.pid) or 0.0
            run = run_workers("produce", {"endpoints": f"127.0.0.1:{port}", "topic": "BenchGrpc", "messages": messages,
                                          "size": 1024, "inflight": 32}, 1, module="mqctl.bench.rmq5_worker",
                              env=client_env())
            used = (cpu_seconds(door.pid) or 0.0) - before
            calls = int(run["messages"])  # type: ignore[call-overload]
            runs.append({"msgs_per_s": run["msgs_per_s"], "door_us_per_call": round(used / calls * 1e6, 1)})
            if not as_json:
                typer.echo(f"round {r + 1}: {run['msgs_per_s']:>6,} calls/s, door {runs[-1]['door_us_per_call']} us "
                           "of CPU per call", err=True)
    finally:
        door.kill()
        door.wait()
    result = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "messages": messages, "rounds": runs,
              "door_us_per_call": statistics.median(r["door_us_per_call"] for r in runs),
              "msgs_per_s": statistics.median(r["msgs_per_s"] for r in runs)}  # type: ignore[type-var]
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"gRPC door with a no-op service: {result['msgs_per_s']:,} calls/s (median), "
               f"{result['door_us_per_call']} us of the door's CPU per call (median)")

