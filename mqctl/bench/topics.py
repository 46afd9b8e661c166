"""``mqctl bench topics``: the control plane at scale. On a fresh one-broker cluster, create
topics with UPDATE_AND_CREATE_TOPIC (as ``mqctl topic create`` does), then consumer groups with
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (as ``mqctl group set`` does), ``--inflight`` at a time,
and per step of ``--step`` creates print the rate and the master's and name server's CPU per
create (from /proc); then the name server's route lookup latency, the broker's restart time and
both processes' RSS at the full count."""

from __future__ import annotations

import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import trio
import typer

from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from mqctl.admin.group import group_request
from mqctl.admin.topic import create_topic_request
from mqctl.bench import clusters as bench_clusters
from mqctl.bench.runs import machine
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.progress import progress_bar
from mqctl.nodes.commands import start_nodes
from mqctl.nodes.processes import START_TIMEOUT_S, cpu_seconds, nodes_of, running_pid, stop

LOOKUPS = 1000


async def _create_all(master: str, names: list[str], request: Callable[[str], RemotingCommand], inflight: int) -> None:
    async with open_remoting_client() as client, trio.open_nursery() as nursery:
        todo = iter(names)

        async def worker() -> None:
            for name in todo:
                resp = await client.invoke(master, request(name), 30)
                if resp.code != ResponseCode.SUCCESS:
                    raise CliError(f"creating {name}: {resp.remark}")
        for _ in range(inflight):
            nursery.start_soon(worker)


def _stepped_creates(cluster: bench_clusters.BenchCluster, pids: dict[str, int | None], kind: str,
                     names: list[str], request: Callable[[str], RemotingCommand], step: int, inflight: int,
                     quiet: bool) -> list[dict[str, object]]:
    """Create ``names`` a step at a time: per step the count so far, creates/s and each
    process's CPU per create."""
    steps: list[dict[str, object]] = []
    with progress_bar(f"bench topics: {kind} created", len(names), quiet=quiet) as bar:
        for start in range(0, len(names), step):
            chunk = names[start:start + step]
            before = {role: cpu_seconds(pid) or 0.0 for role, pid in pids.items() if pid}
            began = time.monotonic()
            trio.run(_create_all, cluster.master, chunk, request, inflight)
            seconds = time.monotonic() - began
            after = {role: cpu_seconds(pid) or 0.0 for role, pid in pids.items() if pid}
            row: dict[str, object] = {
                kind: start + len(chunk), "creates_per_s": round(len(chunk) / seconds, 1),
                **{f"{role}_ms_per_create": round((after[role] - before[role]) / len(chunk) * 1000, 3)
                   for role in after}}
            steps.append(row)
            bar.advance(len(chunk))
            if not quiet:
                bar.note(f"{row[kind]:>7,} {kind}: {row['creates_per_s']:>7} creates/s; CPU a create: "
                         f"master {row['master_ms_per_create']} ms, name server {row['namesrv_ms_per_create']} ms")
    return steps


async def _lookups(namesrv: str, names: list[str]) -> list[float]:
    """Seconds of each GET_ROUTEINFO_BY_TOPIC, one at a time."""
    out = []
    async with open_remoting_client() as client:
        for name in names:
            started = time.perf_counter()
            resp = await client.invoke(namesrv, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                ext_fields={"topic": name}), 10)
            out.append(time.perf_counter() - started)
            if resp.code != ResponseCode.SUCCESS:
                raise CliError(f"the name server has no route for {name}: {resp.remark}")
    return out


def _rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def bench_topics(
    topics: Annotated[int, typer.Option(min=1, help="Topics to create.")] = 20_000,
    step: Annotated[int, typer.Option(min=1, help="Creates per reported step.")] = 2_000,
    queues: Annotated[int, typer.Option(min=1, help="Queues per topic.")] = 8,
    groups: Annotated[int, typer.Option(min=0, help="Consumer groups to create after the topics.")] = 5_000,
    inflight: Annotated[int, typer.Option(min=1, help="Creates in flight.")] = 8,
    as_json: JsonOutput = False,
) -> None:
    """Create many topics and groups: rate, CPU, route latency, restart time.

    Create TOPICS topics, then GROUPS consumer groups, on a fresh one-broker cluster:
    creates/s and CPU per create of the master and the name server per step, then route lookup
    latency, broker restart time, RSS."""
    base = Path(tempfile.mkdtemp(prefix="mqctl-bench-topics-"))
    names = [f"BenchTopic{i:06d}" for i in range(topics)]
    try:
        with bench_clusters.running(base, "single") as cluster:
            config = cluster.config
            broker, ns = config.brokers[0].node, config.nameservers[0].name
            pids = {"master": running_pid(config, broker), "namesrv": running_pid(config, ns)}
            steps = _stepped_creates(cluster, pids, "topics", names, lambda name: create_topic_request(name, queues),
                                     step, inflight, as_json)
            group_steps = _stepped_creates(cluster, pids, "groups", [f"BenchGroup{i:06d}" for i in range(groups)],
                                           group_request, step, inflight, as_json)
            namesrv = config.namesrv_addresses[0]
            deadline = time.monotonic() + 120
            while True:  # registration is asynchronous: the last topic routed means all are
                try:
                    trio.run(_lookups, namesrv, [names[-1]])
                    break
                except CliError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            latencies = sorted(trio.run(_lookups, namesrv, random.Random(1).sample(names, min(LOOKUPS, topics))))
            rss = {role: _rss_mib(pid) for role, pid in pids.items()}
            spec = nodes_of(config, [broker])[0]
            stop(config, spec, force=False)
            began = time.monotonic()
            start_nodes(config, [spec], time.monotonic() + START_TIMEOUT_S * 4)
            restart_s = time.monotonic() - began
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result = {
        "machine": machine(), "date": time.strftime("%Y-%m-%d"), "topics": topics, "queues": queues,
        "inflight": inflight, "steps": steps, "groups": groups, "group_steps": group_steps,
        "route_lookup_ms": {"p50": round(statistics.median(latencies) * 1000, 3),
                            "p99": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 3)},
        "broker_restart_s": round(restart_s, 2), "rss_mib": rss,
    }
    if as_json:
        typer.echo(json.dumps(result))
        return
    lookup = result["route_lookup_ms"]
    typer.echo(f"route lookups at {topics:,} topics: p50 {lookup['p50']} ms, p99 {lookup['p99']} ms "  # type: ignore[index]
               f"(one at a time); broker restart with {groups:,} groups {restart_s:.2f} s; RSS master "
               f"{rss['master']} MiB, name server {rss['namesrv']} MiB")
