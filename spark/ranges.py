"""Splitting stores into the byte ranges Spark reads in parallel (no Spark here).

A live segment is cut into ranges of about ``range_bytes``; a reader of ``[start, stop)`` resyncs
at ``start`` on the next valid record and yields the records that start before ``stop``, so
consecutive ranges give each record exactly once (records never span segments). An archived
``.zst`` segment is one range: it can only be read from its start. Every Python task costs tens
of milliseconds, so ranges are large (hundreds of MiB by default).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

from formats.segments import default_archive_dirs, find_segments, last_nonzero_end

DEFAULT_RANGE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class ByteRange:
    store: str  # the label rows of this range carry
    path: str  # the segment file
    base: int | None  # its start offset, when its name says
    start: int
    stop: int | None  # None: to the end of the file
    is_last: bool  # the last segment of its log (a torn tail there is not damage to report)


def commitlog_ranges(store: str, log_dir: Path, range_bytes: int = DEFAULT_RANGE_BYTES) -> list[ByteRange]:
    """The ranges of one CommitLog (a directory of segments, or one segment file)."""
    sources = find_segments(log_dir, default_archive_dirs(log_dir) if log_dir.is_dir() else ())
    out: list[ByteRange] = []
    for i, source in enumerate(sources):
        is_last = i == len(sources) - 1
        size = source.path.stat().st_size
        if is_last and not source.archived:  # a live segment is mostly unwritten: no task for its zeros
            size = written_end(source.path, size)
        if source.archived or source.start is None:  # read whole, from the start
            out.append(ByteRange(store, str(source.path), source.start, 0, None, is_last))
            continue
        if size == 0:  # nothing written yet
            continue
        count = -(-size // range_bytes)
        step = -(-size // count)  # equal ranges rather than a short last one
        out.extend(ByteRange(store, str(source.path), source.start, lo, min(lo + step, size), is_last)
                   for lo in range(0, size, step))
    return out


def written_end(path: Path, size: int) -> int:
    """One past the last non-zero byte of a segment file: every record in it starts before."""
    if size == 0:
        return 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as view:
        return last_nonzero_end(view, 0, size)


@dataclass(frozen=True, slots=True)
class QueueFiles:
    store: str
    files: tuple[tuple[str, int, str], ...]  # (topic, queue id, file path)


def consume_queue_groups(store: str, cq_dir: Path, group_bytes: int = 64 << 20) -> list[QueueFiles]:
    """The ConsumeQueue files of a store (``consumequeue/<topic>/<queueId>/<file>``), grouped into
    tasks of about ``group_bytes`` each."""
    groups: list[QueueFiles] = []
    current: list[tuple[str, int, str]] = []
    size = 0
    for topic_dir in sorted(p for p in cq_dir.iterdir() if p.is_dir()) if cq_dir.is_dir() else []:
        for queue_dir in sorted((p for p in topic_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            for f in sorted(queue_dir.iterdir()):
                current.append((topic_dir.name, int(queue_dir.name), str(f)))
                size += f.stat().st_size
                if size >= group_bytes:
                    groups.append(QueueFiles(store, tuple(current)))
                    current, size = [], 0
    if current:
        groups.append(QueueFiles(store, tuple(current)))
    return groups
