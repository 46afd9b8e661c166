"""``mqctl analyze``: the Spark inspection reports over store files, printed as tables or written
as Parquet/CSV/JSON, with PNG charts.

Spark starts only here (``dump`` and ``status`` never pay for it). Its JVM and Python workers
write their logs to a file, not the terminal; the terminal gets one progress line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from core.config import Config
from mqctl.analyze.output import write_charts, write_table
from mqctl.analyze.progress import ProgressLine
from mqctl.common import context
from mqctl.common.errors import CliError
from mqctl.common.output import print_rows

FORMATS = ("table", "json", "parquet", "csv")


def analyze(
    ctx: typer.Context,
    stores: Annotated[list[Path] | None, typer.Argument(
        help="Node directories, CommitLog directories or segment files (default: every broker of the config).")] = None,
    report: Annotated[list[str] | None, typer.Option(
        "--report", "-r", help="Report name, repeatable: topics queues time sizes keys tags producers latency "
                               "retries duplicates lag divergence, or all.")] = None,
    master: Annotated[str, typer.Option(help="Spark master: local[*], local[N], spark://host:port, yarn.")] = "local[*]",
    out: Annotated[Path | None, typer.Option(help="Directory for report files, PNG charts and the Spark log.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table | json | parquet | csv (files need --out).")] = "table",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON, one object a line: --format json.")] = False,
    rows: Annotated[int, typer.Option(help="Rows of each table to print.")] = 20,
    bucket_seconds: Annotated[int, typer.Option(help="Width of the store-time histogram buckets.")] = 60,
) -> None:
    """Inspect stores with Spark: volumes, distributions, lag, divergence.

    Inspect stores with Spark: volumes, time and size distributions, keys, producers, latency,
    retries, duplicates, queue lag and replica divergence."""
    from spark.analysis import ALL, REPORT_NAMES, StoreRef

    if as_json:
        if fmt not in ("table", "json"):
            raise CliError(f"give --json or --format {fmt}, not both")
        fmt = "json"
    if fmt not in FORMATS:
        raise CliError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt in ("parquet", "csv") and out is None:
        raise CliError(f"--format {fmt} writes files: give --out DIR")
    names = [n for item in (report or [ALL]) for n in item.split(",") if n]
    unknown = [n for n in names if n != ALL and n not in REPORT_NAMES]
    if unknown:
        raise CliError(f"unknown report {', '.join(unknown)}; choose from {', '.join(REPORT_NAMES)} or all")
    if stores:
        refs = [StoreRef.of(p) for p in stores]
        pairs = None
    else:
        refs, pairs = _config_stores(context.load(ctx))
    missing = [str(r.path) for r in refs if not r.path.exists()]
    if missing:
        raise CliError(f"no such store: {', '.join(missing)}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    log_path = (out or Path.home() / ".mqctl" / "logs") / "spark.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with quiet_session(master, log_path) as spark, ProgressLine(spark.sparkContext) as progress:
        from spark.analysis import build_reports

        try:
            tables = build_reports(spark, refs, names, pairs=pairs, bucket_ms=bucket_seconds * 1000)
            for table in tables:
                progress.stage(table.title)
                frame_rows = [row.asDict(recursive=True) for row in table.frame.collect()]
                progress.clear()
                _emit(table, frame_rows, fmt, rows, out)
                if out is not None:
                    write_charts(table.name, frame_rows, out)
        except Exception as exc:
            progress.clear()
            if type(exc).__module__.startswith(("pyspark", "py4j")):
                raise CliError(f"Spark failed: {str(exc).splitlines()[0]} (details in {log_path})") from None
            raise
    typer.echo(f"analyzed {len(refs)} store(s) in {time.monotonic() - started:.1f}s on {master}"
               + (f"; files in {out}" if out else ""), err=True)


def _config_stores(config: Config) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """One store per broker group for the record reports (a replica holds the same records), and
    every replica paired with that one for divergence."""
    from spark.analysis import StoreRef

    groups: dict[str, list[Any]] = {}
    for broker in sorted(config.brokers, key=lambda b: (b.name, b.id)):
        groups.setdefault(broker.name, []).append(StoreRef(broker.node, config.data_dir / broker.node))
    if not groups:
        raise CliError(f"{config.source} lists no brokers; name the stores to analyze")
    primaries = [members[0] for members in groups.values()]
    pairs = [(members[0], other) for members in groups.values() for other in members[1:]]
    return primaries, pairs


@contextlib.contextmanager
def quiet_session(master: str, log_path: Path, app_name: str = "mqctl analyze",
                  conf: dict[str, str] | None = None) -> Iterator[Any]:
    """A session whose JVM (and the Python workers it starts) write to ``log_path``."""
    from spark.session import JavaMissing, start_session

    typer.echo(f"starting Spark ({master}); its log: {log_path}", err=True)
    with open(log_path, "ab") as log, _stderr_to(log.fileno()):
        try:
            spark = start_session(master, app_name, conf)
        except JavaMissing as exc:
            raise CliError(str(exc)) from None
        except Exception as exc:
            raise CliError(f"Spark did not start on {master}: {str(exc).splitlines()[0]} (see {log_path})") from None
    try:
        yield spark
    finally:
        with open(log_path, "ab") as log, _stderr_to(log.fileno()):
            spark.stop()


@contextlib.contextmanager
def _stderr_to(fd: int) -> Iterator[None]:
    """Point fd 2 at ``fd`` while processes are spawned, so they inherit it."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _emit(table: Any, frame_rows: list[dict[str, Any]], fmt: str, limit: int, out: Path | None) -> None:
    if fmt == "json":
        for row in frame_rows:
            typer.echo(json.dumps({"report": table.name, "title": table.title, **row}, default=str))
    else:
        typer.echo(f"\n== {table.title} ({len(frame_rows)} rows)")
        if frame_rows:
            print_rows([_cells(r) for r in frame_rows[:limit]], table.frame.columns, as_json=False)
        else:
            typer.echo("(none)")
        if len(frame_rows) > limit:
            typer.echo(f"... {len(frame_rows) - limit} more (--rows, or --out for every row)")
    if out is not None:
        write_table(table.stem, frame_rows, table.frame.columns, out, "json" if fmt == "table" else fmt)


def _cells(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (f"{v:.1f}" if isinstance(v, float) else v) for k, v in row.items()}
