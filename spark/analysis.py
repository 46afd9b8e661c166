"""Running reports over stores: loading the stores named into DataFrames and choosing the reports.

A store is a node directory (``<data_dir>/<node>``: ``commitlog/``, ``consumequeue/``,
``config/consumerOffsets.json``), a CommitLog directory, or one segment file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spark import reports
from spark.sources import consumequeue_dir

ALL = "all"
RECORD_REPORT_NAMES = tuple(r.name for r in reports.RECORD_REPORTS)
REPORT_NAMES = (*RECORD_REPORT_NAMES, "lag", "divergence")


@dataclass(frozen=True)
class StoreRef:
    label: str
    path: Path

    @classmethod
    def of(cls, path: Path) -> StoreRef:
        """Labelled by its node directory's name (``data/broker-a-0/commitlog``: broker-a-0)."""
        return cls(path.parent.name if path.name in ("commitlog", "") else path.name, path)


@dataclass(frozen=True)
class ReportTable:
    name: str
    title: str
    frame: DataFrame

    @property
    def stem(self) -> str:
        """A file name for it: ``divergence-broker-a-0-vs-broker-a-1`` for the reports that come
        once per store or pair (their titles say which after ": ")."""
        _, sep, subject = self.title.partition(": ")
        return self.name + ("-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", subject).strip("-") if sep else "")


def load_records(spark: SparkSession, stores: list[StoreRef], *, with_body: bool = False,
                 range_mb: float | None = None) -> DataFrame:
    frames = []
    for store in stores:
        reader = spark.read.format("commitlog").option("store", store.label).option("body", str(with_body).lower())
        if range_mb is not None:
            reader = reader.option("range_mb", str(range_mb))
        frames.append(reader.load(str(store.path)))
    return reduce(DataFrame.unionByName, frames)


def load_entries(spark: SparkSession, stores: list[StoreRef]) -> DataFrame:
    frames = [spark.read.format("consumequeue").option("store", s.label).load(str(s.path)) for s in stores]
    return reduce(DataFrame.unionByName, frames)


def committed_offsets(spark: SparkSession, stores: list[StoreRef]) -> DataFrame:
    """Committed consumer offsets of the stores' brokers (``config/consumerOffsets.json``,
    ``{"offsetTable": {"topic@group": {"queueId": offset}}}``)."""
    rows: list[tuple[str, str, str, int, int]] = []
    for store in stores:
        path = store.path / "config" / "consumerOffsets.json"
        if not path.is_file():
            continue
        table = json.loads(path.read_text() or "{}").get("offsetTable", {})
        for key, queues in table.items():
            topic, _, group = key.partition("@")
            rows.extend((store.label, group, topic, int(q), int(o)) for q, o in queues.items())
    return spark.createDataFrame(rows, "store STRING, group STRING, topic STRING, queue_id INT, offset BIGINT")


def has_queues(store: StoreRef) -> bool:
    return store.path.is_dir() and consumequeue_dir(store.path) != store.path


def build_reports(spark: SparkSession, stores: list[StoreRef], names: list[str], *,
                  pairs: list[tuple[StoreRef, StoreRef]] | None = None,
                  bucket_ms: int = 60_000) -> list[ReportTable]:
    """The report tables asked for (``all``: every report that applies to these stores).

    ``pairs`` are the replicas to compare for ``divergence`` (default: the first store against
    each other one)."""
    wanted = list(REPORT_NAMES) if ALL in names else names
    unknown = [n for n in wanted if n not in REPORT_NAMES]
    if unknown:
        raise ValueError(f"unknown report {', '.join(unknown)}; choose from {', '.join(REPORT_NAMES)} or all")
    out: list[ReportTable] = []
    # decoded once, kept in memory for every record report
    records = load_records(spark, stores).cache() if any(n in wanted for n in RECORD_REPORT_NAMES) else None
    for report in reports.RECORD_REPORTS:
        if report.name in wanted and records is not None:
            frame = (reports.time_histogram(records, bucket_ms) if report.name == "time" else report.run(records))
            out.append(ReportTable(report.name, report.title, frame))
    queue_stores = [s for s in stores if has_queues(s)]
    if "lag" in wanted and queue_stores:
        out.extend(ReportTable("lag", f"Queue depth and consumer lag: {s.label}",
                               reports.queue_lag(load_entries(spark, [s]),
                                                 committed_offsets(spark, [s]).drop("store")))
                   for s in queue_stores)
    if "divergence" in wanted:
        for a, b in pairs if pairs is not None else [(stores[0], s) for s in stores[1:]]:
            frame = reports.divergence(load_records(spark, [a]), load_records(spark, [b]))
            out.append(ReportTable("divergence", f"Replica divergence: {a.label} vs {b.label}", frame))
    return out


def first_divergence(frame: DataFrame) -> int | None:
    """The first offset where two replicas disagree, from a divergence table."""
    row = frame.agg({"from_offset": "min"}).first()
    return None if row is None else row[0]
