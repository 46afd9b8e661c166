"""Records as columns: a stretch of a segment decoded into one list per field, for analytics.

:func:`scan_columns` gives the records :func:`formats.segments.scan_segment` gives (same checks,
same resync, same ``[start_pos, stop_pos)`` range semantics, CRC reported rather than enforced),
as column lists. Given a run decoder (:mod:`formats.record_vectors`, through the Spark source),
runs of well-formed records come as that decoder's batches, and only what it declines (IPv6
hosts, raft NOOP entries, damage, end markers) goes through ``scan_segment`` record by record.

Columns (one list each; ``properties`` is flattened for a map column: ``prop_names`` and
``prop_values`` hold every pair, ``prop_counts`` how many pairs each record has)::

  topic queue_id queue_offset phys_offset size body_size body_crc body_crc_ok flag sysflag
  compressed born_ts store_ts born_host store_host reconsume_times tags keys uniq_key
  raft_index raft_term [body]   prop_names prop_values prop_counts
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from formats import dledger
from formats import sysflag as sf
from formats.record import CRC_MASK, MessageRecord
from formats.segments import Buffer, Damage, RecordAt, SegmentEnd, scan_segment

RECORD_COLUMNS = (
    "topic", "queue_id", "queue_offset", "phys_offset", "size", "body_size", "body_crc", "body_crc_ok",
    "flag", "sysflag", "compressed", "born_ts", "store_ts", "born_host", "store_host", "reconsume_times",
    "tags", "keys", "uniq_key", "raft_index", "raft_term",
)
PROPERTY_COLUMNS = ("prop_names", "prop_values", "prop_counts")
Columns = dict[str, list]  # type: ignore[type-arg]
# A decoder of runs of well-formed records: (buf, pos, stop, base) -> (its batch of the run
# at pos, or None when it declines that record; where the run ended).
RunDecoder = Callable[[Buffer, int, int, int], tuple[Any, int]]


def new_columns(with_body: bool = False) -> Columns:
    names = RECORD_COLUMNS + PROPERTY_COLUMNS + (("body",) if with_body else ())
    return {name: [] for name in names}


def scan_columns(
    buf: Buffer,
    base: int | None,
    name: Path,
    *,
    start_pos: int = 0,
    stop_pos: int | None = None,
    is_last: bool = True,
    with_body: bool = False,
    batch_rows: int = 16384,
    runs: RunDecoder | None = None,
) -> Iterator[Columns | Damage | Any]:
    """Column batches of at most ``batch_rows`` records, and the damage met, in log order. With
    ``runs``, runs of well-formed records come as that decoder's batches instead, and column
    batches hold what it declined."""
    stop = len(buf) if stop_pos is None else min(stop_pos, len(buf))
    if base is None or runs is None:  # the careful scanner throughout
        yield from _careful_scan(buf, base, name, start_pos, stop, is_last, with_body, batch_rows)
        return
    filler = _Filler(with_body)
    pos = start_pos
    first = True
    while True:
        if not first:
            run, pos = runs(buf, pos, stop, base)
            if run is not None:
                if filler.rows:
                    yield filler.take()
                yield run
                continue
        # one step of the careful scanner: resync at a range start, or whatever the run declined
        item = next(scan_segment(buf, base, name, start_pos=pos, stop_pos=stop, is_last=is_last,
                                 check_crc=False, with_body=True, strict_start=not first))
        first = False
        if isinstance(item, SegmentEnd):
            break
        if isinstance(item, Damage):
            if filler.rows:
                yield filler.take()
            yield item
            pos = item.offset + item.length - base
            continue
        filler.add(item)
        rec_pos = item.offset - base
        pos = rec_pos + item.record.total_size if item.entry is None else rec_pos - dledger.HEADER_SIZE + item.entry.size
        if filler.rows >= batch_rows:
            yield filler.take()
    if filler.rows:
        yield filler.take()


def _careful_scan(buf: Buffer, base: int | None, name: Path, start_pos: int, stop: int, is_last: bool,
                  with_body: bool, batch_rows: int) -> Iterator[Columns | Damage]:
    filler = _Filler(with_body)
    for item in scan_segment(buf, base, name, start_pos=start_pos, stop_pos=stop, is_last=is_last,
                             check_crc=False, with_body=True):
        if isinstance(item, RecordAt):
            filler.add(item)
        elif isinstance(item, Damage):
            if filler.rows:
                yield filler.take()
            yield item
        if filler.rows >= batch_rows:
            yield filler.take()
    if filler.rows:
        yield filler.take()


class _Filler:
    """Appends records to column lists."""

    def __init__(self, with_body: bool) -> None:
        self.cols = new_columns(with_body)
        self.with_body = with_body

    @property
    def rows(self) -> int:
        return len(self.cols["topic"])

    def take(self) -> Columns:
        """The filled columns; filling goes on into new ones."""
        cols, self.cols = self.cols, new_columns(self.with_body)
        return cols

    def add(self, item: RecordAt) -> None:
        """A record the careful scanner decoded."""
        rec: MessageRecord = item.record
        c = self.cols
        body = rec.body
        for key, value in (
            ("topic", rec.topic), ("queue_id", rec.queue_id), ("queue_offset", rec.queue_offset),
            ("phys_offset", rec.phys_offset), ("size", rec.total_size), ("body_size", len(body)),
            ("body_crc", rec.body_crc), ("body_crc_ok", zlib.crc32(body) & CRC_MASK == rec.body_crc),
            ("flag", rec.flag), ("sysflag", rec.sysflag), ("compressed", bool(rec.sysflag & sf.COMPRESSED)),
            ("born_ts", rec.born_timestamp), ("store_ts", rec.store_timestamp),
            ("born_host", _host_text(*rec.born_host)), ("store_host", _host_text(*rec.store_host)),
            ("reconsume_times", rec.reconsume_times), ("tags", rec.tags), ("keys", rec.keys),
            ("uniq_key", rec.uniq_key),
            ("raft_index", item.entry.raft_index if item.entry else None),
            ("raft_term", item.entry.term if item.entry else None),
        ):
            c[key].append(value)
        c["prop_names"].extend(rec.properties.keys())
        c["prop_values"].extend(rec.properties.values())
        c["prop_counts"].append(len(rec.properties))
        if self.with_body:
            c["body"].append(body)


def _host_text(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
