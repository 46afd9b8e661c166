"""Records as columns: a stretch of a segment decoded into one list per field, for analytics.

:func:`scan_columns` gives the records :func:`formats.segments.scan_segment` gives (same checks,
same resync, same ``[start_pos, stop_pos)`` range semantics, CRC reported rather than enforced)
without building a :class:`MessageRecord` per record: runs of well-formed IPv4 records, classic or
DLedger-wrapped, go through one struct unpack each straight into the column lists, and anything
else (IPv6 hosts, raft NOOP entries, damage, end markers) is handed to ``scan_segment``.

Columns (one list each; ``properties`` is flattened for a map column: ``prop_names`` and
``prop_values`` hold every pair, ``prop_counts`` how many pairs each record has)::

  topic queue_id queue_offset phys_offset size body_size body_crc body_crc_ok flag sysflag
  compressed born_ts store_ts born_host store_host reconsume_times tags keys uniq_key
  raft_index raft_term [body]   prop_names prop_values prop_counts
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from formats import dledger
from formats import sysflag as sf
from formats.properties import KEYS, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, TAGS, UNIQ_KEY
from formats.record import CRC_MASK, MAGIC_V1, MAGIC_V2, RECORD_SIZE_MIN, MessageRecord
from formats.segments import Buffer, Damage, RecordAt, SegmentEnd, scan_segment

RECORD_COLUMNS = (
    "topic", "queue_id", "queue_offset", "phys_offset", "size", "body_size", "body_crc", "body_crc_ok",
    "flag", "sysflag", "compressed", "born_ts", "store_ts", "born_host", "store_host", "reconsume_times",
    "tags", "keys", "uniq_key", "raft_index", "raft_term",
)
PROPERTY_COLUMNS = ("prop_names", "prop_values", "prop_counts")
Columns = dict[str, list]  # type: ignore[type-arg]
# Another decoder of runs of well-formed records: (buf, pos, stop, base) -> (its batch of the run
# at pos, or None when it declines that record; where the run ended).
RunDecoder = Callable[[Buffer, int, int, int], tuple[Any, int]]

_V4_HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")  # the 88-byte head of a record with IPv4 hosts
_ENTRY_HEAD = struct.Struct(">iiqq20xi")  # DLedger: magic, entry size, raft index, term, body length
_I16 = struct.Struct(">h")
_V6_BITS = sf.BORNHOST_V6 | sf.STOREHOST_V6


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
    if base is None:  # a file whose name does not say where it starts: the careful scanner throughout
        yield from _careful_scan(buf, name, start_pos, stop, is_last, with_body, batch_rows)
        return
    filler = _Filler(with_body)
    pos = start_pos
    first = True
    while True:
        if not first and runs is not None:
            run, pos = runs(buf, pos, stop, base)
            if run is not None:
                if filler.rows:
                    yield filler.take()
                yield run
                continue
        elif not first:
            pos = filler.fast_run(buf, pos, stop, base, batch_rows)
            if filler.rows >= batch_rows:
                yield filler.take()
                continue
        # one step of the careful scanner: resync at a range start, or whatever the fast path declined
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


def _careful_scan(buf: Buffer, name: Path, start_pos: int, stop: int, is_last: bool, with_body: bool,
                  batch_rows: int) -> Iterator[Columns | Damage]:
    filler = _Filler(with_body)
    for item in scan_segment(buf, None, name, start_pos=start_pos, stop_pos=stop, is_last=is_last,
                             check_crc=False, with_body=True):
        if isinstance(item, RecordAt):
            filler.add(item)
        elif isinstance(item, Damage):
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
        self.hosts: dict[tuple[bytes, int], str] = {}
        self.topics: dict[bytes, str] = {}

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

    def fast_run(self, buf: Buffer, pos: int, stop: int, base: int, batch_rows: int) -> int:
        """Decode well-formed IPv4 records from ``pos`` while they start before ``stop``; return
        where it stopped (the first thing it leaves to the careful scanner)."""
        c = self.cols
        (topic_a, qid_a, qoff_a, phys_a, size_a, bsize_a, bcrc_a, ok_a, flag_a, sysflag_a, comp_a,
         born_a, store_a, bhost_a, shost_a, recon_a, tags_a, keys_a, uniq_a, ridx_a, rterm_a) = (
            c[k].append for k in RECORD_COLUMNS)
        names_x, values_x, counts_a = c["prop_names"].extend, c["prop_values"].extend, c["prop_counts"].append
        body_a = c["body"].append if self.with_body else None
        wrapped = dledger.looks_like_entry(buf, 0)
        head = dledger.HEADER_SIZE if wrapped else 0
        limit = len(buf)
        room = batch_rows - len(c["topic"])
        unpack_head, unpack_entry, unpack_i16 = _V4_HEAD.unpack_from, _ENTRY_HEAD.unpack_from, _I16.unpack_from
        crc32 = zlib.crc32
        hosts, topics = self.hosts, self.topics
        raft_index = raft_term = None
        while room > 0 and pos < stop and pos + head + 88 <= limit:
            r = pos + head  # where the record starts
            if wrapped:
                magic, entry_size, raft_index, raft_term, entry_body = unpack_entry(buf, pos)
                if magic != dledger.MAGIC_NORMAL or pos + entry_size > limit:
                    break
                next_pos = rec_limit = pos + entry_size
            (total, magic, crc, queue_id, flag, queue_offset, phys, flags, born_ts, born_ip, born_port,
             store_ts, store_ip, store_port, reconsume, _, body_len) = unpack_head(buf, r)
            end = r + total
            if not wrapped:
                next_pos = rec_limit = end
            if ((magic != MAGIC_V1 and magic != MAGIC_V2) or flags & _V6_BITS or total < RECORD_SIZE_MIN
                    or end > rec_limit or phys != base + r or body_len < 0 or (wrapped and entry_body != total)):
                break
            p = r + 88 + body_len
            if magic == MAGIC_V1:
                topic_len = buf[p] if p < end else -1
                p += 1
            else:
                topic_len = unpack_i16(buf, p)[0] if p + 2 <= end else -1
                p += 2
            if topic_len <= 0 or p + topic_len + 2 > end or unpack_i16(buf, p + topic_len)[0] != end - p - topic_len - 2:
                break
            raw_topic = bytes(buf[p:p + topic_len])
            topic = topics.get(raw_topic)
            try:
                if topic is None:
                    topic = topics[raw_topic] = raw_topic.decode()
                text = buf[p + topic_len + 2:end].decode()
            except UnicodeDecodeError:
                break
            body = buf[r + 88:r + 88 + body_len]
            tags = keys = uniq = None
            count = 0
            if text:
                names, values = [], []
                for pair in text.split(PROPERTY_SEPARATOR):
                    key, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
                    if sep and key:
                        names.append(key)
                        values.append(value)
                if len(set(names)) != len(names):  # a repeated name: the last one wins, as in decode_properties
                    merged = dict(zip(names, values))
                    names, values = list(merged), list(merged.values())
                names_x(names)
                values_x(values)
                count = len(names)
                for key, value in zip(names, values):
                    if key == TAGS:
                        tags = value
                    elif key == KEYS:
                        keys = value
                    elif key == UNIQ_KEY:
                        uniq = value
            born = hosts.get((born_ip, born_port))
            if born is None:
                born = hosts[(born_ip, born_port)] = _host_text(_ipv4(born_ip), born_port)
            store = hosts.get((store_ip, store_port))
            if store is None:
                store = hosts[(store_ip, store_port)] = _host_text(_ipv4(store_ip), store_port)
            topic_a(topic)
            qid_a(queue_id)
            qoff_a(queue_offset)
            phys_a(phys)
            size_a(total)
            bsize_a(body_len)
            bcrc_a(crc)
            ok_a(crc32(body) & CRC_MASK == crc)
            flag_a(flag)
            sysflag_a(flags)
            comp_a(bool(flags & sf.COMPRESSED))
            born_a(born_ts)
            store_a(store_ts)
            bhost_a(born)
            shost_a(store)
            recon_a(reconsume)
            tags_a(tags)
            keys_a(keys.split() if keys else [])
            uniq_a(uniq)
            ridx_a(raft_index)
            rterm_a(raft_term)
            counts_a(count)
            if body_a is not None:
                body_a(bytes(body))
            pos = next_pos
            room -= 1
        return pos


def _ipv4(raw: bytes) -> str:
    return ".".join(map(str, raw))


def _host_text(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
