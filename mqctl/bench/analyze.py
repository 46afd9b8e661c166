"""``mqctl bench analyze``: the full-record scan of a generated store on Spark next to a
single-process ``formats`` scan of the same files, in the same run, both warm.

Full-record scan: every record decoded (all fields, properties parsed), its body CRC checked,
and count, bytes, CRC failures and the store-time range aggregated.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from formats.segments import RecordAt, scan_log
from mqctl.bench.runs import machine
from mqctl.bench.synthetic_store import generate_store
from mqctl.common.errors import CliError

SPARK_TARGET_MB_S = 600.0
SPARK_TARGET_RATIO = 1.5
MANIFEST = "bench-store.json"


def bench_analyze(
    directory: Annotated[Path, typer.Option("--dir", help="Where the generated store lives (kept and reused).")] =
        Path("data/bench-analyze"),
    size_gib: Annotated[float, typer.Option(help="Record bytes to generate.")] = 1.0,
    segment_mib: Annotated[int, typer.Option(help="Segment size.")] = 1024,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[2]",
    range_mb: Annotated[float, typer.Option(help="Byte range per Spark task.")] = 256,
    rounds: Annotated[int, typer.Option(help="Timed rounds of each scan (after one warm-up).")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Spark full-record scan vs a single-process scan of the same store.

    Spark full-record scan vs a single-process formats scan of the same store (targets:
    >= 600 MB/s and >= 1.5x)."""

    store = _ensure_store(directory, int(size_gib * (1 << 30)), segment_mib << 20)
    log_dir = directory / "commitlog"
    _warm_page_cache(log_dir)
    baseline = [_formats_scan(log_dir) for _ in range(rounds)]
    spark_runs = _spark_scans(directory, master, range_mb, rounds)
    best_base = max(baseline, key=lambda r: r["mb_per_s"])
    best_spark = max(spark_runs, key=lambda r: r["mb_per_s"])
    for run in spark_runs:
        if run["records"] != best_base["records"] or run["bytes"] != best_base["bytes"]:
            raise CliError(f"Spark saw {run['records']} records / {run['bytes']} bytes, formats "
                           f"{best_base['records']} / {best_base['bytes']}")
    result = {
        "store": str(directory), "records": store["records"], "record_bytes": store["bytes"],
        "segments": store["segments"], "master": master, "range_mb": range_mb, "machine": machine(),
        "formats_mb_per_s": [r["mb_per_s"] for r in baseline], "spark_mb_per_s": [r["mb_per_s"] for r in spark_runs],
        "ratio": round(best_spark["mb_per_s"] / best_base["mb_per_s"], 2),
        "targets": {"spark_mb_per_s": SPARK_TARGET_MB_S, "ratio": SPARK_TARGET_RATIO},
    }
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"store: {store['records']} records, {store['bytes'] / 1e6:.0f} MB in {store['segments']} segment(s), "
               f"{directory}; {machine()}")
    typer.echo(f"formats, one process  : {_runs_text(result['formats_mb_per_s'])} MB/s")
    typer.echo(f"spark {master:<17}: {_runs_text(result['spark_mb_per_s'])} MB/s "
               f"(target >= {SPARK_TARGET_MB_S:.0f})")
    typer.echo(f"ratio (best / best)   : {result['ratio']}x (target >= {SPARK_TARGET_RATIO}x)")


def _runs_text(values: object) -> str:
    return " ".join(f"{v:.0f}" for v in values)  # type: ignore[attr-defined]


def _ensure_store(directory: Path, total: int, segment: int) -> dict[str, int]:
    """The generated store, made once per size and segment size."""
    manifest = directory / MANIFEST
    want = {"bytes_asked": total, "segment": segment}
    if manifest.exists():
        have = json.loads(manifest.read_text())
        if {k: have.get(k) for k in want} == want:
            return have  # type: ignore[no-any-return]
    if directory.exists() and any(directory.iterdir()) and not manifest.exists():
        raise CliError(f"{directory} is not empty and holds no bench store; choose another --dir")
    for old in (directory / "commitlog").glob("*"):
        old.unlink()
    typer.echo(f"generating {total / (1 << 30):.2f} GiB of records in {directory} ...", err=True)
    made = generate_store(directory / "commitlog", total, segment_size=segment)
    info = {**want, "records": made.records, "bytes": made.bytes, "segments": made.segments}
    manifest.write_text(json.dumps(info))
    return info


def _warm_page_cache(log_dir: Path) -> None:
    for f in sorted(log_dir.iterdir()):
        with open(f, "rb") as fh:
            while fh.read(16 << 20):
                pass


def _formats_scan(log_dir: Path) -> dict[str, float]:
    started = time.perf_counter()
    records = size = bad = 0
    lo, hi = 1 << 62, 0
    for item in scan_log(log_dir, check_crc=False):
        if isinstance(item, RecordAt):
            rec = item.record
            records += 1
            size += rec.total_size
            bad += not rec.body_crc_ok
            lo, hi = min(lo, rec.store_timestamp), max(hi, rec.store_timestamp)
    seconds = time.perf_counter() - started
    return {"records": records, "bytes": size, "bad_crc": bad, "seconds": seconds, "mb_per_s": size / seconds / 1e6}


def _spark_scans(directory: Path, master: str, range_mb: float, rounds: int) -> list[dict[str, float]]:
    from pyspark.sql import functions as F

    from mqctl.analyze.commands import quiet_session

    cores = master[6:-1] if master.startswith("local[") else str(os.cpu_count())
    conf = {"spark.default.parallelism": cores}
    with quiet_session(master, directory / "spark.log", "mqctl bench analyze", conf) as spark:
        frame = spark.read.format("commitlog").option("range_mb", str(range_mb)).load(str(directory))
        query = frame.agg(F.count("*"), F.sum("size"), F.sum((~F.col("body_crc_ok")).cast("int")),
                          F.min("store_ts"), F.max("store_ts"))
        runs = []
        for i in range(rounds + 1):  # the first warms the Python workers and the JVM
            started = time.perf_counter()
            records, size, bad, _, _ = query.first()  # type: ignore[misc]
            seconds = time.perf_counter() - started
            if i:
                runs.append({"records": records, "bytes": size, "bad_crc": bad, "seconds": seconds,
                             "mb_per_s": size / seconds / 1e6})
        return runs
