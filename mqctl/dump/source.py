"""What ``mqctl dump`` reads: classifying a path, and yielding its records as rows."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from formats.consume_queue import CQ_ENTRY_SIZE, decode_cq_entry
from formats.errors import FormatError, RecordError
from formats.msgid import encode_offset_msg_id
from formats.record import decode_record
from formats.segments import (
    Buffer,
    Damage,
    RecordAt,
    default_archive_dirs,
    find_segments,
    log_dir_of,
    open_segment,
    parse_segment_name,
    scan_log,
)
from formats.sysflag import compression_type
from mqctl.common.errors import CliError


class SourceKind(enum.Enum):
    COMMITLOG = "commitlog"
    CONSUME_QUEUE = "consumequeue"


def classify(path: Path) -> tuple[SourceKind, Path]:
    """What ``path`` holds. A node directory means its ``commitlog/``."""
    if not path.exists():
        raise CliError(f"{path}: no such file or directory")
    if path.is_file() and "consumequeue" in path.parts and parse_segment_name(path.name) is not None:
        return SourceKind.CONSUME_QUEUE, path
    return SourceKind.COMMITLOG, log_dir_of(path)


def record_row(item: RecordAt, *, with_body: bool) -> dict[str, Any]:
    rec = item.record
    row: dict[str, Any] = {
        "offset": item.offset,
        "size": rec.total_size,
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "store_timestamp": rec.store_timestamp,
        "born_timestamp": rec.born_timestamp,
        "born_host": f"{rec.born_host[0]}:{rec.born_host[1]}",
        "store_host": f"{rec.store_host[0]}:{rec.store_host[1]}",
        "sysflag": rec.sysflag,
        "tags": rec.tags,
        "keys": rec.keys,
        "uniq_key": rec.uniq_key,
        "msg_id": encode_offset_msg_id(rec.store_host[0], rec.store_host[1], item.offset),
        "body_size": len(rec.body),
        "reconsume_times": rec.reconsume_times,
        "properties": rec.properties,
    }
    if item.entry is not None:
        row["raft_index"] = item.entry.raft_index
        row["raft_term"] = item.entry.term
    if with_body:
        try:
            payload = rec.payload()
        except FormatError as exc:
            row["body_error"] = str(exc)
        else:
            row["body"] = payload.decode("utf-8", "backslashreplace")
            row["compressed"] = compression_type(rec.sysflag) is not None
    return row


def damage_row(item: Damage) -> dict[str, Any]:
    return {
        "damage": item.reason,
        "offset": item.offset,
        "length": item.length,
        "segment": str(item.segment),
        "at_tail": item.at_tail,
    }


def commitlog_rows(path: Path, from_offset: int, *, verify: bool, with_body: bool,
                   archive_dirs: tuple[Path, ...] | None) -> Iterator[dict[str, Any]]:
    try:
        for item in scan_log(path, from_offset=from_offset, archive_dirs=archive_dirs,
                             check_crc=True, with_body=True):
            if isinstance(item, RecordAt):
                yield record_row(item, with_body=with_body)
            else:
                yield damage_row(item)
    except FormatError as exc:
        raise CliError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class CQContext:
    topic: str | None
    queue_id: int | None
    commitlog: Path | None


def cq_context(path: Path) -> CQContext:
    """Topic, queue id and the node's CommitLog for ``.../<node>/consumequeue/<topic>/<qid>/<file>``."""
    qdir = path.parent
    topic_dir = qdir.parent
    node_dir = topic_dir.parent.parent
    log_dir = node_dir / "commitlog"
    queue_id = int(qdir.name) if qdir.name.isdigit() else None
    return CQContext(topic_dir.name, queue_id, log_dir if log_dir.is_dir() else None)


def consume_queue_rows(path: Path, from_offset: int, *, verify: bool) -> Iterator[dict[str, Any]]:
    """Rows of a ConsumeQueue file; with ``verify``, each entry is checked against the record it
    points to in the node's CommitLog (same topic, queue id and queue offset)."""
    ctx = cq_context(path)
    start = parse_segment_name(path.name) or 0
    first_index = start // CQ_ENTRY_SIZE
    segments = _LogReader(ctx.commitlog) if verify and ctx.commitlog else None
    try:
        data = path.read_bytes()
        previous = -1
        for i in range(len(data) // CQ_ENTRY_SIZE):
            index = first_index + i
            entry = decode_cq_entry(data, i * CQ_ENTRY_SIZE)
            if not entry.is_written:
                break
            if index < from_offset:
                continue
            row: dict[str, Any] = {
                "queue_offset": index, "phys_offset": entry.phys_offset, "size": entry.size,
                "tags_code": entry.tags_code,
            }
            if entry.is_padding:
                row["padding"] = True
                yield row
                continue
            problem = None
            if entry.phys_offset <= previous:
                problem = "offsets not increasing"
            previous = entry.phys_offset
            if segments is not None and problem is None:
                problem = segments.check(entry.phys_offset, entry.size, ctx.topic, ctx.queue_id, index)
            if problem:
                yield {"damage": problem, "offset": index, "length": CQ_ENTRY_SIZE,
                       "segment": str(path), "at_tail": False}
            else:
                yield row
    finally:
        if segments is not None:
            segments.close()


class _LogReader:
    """Reads single records from a CommitLog (segments and archives) by physical offset."""

    def __init__(self, log_dir: Path) -> None:
        self._sources = [src for src in find_segments(log_dir, default_archive_dirs(log_dir))
                         if src.start is not None]
        self._stack = contextlib.ExitStack()
        self._open: dict[Path, Buffer] = {}

    def check(self, phys: int, size: int, topic: str | None, queue_id: int | None, index: int) -> str | None:
        candidates = [src for src in self._sources if src.start is not None and src.start <= phys]
        if not candidates:
            return "points below the CommitLog"
        src = candidates[-1]
        if src.path not in self._open:
            self._open[src.path] = self._stack.enter_context(open_segment(src))
        view = self._open[src.path]
        start = src.start or 0
        try:
            rec = decode_record(view, phys - start, limit=min(len(view), phys - start + size))
        except RecordError as exc:
            return f"points at no valid record ({exc.reason})"
        if rec.total_size != size:
            return f"size {size} differs from the record's {rec.total_size}"
        if (topic, queue_id, index) != (rec.topic, rec.queue_id, rec.queue_offset):
            return (f"points at {rec.topic}/{rec.queue_id}@{rec.queue_offset}, "
                    f"expected {topic}/{queue_id}@{index}")
        return None

    def close(self) -> None:
        self._stack.close()
