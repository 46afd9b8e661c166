"""``mqctl bench metrics``: what serving metrics costs a producer. Rounds alternate (off then on,
then on then off, ...), each on a fresh one-broker cluster: with ``[metrics] enabled = false``
(no endpoint, no request timed), and with metrics on and every node scraped once a second while
the producer runs. The verdict is the median of the rounds' on/off throughput ratios, beside
the CPU per message of every process (from /proc)."""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

from mqctl.bench import clusters as bench_clusters
from mqctl.bench.runs import machine, run_workers
from mqctl.common.options import JsonOutput
from mqctl.common.progress import progress_bar

Run = dict[str, object]
SCRAPE_INTERVAL_S = 1.0
QUEUES = 8


class Scraper:
    """Scrapes every node of a cluster each second on a thread, as a Prometheus would."""

    def __init__(self, cluster: bench_clusters.BenchCluster) -> None:
        from mqctl.top.scrape import targets  # prometheus_client's parser: loaded for this bench only

        self._found = targets(cluster.config)
        self._stop = threading.Event()
        self.scrapes = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from mqctl.top.scrape import scrape

        while not self._stop.is_set():
            for target in self._found:
                got = scrape(target)
                self.scrapes += 1
                self.failures += bool(got.error)
            self._stop.wait(SCRAPE_INTERVAL_S)


def one_run(directory: Path, metrics: bool, round_no: int, worker_args: dict[str, object]) -> Run:
    with bench_clusters.running(directory, "single", metrics=metrics) as cluster:
        bench_clusters.create_topic(cluster, str(worker_args["topic"]), QUEUES)
        scraper = Scraper(cluster) if metrics else None
        if scraper is not None:
            scraper.__enter__()
        try:
            result = run_workers("produce", dict(worker_args, namesrv=cluster.config.namesrv_addresses), 1,
                                 cluster.config)
        finally:
            if scraper is not None:
                scraper.__exit__()
    row: Run = {"round": round_no, "metrics": "on" if metrics else "off",
                **{k: result[k] for k in ("messages", "seconds", "msgs_per_s", "p50_ms", "p99_ms", "cpu_us_per_msg")}}
    if scraper is not None:
        row.update(scrapes=scraper.scrapes, scrape_failures=scraper.failures)
    return row


def bench_metrics(
    messages: Annotated[int, typer.Option(min=1, help="Messages per run.")] = 200_000,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds; each runs metrics off and on once.")] = 3,
    inflight: Annotated[int, typer.Option(help="Sends in flight.")] = 256,
    auto_batch: Annotated[bool, typer.Option("--auto-batch/--no-auto-batch",
                                             help="Let concurrent sends share batch requests.")] = True,
    as_json: JsonOutput = False,
) -> None:
    """What scraping metrics costs: produce throughput with metrics off and on.

    Produce throughput with metrics off, and on with every node scraped each second, on
    fresh one-broker clusters in alternating rounds: msgs/s, the on/off ratio, CPU per message
    of each process."""
    base = Path(tempfile.mkdtemp(prefix="mqctl-bench-metrics-"))
    worker_args: dict[str, object] = {"topic": "BenchTopic", "messages": messages, "size": 1024, "inflight": inflight,
                                      "auto_batch": auto_batch, "api": "async", "batch_max": 32, "latency_fault": False}
    runs: list[Run] = []
    try:
        with progress_bar("bench metrics: runs", 2 * rounds, quiet=as_json) as bar:
            for r in range(rounds):
                for metrics in ((False, True) if r % 2 == 0 else (True, False)):
                    run_dir = base / f"round-{r + 1}-{'on' if metrics else 'off'}"
                    run_dir.mkdir()
                    runs.append(one_run(run_dir, metrics, r + 1, worker_args))
                    shutil.rmtree(run_dir, ignore_errors=True)
                    bar.advance()
                    if not as_json:
                        run = runs[-1]
                        bar.note(f"round {r + 1} metrics {run['metrics']:<3}: {run['msgs_per_s']:>7,} msgs/s, "
                                 f"CPU us/msg {run['cpu_us_per_msg']}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    by = {kind: [run for run in runs if run["metrics"] == kind] for kind in ("off", "on")}
    ratios = [float(on["msgs_per_s"]) / float(off["msgs_per_s"])  # type: ignore[arg-type]
              for off, on in zip(by["off"], by["on"], strict=True)]
    result: Run = {
        "machine": machine(), "date": time.strftime("%Y-%m-%d"), "messages": messages, "rounds": rounds,
        "inflight": inflight, "auto_batch": auto_batch, "runs": runs,
        "ratio": round(statistics.median(ratios), 3), "round_ratios": [round(x, 3) for x in ratios],
        **{kind: {"msgs_per_s": round(statistics.median(float(x["msgs_per_s"]) for x in got)),  # type: ignore[arg-type]
                  "cpu_us_per_msg": _mean_cpu(got)} for kind, got in by.items()},
    }
    if as_json:
        typer.echo(json.dumps(result))
        return
    for kind in ("off", "on"):
        part = result[kind]
        assert isinstance(part, dict)
        cpu = ", ".join(f"{name} {us} us" for name, us in part["cpu_us_per_msg"].items())
        typer.echo(f"metrics {kind:<3} {part['msgs_per_s']:>7,} msgs/s (median); CPU per message: {cpu}")
    typer.echo(f"metrics on and scraped every second: {result['ratio']:.3f} of off (median of the rounds' "
               f"ratios {', '.join(f'{x:.3f}' for x in ratios)})")


def _mean_cpu(runs: list[Run]) -> dict[str, float]:
    per: dict[str, list[float]] = {}
    for run in runs:
        for name, us in dict(run["cpu_us_per_msg"] or {}).items():  # type: ignore[call-overload]
            if us is not None:
                per.setdefault(name, []).append(float(us))
    return {name: round(statistics.mean(values), 2) for name, values in per.items()}
