"""Benchmark runs through the broker: worker processes (``mqctl.bench.worker``) released
together, their results merged, and the CPU every process of the run spent (from /proc)."""

from __future__ import annotations

import enum
import json
import os
import platform
from collections import Counter

from core.config import Config
from mqctl.common.errors import CliError
from mqctl.nodes.processes import node_cpu_seconds


class SendApi(str, enum.Enum):
    """How a producer worker keeps its window full."""

    ASYNC = "async"  # send_async with a window of N
    SYNC = "sync"  # N tasks each awaiting send


def machine() -> str:
    """What the results were measured on."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_workers(mode: str, base_args: dict[str, object], processes: int,
                nodes: Config | None = None, *, module: str = "mqctl.bench.worker",
                env: dict[str, str] | None = None) -> dict[str, object]:
    """Start ``processes`` worker processes (python -m ``module``, with ``env``), release them
    together, merge their results. With ``nodes``, also the CPU per message of each of its
    running nodes (from /proc) and of the clients, from the go to the last result."""
    import subprocess
    import sys

    procs = []
    for worker in range(processes):
        args = dict(base_args, mode=mode, worker=worker, workers=processes)
        procs.append(subprocess.Popen([sys.executable, "-m", module, json.dumps(args)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "ready":
            for q in procs:
                q.kill()
            raise CliError(f"a {mode} worker failed to start: {line or 'no output'}")
    nodes_before = node_cpu_seconds(nodes) if nodes is not None else {}
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise CliError(f"a {mode} worker failed (exit {p.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    nodes_after = node_cpu_seconds(nodes) if nodes is not None else {}
    count = sum(r["count"] for r in results)
    size = sum(r["bytes"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies_ms"])
    extra = {}
    if mode == "consume":
        extra["pulls"] = sum(r.get("pulls", 0) for r in results)
    if mode == "produce":
        statuses: Counter[str] = Counter()
        for r in results:
            statuses.update(r["statuses"])
        extra = {"batch_requests": sum(r["batch_requests"] for r in results),
                 "batched": sum(r["batched"] for r in results),
                 "faults": [dict(row, worker=i) for i, r in enumerate(results) for row in r["faults"]],
                 "statuses": dict(sorted(statuses.items()))}
    if nodes is not None:  # every process of the run on this host: CPU per message beside throughput
        cpu = {node: seconds - nodes_before[node] for node, seconds in nodes_after.items() if node in nodes_before}
        cpu["clients"] = sum(r["cpu_s"] for r in results)
        extra["cpu_us_per_msg"] = {name: round(seconds / count * 1e6, 1) if count else None
                                   for name, seconds in cpu.items()}
        extra["cpu_s"] = {name: round(seconds, 4) for name, seconds in cpu.items()}
    return {**extra, "mode": mode, "processes": processes, "messages": count, "seconds": round(elapsed, 3),
            "msgs_per_s": round(count / elapsed) if elapsed else 0,
            "mb_per_s": round(size / elapsed / 1e6, 1) if elapsed else 0.0,
            "p50_ms": round(percentile(latencies, 0.50), 2), "p99_ms": round(percentile(latencies, 0.99), 2)}


def median_run(runs: list[dict[str, object]]) -> dict[str, object]:
    """The run of median throughput."""
    return sorted(runs, key=lambda r: float(r["msgs_per_s"]))[len(runs) // 2]  # type: ignore[arg-type]


def throughput_ratio(a: dict[str, object], b: dict[str, object]) -> float:
    """msgs/s of run ``a`` over run ``b``'s."""
    return round(float(a["msgs_per_s"]) / float(b["msgs_per_s"]), 3) if b["msgs_per_s"] else 0.0  # type: ignore[arg-type]
