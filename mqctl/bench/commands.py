"""``mqctl bench``: throughput measured on this machine, next to a baseline from the same run."""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, cast

import trio
import trio.lowlevel
import typer

from core.client.fault import FaultRow
from core.client.producer import BATCH_MESSAGES_MAX
from core.clock import now_ms
from core.config import Config, StoreConfig
from core.store.message_store import open_message_store
from formats.msgid import UniqKeyGenerator
from formats.record import MessageRecord, encode_record
from mqctl.admin.send import fault_table
from mqctl.bench import clusters as bench_clusters
from mqctl.bench import filters as bench_filters
from mqctl.bench.analyze import bench_analyze
from mqctl.bench.failover import bench_failover
from mqctl.bench.grpc_floor import bench_grpc_floor
from mqctl.bench.metrics_cost import bench_metrics
from mqctl.bench.proxy_overhead import compare_through_proxy
from mqctl.bench.replication import bench_replication
from mqctl.bench.rmq5 import bench_grpc
from mqctl.bench.runs import SendApi, machine, median_run, run_workers, throughput_ratio
from mqctl.bench.store_batches import batch_append, batch_bodies
from mqctl.bench.topics import bench_topics
from mqctl.common.context import load, namesrv_addresses
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput, LatencyFault, ViaProxy

bench_app = typer.Typer(help="Benchmarks (results belong in docs/benchmarks.md).", no_args_is_help=True)
bench_app.command("failover")(bench_failover)
bench_app.command("metrics")(bench_metrics)
bench_app.command("topics")(bench_topics)
bench_app.command("replication")(bench_replication)
bench_app.command("analyze")(bench_analyze)
bench_app.command("grpc")(bench_grpc)
bench_app.command("grpc-floor")(bench_grpc_floor)

ASYNC_TARGET_RATIO = 0.5
SELECTION_TARGET_RATIO = 0.95  # latency fault tolerance may cost at most 5% when nothing fails
SYNC_TARGET_RPS = 20_000
YIELD_EVERY = 256


@dataclass(frozen=True, slots=True)
class Measurement:
    name: str
    records: int
    bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def make_records(count: int, body_size: int) -> list[MessageRecord]:
    body = os.urandom(body_size)
    ids = UniqKeyGenerator()
    return [
        MessageRecord(
            topic="BenchTopic", body=body, queue_id=i % 8, born_timestamp=1_700_000_000_000,
            born_host=("127.0.0.1", 50000), store_host=("127.0.0.1", 10911),
            properties={"TAGS": "TagA", "UNIQ_KEY": ids.next(now_ms()), "WAIT": "true"},
        )
        for i in range(count)
    ]


def raw_write_baseline(directory: Path, records: list[MessageRecord]) -> Measurement:
    """The same encoded bytes, one ``os.write`` per record, to a fresh file."""
    encoded = [bytes(encode_record(r)) for r in records]
    path = directory / "raw-baseline"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for data in encoded:
        os.write(fd, data)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return Measurement("raw os.write()", len(encoded), sum(map(len, encoded)), elapsed)


async def async_append(directory: Path, records: list[MessageRecord], config: StoreConfig) -> Measurement:
    async with open_message_store(directory / "async", config) as store:
        start = time.perf_counter()
        total = 0
        for i, rec in enumerate(records):
            total += store.put(rec).size
            if i % YIELD_EVERY == 0:
                await trio.lowlevel.checkpoint()  # a broker yields between requests; lets pre-faulting run
        elapsed = time.perf_counter() - start
    return Measurement("store append, async flush", len(records), total, elapsed)


async def sync_group_commit(directory: Path, records: list[MessageRecord], config: StoreConfig,
                            concurrency: int) -> Measurement:
    total = 0
    async with open_message_store(directory / "sync", config) as store:

        async def producer(chunk: list[MessageRecord]) -> None:
            nonlocal total
            for rec in chunk:
                result = await store.put_durable(rec)
                assert result.flushed, "sync flush timed out during the benchmark"
                total += result.size

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(concurrency):
                nursery.start_soon(producer, records[k::concurrency])
        elapsed = time.perf_counter() - start
        flushes = store.stats.flushes
    return Measurement(f"store append, sync flush (group commit, {concurrency} producers, "
                       f"{flushes} fsyncs)", len(records), total, elapsed)


def median(runs: list[Measurement]) -> Measurement:
    """The median run by throughput (robust to this machine's bursts in both directions)."""
    ordered = sorted(runs, key=lambda m: m.records_per_s)
    return ordered[len(ordered) // 2]


@bench_app.command("store")
def bench_store(
    records: Annotated[int, typer.Option(help="Records per async run (and per baseline run).")] = 200_000,
    body_size: Annotated[int, typer.Option(help="Body bytes per record.")] = 1024,
    sync_records: Annotated[int, typer.Option(help="Records per sync-flush run.")] = 100_000,
    concurrency: Annotated[int, typer.Option(help="Concurrent producers in the sync run.")] = 256,
    rounds: Annotated[int, typer.Option(help="Measured rounds; each runs baseline, async and sync once, interleaved.")] = 5,
    batch_size: Annotated[int, typer.Option(min=2, help="Items a batch body holds in the batch-path run.")] = 128,
    directory: Annotated[Path | None, typer.Option("--dir", help="Where to write (default: a temporary dir).")] = None,
    keep: Annotated[bool, typer.Option(help="Keep the last round's store files (for mqctl dump).")] = False,
    as_json: JsonOutput = False,
) -> None:
    """CommitLog append throughput vs a raw sequential write() baseline.

    CommitLog append throughput (1 KiB records), async and sync group commit, next to a raw
    sequential write() baseline measured in the same run. After a discarded warm-up round, runs
    are interleaved over several rounds and medians are compared: the raw baseline alone swings
    2.5x between identical runs on a shared VM, so no single pair decides the ratio."""
    base = Path(tempfile.mkdtemp(prefix="mqctl-bench-", dir=directory))
    raw_runs: list[Measurement] = []
    async_runs: list[Measurement] = []
    sync_runs: list[Measurement] = []
    batch_runs: list[Measurement] = []
    try:
        recs = make_records(records, body_size)
        bodies = batch_bodies(recs, batch_size)
        # The prepared records stand in for requests arriving off the wire: keep the cyclic
        # collector from rescanning them in every run (baseline and store runs alike).
        gc.freeze()
        for r in range(-1, rounds):  # round -1 warms the page cache and the allocator up
            last = r == rounds - 1
            round_dir = base / f"round-{r}"
            round_dir.mkdir()
            raw = raw_write_baseline(round_dir, recs)
            asy = trio.run(async_append, round_dir, recs, StoreConfig(flush="async"))
            syn = trio.run(sync_group_commit, round_dir, recs[:sync_records],
                           StoreConfig(flush="sync"), concurrency)
            bat = Measurement(f"store append, batch bodies of {batch_size} parsed and put, async flush",
                              *trio.run(batch_append, round_dir, bodies, StoreConfig(flush="async")))
            if r >= 0:
                raw_runs.append(raw)
                async_runs.append(asy)
                sync_runs.append(syn)
                batch_runs.append(bat)
            if not (keep and last):
                shutil.rmtree(round_dir, ignore_errors=True)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    baseline, asynch, sync, batched = median(raw_runs), median(async_runs), median(sync_runs), median(batch_runs)
    ratio = asynch.mb_per_s / baseline.mb_per_s
    batch_ratio = batched.mb_per_s / baseline.mb_per_s
    round_ratios = [round(a.mb_per_s / b.mb_per_s, 2) for a, b in zip(async_runs, raw_runs, strict=True)]

    def row(m: Measurement) -> dict[str, object]:
        return asdict(m) | {"mb_per_s": round(m.mb_per_s, 1), "records_per_s": round(m.records_per_s)}

    result = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "rounds": rounds,
        "median": [row(m) for m in (baseline, asynch, sync, batched)],
        "round_ratios": round_ratios,
        "all_runs": [row(m) for m in raw_runs + async_runs + sync_runs + batch_runs],
        "async_to_raw_ratio": round(ratio, 3),
        "batch_to_raw_ratio": round(batch_ratio, 3),
        "async_target_met": ratio >= ASYNC_TARGET_RATIO,
        "sync_target_met": sync.records_per_s >= SYNC_TARGET_RPS,
        "store_dir": str(base / f"round-{rounds - 1}") if keep else None,
    }
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"median of {rounds} interleaved rounds ({result['machine']}):")
    typer.echo(f"{'run':<72} {'MB/s':>8} {'records/s':>11}")
    for m in (baseline, asynch, sync, batched):
        typer.echo(f"{m.name:<72} {m.mb_per_s:>8.1f} {m.records_per_s:>11,.0f}")
    typer.echo(f"per-round async/raw ratios: {', '.join(map(str, round_ratios))}")
    typer.echo(f"async append / raw write (medians): {ratio:.2f} (target >= {ASYNC_TARGET_RATIO}) "
               f"{'OK' if result['async_target_met'] else 'BELOW TARGET'}")
    typer.echo(f"batch path / raw write (medians): {batch_ratio:.2f}")
    typer.echo(f"sync group commit: {sync.records_per_s:,.0f} records/s (target >= {SYNC_TARGET_RPS:,}) "
               f"{'OK' if result['sync_target_met'] else 'BELOW TARGET'}")
    if keep:
        typer.echo(f"store files kept in {result['store_dir']}")


# ---------------------------------------------------------------------- through the broker


def _print_run(result: dict[str, object], as_json: bool, extra: str = "") -> None:
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"{result['mode']}: {result['messages']:,} messages in {result['seconds']} s from "
               f"{result['processes']} process(es){extra}: {result['msgs_per_s']:,} msgs/s, "
               f"{result['mb_per_s']} MB/s, p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms")
    statuses = cast(dict[str, int], result.get("statuses", {}))
    if statuses:  # a producer's answers by status; only SEND_OK counts above
        typer.echo("  statuses: " + ", ".join(f"{name} {count:,}" for name, count in statuses.items()))
    cpu = cast(dict[str, float | None], result.get("cpu_us_per_msg", {}))
    if cpu:
        typer.echo("  CPU per message: " + ", ".join(f"{name} {'-' if us is None else f'{us} us'}"
                                                     for name, us in cpu.items()))
    roles = cast(dict[str, str], result.get("roles", {}))
    if roles:
        typer.echo("  broker roles: " + ", ".join(f"{node} {role}" for node, role in roles.items()))


@bench_app.command("produce")
def bench_produce(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option(help="Topic to send to (created through TBW102 if new).")] = "BenchTopic",
    messages: Annotated[int, typer.Option(help="Messages per process.")] = 100_000,
    size: Annotated[int, typer.Option(help="Body bytes.")] = 1024,
    inflight: Annotated[int, typer.Option(help="Sends in flight per process.")] = 256,
    processes: Annotated[int, typer.Option(help="Client processes.")] = 1,
    auto_batch: Annotated[bool, typer.Option("--auto-batch/--no-auto-batch",
                                             help="Let concurrent sends share batch requests (RocketMQ 5's autoBatch).")] = True,
    batch_max: Annotated[int, typer.Option(help="Messages an auto-batched request holds at most.")] = BATCH_MESSAGES_MAX,
    api: Annotated[SendApi, typer.Option(help="async: send_async with a window of N; "
                                              "sync: N tasks each awaiting send.")] = SendApi.ASYNC,
    latency_fault: LatencyFault = False,
    proxy: ViaProxy = None,
    compare_proxy: Annotated[bool, typer.Option(
        "--compare-proxy", help="Alternate rounds direct and through a proxy (--proxy, else the config's "
                                "first): each round, then the medians, their ratio and each process's CPU.")] = False,
    rounds: Annotated[int, typer.Option(help="Rounds of each kind with --compare-proxy.", min=1)] = 3,
    as_json: JsonOutput = False,
) -> None:
    """Send 1 KiB messages to the running cluster: msgs/s, MB/s, p50/p99.

    Send 1 KiB messages to the running cluster with N in flight: msgs/s, MB/s, p50/p99
    (and each client's latency fault table, with --latency-fault)."""
    config = load(ctx)
    if compare_proxy:
        if proxy is None and not config.proxies:
            raise CliError(f"--compare-proxy needs a proxy: {config.source} has no [[proxies]] (or give --proxy)")
        compare_through_proxy(config, proxy or config.proxies[0].name, rounds, as_json,
                              lambda namesrv: _produce_run(config, topic, messages, size, inflight, processes,
                                                           auto_batch, batch_max, api, latency_fault, namesrv))
        return
    result = _produce_run(config, topic, messages, size, inflight, processes, auto_batch, batch_max, api,
                          latency_fault, namesrv_addresses(config, proxy))
    batching = ""
    requests, batched = int(result["batch_requests"]), int(result["batched"])  # type: ignore[call-overload]
    if auto_batch and requests:
        batching = f", auto-batched ({batched / requests:.1f} msgs a request)"
    _print_run(result, as_json, f", {inflight} in flight each, {api.value} sends{batching}")
    if latency_fault and not as_json:
        rows = cast(list[dict[str, Any]], result["faults"])
        typer.echo(fault_table([FaultRow(**{k: v for k, v in row.items() if k != "worker"}) for row in rows]))


def _produce_run(config: Config, topic: str, messages: int, size: int, inflight: int, processes: int,
                 auto_batch: bool, batch_max: int, api: SendApi, latency_fault: bool,
                 namesrv: list[str]) -> dict[str, object]:
    result = run_workers("produce", {"namesrv": namesrv, "topic": topic, "messages": messages, "size": size,
                                     "inflight": inflight, "auto_batch": auto_batch, "api": api.value,
                                     "batch_max": batch_max, "latency_fault": latency_fault}, processes, config)
    result.update(inflight=inflight, auto_batch=auto_batch, api=api.value, latency_fault=latency_fault,
                  roles=bench_clusters.broker_roles(config))
    return result


@bench_app.command("selection")
def bench_selection(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option(help="Topic to send to (created through TBW102 if new).")] = "BenchTopic",
    messages: Annotated[int, typer.Option(help="Messages per run.")] = 50_000,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds; each runs with fault tolerance off and on "
                                                     "(off first in odd rounds, on first in even ones).")] = 5,
    inflight: Annotated[int, typer.Option(help="Sends in flight.")] = 256,
    auto_batch: Annotated[bool, typer.Option("--auto-batch/--no-auto-batch",
                                             help="Off (the default): every message is a request of its own, "
                                                  "so every message is a selection and a fault-table update.")] = False,
    as_json: JsonOutput = False,
) -> None:
    """What latency fault tolerance costs when nothing fails.

    What queue selection with latency fault tolerance costs when nothing fails: produce to
    the running cluster with it off and on, alternating; the verdict is the median of the
    rounds' on/off ratios (each pair ran back to back, so host drift between rounds cancels)."""
    config = load(ctx)
    runs: dict[bool, list[dict[str, object]]] = {False: [], True: []}
    for r in range(rounds):
        for fault_on in ((False, True) if r % 2 == 0 else (True, False)):  # who goes first alternates
            run = _produce_run(config, topic, messages, 1024, inflight, 1, auto_batch, BATCH_MESSAGES_MAX,
                               SendApi.ASYNC, fault_on, namesrv_addresses(config))
            runs[fault_on].append(run)
            if not as_json:
                typer.echo(f"round {r + 1} latency fault {'on ' if fault_on else 'off'}: {run['msgs_per_s']:>7,} msgs/s, "
                           f"p50 {run['p50_ms']} ms, p99 {run['p99_ms']} ms", err=True)
    off, on = median_run(runs[False]), median_run(runs[True])
    round_ratios = [throughput_ratio(b, a) for a, b in zip(runs[False], runs[True], strict=True)]
    ratio = sorted(round_ratios)[len(round_ratios) // 2]
    result = {"machine": machine(),
              "date": time.strftime("%Y-%m-%d"), "rounds": rounds, "messages": messages, "inflight": inflight,
              "auto_batch": auto_batch, "off_msgs_per_s": off["msgs_per_s"], "on_msgs_per_s": on["msgs_per_s"],
              "round_ratios": round_ratios, "on_to_off": ratio, "target_met": ratio >= SELECTION_TARGET_RATIO}
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"median of {rounds} rounds ({result['machine']}), {inflight} in flight, "
               f"{'auto-batched' if auto_batch else 'one request a message'}: off {off['msgs_per_s']:,} msgs/s, "
               f"on {on['msgs_per_s']:,} msgs/s")
    typer.echo("per-round on/off: " + ", ".join(str(x) for x in result["round_ratios"]))  # type: ignore[attr-defined]
    typer.echo(f"on / off (median of the rounds): {ratio:.3f} (target >= {SELECTION_TARGET_RATIO}) "
               f"{'OK' if result['target_met'] else 'BELOW TARGET'}")


@bench_app.command("consume")
def bench_consume(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option(help="Topic to read from the beginning to its current end.")] = "BenchTopic",
    processes: Annotated[int, typer.Option(help="Client processes (queues are split between them).")] = 1,
    compare_filters: Annotated[bool, typer.Option(
        "--compare-filters", help="Send a fresh topic a mixed stream, then read it all by every message, by a "
                                  "tag and by an SQL92 selector picking the same 1 in 10 (needs "
                                  "broker.enable_property_filter).")] = False,
    messages: Annotated[int, typer.Option(min=10, help="--compare-filters: messages in the stream.")] = 50_000,
    size: Annotated[int, typer.Option(min=1, help="--compare-filters: body bytes.")] = 256,
    rounds: Annotated[int, typer.Option(min=1, help="--compare-filters: rounds, each reading by every "
                                                    "subscription once.")] = 3,
    as_json: JsonOutput = False,
) -> None:
    """Pull a topic from its start to its current end, every queue in flight at once."""
    config = load(ctx)
    if compare_filters:
        result = bench_filters.compare_filters(config, messages, size, rounds, processes)
        typer.echo(json.dumps(result) if as_json else "\n".join(bench_filters.comparison_lines(result)))
        return
    result = run_workers("consume", {"namesrv": config.namesrv_addresses, "topic": topic}, processes, config)
    _print_run(result, as_json)


