"""Reading a store: records by CommitLog offset, ConsumeQueue entries and bounds, offsets by
time, and records by key (the MessageStore's read side, RocketMQ's getMessage and friends).
Every read dispatches what was put before it first, so readers see every record put."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import trio

from core.store.commitlog import CommitLog
from core.store.consume_queue import ConsumeQueueTable
from core.store.key_index import KeyIndex
from formats.consume_queue import CQEntry
from formats.errors import RecordError
from formats.record import MessageRecord

LARGE_READ_BYTES = 64 * 1024  # reads this large go through a worker thread


class StoreReads:
    """Reads of a store's CommitLog, ConsumeQueues and key index, each after
    ``dispatch_pending`` (the dispatch of what was put)."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueTable, index: KeyIndex,
                 dispatch_pending: Callable[[], int]) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.dispatch_pending = dispatch_pending

    def read_record(self, phys_offset: int) -> MessageRecord:
        return self.commitlog.read_record(phys_offset)

    async def read_bytes(self, phys_offset: int, size: int) -> bytes:
        """Raw CommitLog bytes; large reads go through a worker thread so a cold page-in does
        not stall the loop."""
        if size < LARGE_READ_BYTES:
            return self.commitlog.read(phys_offset, size)
        seg = self.commitlog.segment_of(phys_offset)
        if seg is None or phys_offset + size > self.commitlog.write_offset:
            raise KeyError(phys_offset)
        return await trio.to_thread.run_sync(seg.pread, phys_offset - seg.start, size)

    def queue_entries(self, topic: str, queue_id: int, offset: int, count: int) -> list[tuple[int, CQEntry]]:
        return list(self.iter_queue_entries(topic, queue_id, offset, count))

    def iter_queue_entries(self, topic: str, queue_id: int, offset: int, count: int) -> Iterator[tuple[int, CQEntry]]:
        """:meth:`queue_entries`, decoded as they are taken: for a reader that may stop early
        (a filtered pull). Take them before the next await."""
        self.dispatch_pending()
        cq = self.queues.get(topic, queue_id)
        return iter(()) if cq is None else cq.entries(offset, count)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        self.dispatch_pending()
        cq = self.queues.get(topic, queue_id)
        return 0 if cq is None else cq.max_offset

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        self.dispatch_pending()
        cq = self.queues.get(topic, queue_id)
        return 0 if cq is None else cq.min_offset

    def _store_time_at(self, topic: str, queue_id: int, index: int) -> int | None:
        entries = self.queue_entries(topic, queue_id, index, 1)
        if not entries or entries[0][0] != index:
            return None
        try:
            return self.commitlog.read_record(entries[0][1].phys_offset).store_timestamp
        except (KeyError, RecordError):
            return None

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the max offset when
        every record is older), by binary search over the queue."""
        self.dispatch_pending()
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            stamp = self._store_time_at(topic, queue_id, mid)
            if stamp is not None and stamp < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        return self._store_time_at(topic, queue_id, self.min_queue_offset(topic, queue_id))

    def query_by_key(self, topic: str, key: str, limit: int = 32, begin_ts: int = 0,
                     end_ts: int = 2**62) -> list[MessageRecord]:
        """Records of ``topic`` whose KEYS or UNIQ_KEY is ``key``, newest first."""
        self.dispatch_pending()
        out: list[MessageRecord] = []
        for phys in self.index.lookup(topic, key, limit * 2, begin_ts, end_ts):
            if phys < self.commitlog.min_offset:
                continue
            try:
                rec = self.commitlog.read_record(phys)
            except (KeyError, RecordError):
                continue  # stale entry (cut tail) or hash collision with garbage
            if rec.topic == topic and (key in rec.keys or rec.uniq_key == key):
                out.append(rec)
            if len(out) >= limit:
                break
        return out

    def copies_since(self, topic: str, uniq_key: str, since_ms: int, limit: int = 8) -> list[MessageRecord]:
        """Records of ``topic`` with this UNIQ_KEY stored at or after ``since_ms``: how the
        schedule and transaction services tell whether a crash lost the note of a put they made."""
        # the index keeps times to the second: look a second early, then compare exactly
        copies = self.query_by_key(topic, uniq_key, limit=limit, begin_ts=since_ms - 1000)
        return [c for c in copies if c.store_timestamp >= since_ms]
