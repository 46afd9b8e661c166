"""The ``commitlog`` and ``consumequeue`` PySpark data sources (``pyspark.sql.datasource``).

``spark.read.format("commitlog").load(path)`` gives one row per record of a store (a node
directory, its ``commitlog/`` directory, or one segment file, live or ``.zst``); option
``body=true`` adds the stored body, ``range_mb`` sets the split size, ``store`` the label rows
carry (default: the path). A schema naming a subset of the columns
(``.schema("topic STRING, size INT")``) builds and ships only those; every record is still
decoded and checked. ``spark.read.format("consumequeue").load(path)`` gives one row per
ConsumeQueue entry of a node directory or its ``consumequeue/``. Workers decode with
:mod:`formats` only and yield Arrow record batches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from formats.columns import scan_columns
from formats.consume_queue import CQ_ENTRY_SIZE, iter_cq_entries
from formats.segments import Damage, SegmentSource, log_dir_of, open_segment, parse_segment_name
from spark.arrow_batches import RunBatches, commitlog_batch
from spark.ranges import DEFAULT_RANGE_BYTES, ByteRange, QueueFiles, commitlog_ranges, consume_queue_groups
from spark.schema import CONSUMEQUEUE_FIELDS, arrow_schema, chosen_fields, commitlog_fields, ddl

log = logging.getLogger(__name__)
BATCH_ROWS = 16384


def _flag(options: Mapping[str, str], name: str) -> bool:
    return str(options.get(name, "false")).lower() in ("1", "true", "yes")


def consumequeue_dir(path: Path) -> Path:
    return path / "consumequeue" if (path / "consumequeue").is_dir() else path


@dataclass
class RangePartition(InputPartition):
    byte_range: ByteRange


@dataclass
class QueuePartition(InputPartition):
    queue_files: QueueFiles


class CommitLogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "commitlog"

    def schema(self) -> str:
        return ddl(commitlog_fields(_flag(self.options, "body")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return CommitLogReader(dict(self.options), schema.fieldNames())


class CommitLogReader(DataSourceReader):
    def __init__(self, options: dict[str, str], columns: list[str] | None = None) -> None:
        if "path" not in options:
            raise ValueError("commitlog: give the store to read: .load(path)")
        self.path = Path(options["path"])
        self.store = options.get("store", options["path"])
        self.fields = chosen_fields(columns) if columns else commitlog_fields(_flag(options, "body"))
        self.with_body = any(f[0] == "body" for f in self.fields)
        self.range_bytes = int(float(options.get("range_mb", DEFAULT_RANGE_BYTES >> 20)) * (1 << 20))

    def partitions(self) -> list[InputPartition]:
        ranges = commitlog_ranges(self.store, log_dir_of(self.path), self.range_bytes)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        r = partition.byte_range
        with open_segment(SegmentSource(r.base, Path(r.path))) as buf:
            for item in scan_columns(buf, r.base, Path(r.path), start_pos=r.start, stop_pos=r.stop,
                                     is_last=r.is_last, with_body=self.with_body, batch_rows=BATCH_ROWS,
                                     runs=RunBatches(r.store, self.fields, BATCH_ROWS)):
                if isinstance(item, Damage):
                    log.warning("%s: %d damaged bytes at offset %d: %s", item.segment, item.length, item.offset,
                                item.reason)
                elif isinstance(item, pa.RecordBatch):
                    yield item
                else:
                    yield commitlog_batch(r.store, item, self.fields)


class ConsumeQueueSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "consumequeue"

    def schema(self) -> str:
        return ddl(CONSUMEQUEUE_FIELDS)

    def reader(self, schema: object) -> DataSourceReader:
        return ConsumeQueueReader(dict(self.options))


class ConsumeQueueReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        if "path" not in options:
            raise ValueError("consumequeue: give the store to read: .load(path)")
        self.path = Path(options["path"])
        self.store = options.get("store", options["path"])

    def partitions(self) -> list[InputPartition]:
        return [QueuePartition(g) for g in consume_queue_groups(self.store, consumequeue_dir(self.path))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        schema = arrow_schema(CONSUMEQUEUE_FIELDS)
        for topic, queue_id, path in partition.queue_files.files:
            first = (parse_segment_name(Path(path).name) or 0) // CQ_ENTRY_SIZE
            index, phys, size, tags = [], [], [], []
            for i, entry in iter_cq_entries(Path(path).read_bytes(), first):
                if entry.is_padding:
                    continue
                index.append(i)
                phys.append(entry.phys_offset)
                size.append(entry.size)
                tags.append(entry.tags_code)
            if index:
                n = len(index)
                yield pa.RecordBatch.from_arrays([
                    pa.array([partition.queue_files.store] * n, pa.string()), pa.array([topic] * n, pa.string()),
                    pa.array([queue_id] * n, pa.int32()), pa.array(index, pa.int64()), pa.array(phys, pa.int64()),
                    pa.array(size, pa.int32()), pa.array(tags, pa.int64()),
                ], schema=schema)


SOURCES = (CommitLogSource, ConsumeQueueSource)
