"""``mqctl bench replication``: produce throughput and CPU per message of every replication
setup (one broker, an async and a sync master-slave pair, a raft group of three), each a fresh
cluster on free loopback ports, interleaved over rounds."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from core.client.producer import BATCH_MESSAGES_MAX
from mqctl.bench import clusters as bench_clusters
from mqctl.bench.clusters import SETUPS
from mqctl.bench.runs import SendApi, machine, median_run, run_workers, throughput_ratio
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.progress import progress_bar

ASYNC_TO_SINGLE_TARGET = 0.85
SYNC_TO_ASYNC_TARGET = 0.80
CATCH_UP_TIMEOUT_S = 60.0
BENCH_QUEUES = 16


def _replicated_run(directory: Path, setup: str, round_no: int, worker_args: dict[str, object],
                    processes: int) -> dict[str, object]:
    """One produce run against a fresh ``setup`` cluster in ``directory``: throughput, and the
    CPU per acknowledged message of each broker by role and of the clients; for a master-slave
    pair also whether the slave caught up and stayed linked throughout."""
    with bench_clusters.running(directory, setup) as cluster:
        bench_clusters.create_topic(cluster, str(worker_args["topic"]), BENCH_QUEUES)
        roles = bench_clusters.broker_roles(cluster.config)
        cpu_before, since = bench_clusters.broker_cpu_seconds(cluster, roles), time.monotonic()
        result = run_workers("produce", dict(worker_args, namesrv=cluster.config.namesrv_addresses), processes,
                             cluster.config)
        row: dict[str, object] = {"round": round_no, "setup": setup}
        row.update({k: result[k] for k in ("messages", "seconds", "msgs_per_s", "mb_per_s", "p50_ms", "p99_ms")})
        caught = bench_clusters.wait_caught_up(cluster, CATCH_UP_TIMEOUT_S) if cluster.slave else None
        # where the brokers' CPU went, per message (a slave's includes catching up)
        cpu_after = bench_clusters.broker_cpu_seconds(cluster, roles)
        count = max(1, int(result["messages"]))  # type: ignore[call-overload]
        cpu = {role: round((cpu_after[role] - cpu_before.get(role, 0.0)) / count * 1e6, 1) for role in cpu_after}
        clients = result["cpu_us_per_msg"]
        assert isinstance(clients, dict)
        row["cpu_us_per_msg"] = dict(sorted(cpu.items()), clients=clients["clients"])
        if caught is not None:
            elapsed = time.monotonic() - since
            links = bench_clusters.slave_links(cluster)
            linked_s = max((link.connected_seconds for link in links), default=0.0)
            row.update(caught_up=caught.caught_up, master_offset=caught.master_offset,
                       slave_offset=caught.slave_offset, catch_up_s=round(caught.seconds, 2),
                       # a link that dropped mid-run would let sync sends answer SLAVE_NOT_AVAILABLE
                       # (connectedSeconds is rounded to 0.1 s)
                       slave_linked_throughout=linked_s >= elapsed - 0.1)
    return row


def _setups(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SETUPS]
    if unknown or not chosen:
        raise CliError(f"--setups takes some of {', '.join(SETUPS)} (got {text!r})")
    return [s for s in SETUPS if s in chosen]


def bench_replication(
    messages: Annotated[int, typer.Option(min=1, help="Messages per process and run.")] = 100_000,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds; each runs every setup once, in order.")] = 3,
    setups: Annotated[str, typer.Option(help=f"Setups to run, comma-separated: {', '.join(SETUPS)}.")]
    = ",".join(SETUPS),
    inflight: Annotated[int, typer.Option(help="Sends in flight per process.")] = 256,
    processes: Annotated[int, typer.Option(help="Client processes.")] = 1,
    api: Annotated[SendApi, typer.Option(help="async: send_async with a window of N; "
                                              "sync: N tasks each awaiting send.")] = SendApi.ASYNC,
    directory: Annotated[Path | None, typer.Option("--dir", help="Where the clusters live (default: a temporary dir).")] = None,
    keep: Annotated[bool, typer.Option(help="Keep every run's cluster folder (conf.toml, data, logs).")] = False,
    as_json: JsonOutput = False,
) -> None:
    """Produce throughput: one broker vs async, sync and raft replication.

    Produce throughput of one broker, an async master-slave pair, a sync one and a raft
    group of three, each a fresh cluster on free loopback ports, interleaved over rounds:
    msgs/s, p50/p99, CPU per message of each broker by role and of the clients, the ratios
    async/single and sync/async, and whether each slave caught up with its master."""
    chosen = _setups(setups)
    base = Path(tempfile.mkdtemp(prefix="mqctl-bench-replication-", dir=directory))
    worker_args: dict[str, object] = {"topic": "BenchTopic", "messages": messages, "size": 1024,
                                      "inflight": inflight, "auto_batch": True, "api": api.value,
                                      "batch_max": BATCH_MESSAGES_MAX}
    runs: list[dict[str, object]] = []
    try:
        with progress_bar("bench replication: runs", rounds * len(chosen), quiet=as_json) as bar:
            for r in range(rounds):
                for setup in chosen:
                    run_dir = base / f"round-{r + 1}-{setup}"
                    run_dir.mkdir()
                    runs.append(_replicated_run(run_dir, setup, r + 1, worker_args, processes))
                    if not keep:
                        shutil.rmtree(run_dir, ignore_errors=True)
                    bar.advance()
                    if not as_json:
                        bar.note(_replication_line(runs[-1]))
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    result = _summary(runs, chosen, rounds)
    result.update(machine=machine(), date=time.strftime("%Y-%m-%d"), messages=messages, processes=processes,
                  inflight=inflight, api=api.value, dir=str(base) if keep else None)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        _print_replication(result)
    if not result["slaves_caught_up"]:
        raise CliError(f"a slave did not catch up with its master within {CATCH_UP_TIMEOUT_S:.0f}s")


def _summary(runs: list[dict[str, object]], chosen: list[str], rounds: int) -> dict[str, object]:
    """Medians by setup, the ratios the setups chosen allow (per round and of the medians)."""
    by_setup = {s: [run for run in runs if run["setup"] == s] for s in chosen}
    medians = {s: median_run(rs) for s, rs in by_setup.items()}
    pairs = {"async_to_single": ("async", "single"), "sync_to_async": ("sync", "async")}
    pairs = {name: pair for name, pair in pairs.items() if set(pair) <= set(chosen)}
    targets = {"async_to_single": ASYNC_TO_SINGLE_TARGET, "sync_to_async": SYNC_TO_ASYNC_TARGET}
    result: dict[str, object] = {
        "rounds": rounds, "setups": chosen, "runs": runs,
        "median": {s: {k: m[k] for k in ("round", "msgs_per_s", "p50_ms", "p99_ms", "cpu_us_per_msg")}
                   for s, m in medians.items()},
        "round_ratios": [dict({"round": r + 1}, **{name: throughput_ratio(by_setup[a][r], by_setup[b][r])
                                                   for name, (a, b) in pairs.items()}) for r in range(rounds)],
        "slaves_caught_up": all(run["caught_up"] for run in runs if "caught_up" in run),
    }
    for name, (a, b) in pairs.items():
        result[name] = throughput_ratio(medians[a], medians[b])
        result[name.split("_")[0] + "_target_met"] = result[name] >= targets[name]  # type: ignore[operator]
    return result


def _replication_line(run: dict[str, object]) -> str:
    cpu = run["cpu_us_per_msg"]
    assert isinstance(cpu, dict)
    line = (f"round {run['round']} {run['setup']:<7} {run['messages']:,} messages: {run['msgs_per_s']:>7,} msgs/s, "
            f"p50 {run['p50_ms']} ms, p99 {run['p99_ms']} ms, CPU "
            + ", ".join(f"{role} {us} us" for role, us in cpu.items()) + " a message")
    if "caught_up" in run:
        line += (f"; slave {'caught up' if run['caught_up'] else 'NOT caught up'} at offset {run['slave_offset']:,} "
                 f"(master {run['master_offset']:,}) after {run['catch_up_s']} s")
        if not run["slave_linked_throughout"]:
            line += ", its link dropped during the run"
    return line


def _print_replication(result: dict[str, object]) -> None:
    medians = result["median"]
    assert isinstance(medians, dict)
    typer.echo(f"median of {result['rounds']} interleaved rounds ({result['machine']}), {result['processes']} "
               f"process(es), {result['inflight']} in flight, {result['api']} sends:")
    typer.echo(f"{'setup':<8} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8}  CPU us a message")
    for setup, m in medians.items():
        cpu = ", ".join(f"{role} {us}" for role, us in m["cpu_us_per_msg"].items())
        typer.echo(f"{setup:<8} {m['msgs_per_s']:>9,} {m['p50_ms']:>8} {m['p99_ms']:>8}  {cpu}")
    ratios = result["round_ratios"]
    assert isinstance(ratios, list)
    for name, target in (("async_to_single", ASYNC_TO_SINGLE_TARGET), ("sync_to_async", SYNC_TO_ASYNC_TARGET)):
        if name not in result:
            continue
        label = name.replace("_to_", " / ")
        typer.echo(f"per-round {label}: " + ", ".join(str(r[name]) for r in ratios))
        met = result[name.split("_")[0] + "_target_met"]
        typer.echo(f"{label} (medians): {result[name]:.2f} (target >= {target}) {'OK' if met else 'BELOW TARGET'}")
    typer.echo(f"slaves caught up: {'yes, every run' if result['slaves_caught_up'] else 'NO'}")
    if result["dir"]:
        typer.echo(f"cluster folders kept in {result['dir']}")
