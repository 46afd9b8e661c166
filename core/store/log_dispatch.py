"""Dispatching records found in the log (a slave's bytes copied from its master, a raft
member's committed entries): RocketMQ's ReputMessageService for a log this store did not
write.

Each record's head is read in one unpacking (only the fields its entries need: no body, no
hosts, no CRC) and the record joins a run: consecutive records of one topic, queue and
sysflag with consecutive queue offsets, as a master's batch puts leave them. A run's
ConsumeQueue entries are written in one packing and its UNIQ_KEYs indexed as one run
(:meth:`core.store.key_index.KeyIndex.put_run`), its properties read from their texts
together (:mod:`formats.property_texts`). A record that fits no run (IPv6 hosts, the schedule
topic, a transaction half, properties not ending in a separator, damage) is dispatched alone
from its decoded fields, as before runs existed.
"""

from __future__ import annotations

import mmap
from itertools import repeat
from pathlib import Path
from typing import Protocol

from core.store.consume_queue import ConsumeQueueTable
from core.store.dispatch import (
    Appended,
    BatchAppended,
    DispatchBatch,
    DispatchFields,
    DispatchUnit,
    LogRun,
    record_tags_code,
)
from core.store.key_index import KeyIndex, key_hash, key_hashes, keyed_entries
from core.store.store_types import StoreHooks
from core.topic_names import SCHEDULE_TOPIC
from formats import property_texts
from formats.errors import RecordError
from formats.properties import index_keys
from formats.record import BLANK_MAGIC, DISPATCH_HEAD_V4, MAGIC_V1, RECORD_SIZE_MIN, decode_dispatch_fields
from formats.sysflag import BORNHOST_V6, STOREHOST_V6, is_dispatched


class DispatchingStore(Protocol):
    """What a dispatch needs of its store (:class:`core.store.dispatcher.Dispatcher` is it)."""

    root: Path
    plugins: StoreHooks | None
    queues: ConsumeQueueTable
    index: KeyIndex
    notify_dispatch: bool
    index_enabled: bool
    delay_levels_ms: tuple[int, ...]
    last_store_ts: int
    last_dispatch_ts: int

# What records are read from: a mapped segment or data file (its slices are bytes, which name a
# topic in a dict and outlive the map).
MappedBytes = mmap.mmap | bytes
_ALONE_FLAGS = BORNHOST_V6 | STOREHOST_V6
_HEAD_SIZE = 88  # TOTALSIZE .. body length, IPv4 hosts


class LogDispatch:
    """Queue and index entries for records found in the log: :meth:`scan` (or :meth:`add`)
    them, then :meth:`finish`."""

    __slots__ = ("_first_qo", "_index", "_index_on", "_next_qo", "_offsets", "_queues", "_run", "_sizes",
                 "_stamps", "_texts", "_topics", "count", "index_entries", "stamp", "store", "units")

    def __init__(self, store: DispatchingStore) -> None:
        self.store = store
        self.count = 0
        self.stamp = 0
        self.index_entries: list[tuple[int, int, int]] = []  # of records dispatched alone, in log order
        self.units: list[DispatchUnit] | None = [] if store.notify_dispatch else None
        self._queues = store.queues.queues
        self._index = store.index
        self._index_on = store.index_enabled
        self._topics: dict[bytes, str] = {}
        self._run: tuple[str, int, int] | None = None  # topic, queue id, sysflag
        self._first_qo = self._next_qo = 0
        self._offsets: list[int] = []
        self._sizes: list[int] = []
        self._stamps: list[int] = []
        self._texts: list[bytes] = []

    def scan(self, view: MappedBytes, pos: int, limit: int, base: int) -> int:
        """Dispatch the whole records of ``view[pos:limit]`` (``view`` lies at ``base`` in the
        log); returns where the first record not whole yet begins, or ``len(view)`` at a BLANK
        (the rest of the segment is padding)."""
        head = DISPATCH_HEAD_V4.unpack_from
        topics = self._topics
        while limit - pos >= 8:
            if limit - pos < _HEAD_SIZE:
                total = int.from_bytes(view[pos : pos + 4], "big", signed=True)
                if view[pos + 4 : pos + 8] == _BLANK_BYTES:
                    return len(view)
                if total > limit - pos:
                    return pos
                self._alone(view, pos, total, base + pos)
                pos += total
                continue
            total, magic, queue_id, queue_offset, sysflag, stamp, body_len = head(view, pos)
            if magic == BLANK_MAGIC:
                return len(view)
            if total > limit - pos:
                return pos
            end = pos + total
            at = pos + _HEAD_SIZE + body_len  # the topic's length byte
            if magic != MAGIC_V1 or sysflag & _ALONE_FLAGS or total < RECORD_SIZE_MIN or body_len < 0 \
                    or at >= end or not is_dispatched(sysflag):
                self._alone(view, pos, total, base + pos)
                pos = end
                continue
            props_at = at + view[at] + 3
            raw_topic = view[at + 1 : props_at - 2]
            topic = topics.get(raw_topic)
            if topic is None and props_at <= end:
                topic = _run_topic(raw_topic)
                if topic is not None:
                    topics[raw_topic] = topic
            if topic is None or props_at > end or int.from_bytes(view[props_at - 2 : props_at], "big") != end - props_at \
                    or (end > props_at and view[end - 1] != 2):
                self._alone(view, pos, total, base + pos)
                pos = end
                continue
            if self._run != (topic, queue_id, sysflag) or queue_offset != self._next_qo:
                self._flush()
                self._run = (topic, queue_id, sysflag)
                self._first_qo = queue_offset
            self._next_qo = queue_offset + 1
            self._offsets.append(base + pos)
            self._sizes.append(total)
            self._stamps.append(stamp)
            self._texts.append(view[props_at:end])
            pos = end
        return pos

    def add(self, view: MappedBytes, pos: int, total: int, phys: int) -> None:
        """The ``total``-byte record at ``pos`` of ``view``, which lies at ``phys`` in the log."""
        self.scan(view, pos, pos + total, phys - pos)

    def add_put(self, put: Appended) -> None:
        """A record this store put itself, known without reading it back (a raft leader's)."""
        rec, _cq, phys, size, queue_offset, stamp, keys = put
        self._flush()
        self._add_fields((rec.topic, rec.queue_id, queue_offset, phys, size, 0, stamp, rec.sysflag, rec.properties),
                         keys)

    def add_batch_put(self, put: BatchAppended) -> None:
        """A batch this store put itself (a raft leader's), dispatched from what it kept of it."""
        self._flush()
        if self._index_on:
            self._index.ensure_room(1)
        write_batch_entries(self._index, put, self.index_entries)
        if self.units is not None:
            self.units.append(put)
        self.count += len(put.offsets)
        self.stamp = put.store_timestamp

    def _alone(self, view: MappedBytes, pos: int, total: int, phys: int) -> None:
        self._flush()
        _total, topic, queue_id, queue_offset, sysflag, stamp, props = decode_dispatch_fields(view, pos, pos + total)
        self._add_fields((topic, queue_id, queue_offset, phys, total, 0, stamp, sysflag, props),
                         index_keys(props) if self._index_on else None)

    def _add_fields(self, fields: DispatchFields, keys: list[str] | None) -> None:
        topic, queue_id, queue_offset, phys, total, _, stamp, sysflag, props = fields
        tags = record_tags_code(topic, props, stamp, self.store.delay_levels_ms)
        if is_dispatched(sysflag):
            cq = self._queues.get((topic, queue_id)) or self.store.queues.get_or_create_for_log(topic, queue_id)
            if cq is not None:
                cq.put_entry(queue_offset, phys, total, tags)
        if keys:
            self.index_entries.extend([(key_hash(topic, k), phys, stamp) for k in keys])
        if self.units is not None:
            self.units.append((topic, queue_id, queue_offset, phys, total, tags, stamp, sysflag, props))
        self.count += 1
        self.stamp = stamp

    def _flush(self) -> None:
        """Write the entries of the run gathered so far."""
        offsets = self._offsets
        if not offsets:
            return
        topic, queue_id, sysflag = self._run  # type: ignore[misc]
        texts, sizes, stamps = self._texts, self._sizes, self._stamps
        self._offsets, self._sizes, self._stamps, self._texts = [], [], [], []
        self._run = None
        text = property_texts.run_text(texts)
        if text is None:
            raise RecordError("properties are not UTF-8", offsets[0])
        tags = property_texts.tags_codes(texts, text)
        cq = self._queues.get((topic, queue_id)) or self.store.queues.get_or_create_for_log(topic, queue_id)
        if cq is not None:
            cq.put_entries(self._first_qo, offsets, sizes, tags)
        if self._index_on:
            self._index_run(topic, texts, text, offsets, stamps)
        if self.units is not None:
            self.units.append(LogRun(topic, queue_id, sysflag, self._first_qo, offsets, sizes, tags, stamps, texts))
        self.count += len(offsets)
        self.stamp = stamps[-1]

    def _index_run(self, topic: str, texts: list[bytes], text: bytes, offsets: list[int], stamps: list[int]) -> None:
        uniq = property_texts.one_key_each(texts, text)
        if uniq is None:
            self.index_entries.extend(keyed_entries(topic, property_texts.index_keys(texts, text), offsets, stamps))
            return
        index = self._index
        index.ensure_room(1)
        if self.index_entries:  # entries stay in log order
            index.put_many(self.index_entries)
            self.index_entries = []
        index.put_run(key_hashes(topic, uniq), offsets, stamps)

    def finish(self) -> int:
        """Write what is left, tell the listeners; returns how many records."""
        self._flush()
        store = self.store
        if self.index_entries:
            store.index.ensure_room(1)
            store.index.put_many(self.index_entries)
        if self.count:
            store.last_store_ts = store.last_dispatch_ts = self.stamp
        if self.units and store.plugins is not None:
            store.plugins.records_dispatched(store.root, DispatchBatch(self.units, store.delay_levels_ms))
        return self.count


_BLANK_BYTES = BLANK_MAGIC.to_bytes(4, "big", signed=True)


def write_batch_entries(index: KeyIndex, put: BatchAppended, index_entries: list[tuple[int, int, int]]) -> None:
    """A batch put's queue entries in one write; its UNIQ_KEYs as one index run, or its other
    keys onto ``index_entries`` (written before the run, so entries keep the log's order)."""
    batch = put.batch
    if put.cq is not None:
        put.cq.put_entries(put.queue_offset, put.offsets, batch.sizes, batch.tags_codes())
    if put.uniq_keys:
        if index_entries:
            index.put_many(index_entries)
            index_entries.clear()
        index.put_run(key_hashes(batch.topic, put.uniq_keys), put.offsets, [put.store_timestamp] * len(put.offsets))
    elif put.keys:
        index_entries.extend(keyed_entries(batch.topic, put.keys, put.offsets, repeat(put.store_timestamp)))


def _run_topic(raw: bytes) -> str | None:
    """The topic named by ``raw`` when its records may form runs (not the schedule topic,
    whose tagsCode is a due time; not empty or undecodable, which the full decoder names)."""
    try:
        topic = raw.decode()
    except UnicodeDecodeError:
        return None
    return topic if topic and topic != SCHEDULE_TOPIC else None
