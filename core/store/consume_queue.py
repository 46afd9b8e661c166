"""ConsumeQueues: per topic and queue id, a log of 20-byte entries (formats.consume_queue)
pointing into the CommitLog, stored under ``consumequeue/<topic>/<queueId>/``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from itertools import repeat
from pathlib import Path

from core.errors import UnsafePathError
from core.store.mapped_file import MappedFile, MappedFileQueue
from core.store.paths import queue_dir
from formats.consume_queue import (
    CQ_ENTRY_SIZE,
    PAD_SIZE,
    CQEntry,
    decode_cq_entries,
    decode_cq_entry,
    encode_cq_entry,
    pack_cq_entries_into,
    pack_cq_entry_into,
)

log = logging.getLogger(__name__)

QUEUE_OFFSET_MAX = (10**20 - 1) // CQ_ENTRY_SIZE  # a file's 20-digit name holds its byte offset


class ConsumeQueue:
    """One queue's entries; logical offset n lives at byte n * 20."""

    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(directory, entries_per_file * CQ_ENTRY_SIZE)
        self.max_offset = 0  # next logical offset to write
        self.min_offset = 0
        self._tail: MappedFile | None = None
        self.room_end = 0  # one past the last logical offset the existing files can hold
        self.assigned = 0  # next logical offset handed to an append (ahead of max_offset until dispatch)
        self.gap_pad_max = entries_per_file

    def recover(self, log_end: int, log_min: int = 0) -> None:
        """Load the files, find the last written entry, drop entries that point at or past
        ``log_end`` (CommitLog bytes that recovery cut off), and begin at the first entry that
        points at or past ``log_min`` (what retention left of the CommitLog)."""
        self.files.load()
        self.max_offset = self._written_end()
        self.truncate(log_end)
        self._correct_min(log_min)

    def truncate(self, log_end: int) -> None:
        """Drop the entries that point at or past ``log_end``."""
        while self.max_offset > self.min_index:
            entry = self.entry(self.max_offset - 1)
            if entry is not None and not entry.is_padding and entry.phys_offset + entry.size <= log_end:
                break
            self.max_offset -= 1
        self._zero_from(self.max_offset)
        self.min_offset = min(self.min_offset, self.max_offset)
        self._update_room()
        self.assigned = self.max_offset
        self._tail = None

    def _update_room(self) -> None:
        last = self.files.last
        self.room_end = 0 if last is None else last.end // CQ_ENTRY_SIZE

    @property
    def min_index(self) -> int:
        return self.files.min_offset // CQ_ENTRY_SIZE

    def _written_end(self) -> int:
        last = self.files.last
        if last is None:
            return 0
        n = last.size // CQ_ENTRY_SIZE
        lo, hi = 0, n  # entries [0, lo) written; binary search for the first unwritten one
        while lo < hi:
            mid = (lo + hi) // 2
            if decode_cq_entry(last.view, mid * CQ_ENTRY_SIZE).is_written:
                lo = mid + 1
            else:
                hi = mid
        return last.start // CQ_ENTRY_SIZE + lo

    def _zero_from(self, index: int) -> None:
        for mf in list(self.files.files):
            if mf.end <= index * CQ_ENTRY_SIZE:
                continue
            if mf.start >= index * CQ_ENTRY_SIZE and mf is not self.files.files[0]:
                self.files.files.remove(mf)
                mf.destroy()
                continue
            mf.zero_from(max(0, index * CQ_ENTRY_SIZE - mf.start))

    def _correct_min(self, log_min: int) -> None:
        """Begin at the first entry pointing at or past ``log_min``. From where the queue
        begins now (the log's start only grows), a file at a time: a file whose last entry
        points below it is passed whole (a queue's entries point forward in the log), the one
        the start falls in is decoded in one pass."""
        index = max(self.min_index, self.min_offset)
        while index < self.max_offset:
            mf = self._file_from(index)
            if mf is None:
                break
            index = max(index, mf.start // CQ_ENTRY_SIZE)
            if index >= self.max_offset:
                break
            stop = min(self.max_offset, mf.end // CQ_ENTRY_SIZE)
            last = decode_cq_entry(mf.view, (stop - 1) * CQ_ENTRY_SIZE - mf.start)
            if last.is_padding or last.phys_offset >= log_min:
                at = index * CQ_ENTRY_SIZE - mf.start
                for i, entry in decode_cq_entries(mf.view[at: stop * CQ_ENTRY_SIZE - mf.start], index):
                    if not entry.is_padding and entry.phys_offset >= log_min:
                        self.min_offset = i
                        return
            index = stop
        self.min_offset = index

    def _file_from(self, index: int) -> MappedFile | None:
        """The file holding entry ``index``, or after a hole between files the next one."""
        at = index * CQ_ENTRY_SIZE
        mf = self.files.find(at)
        return mf if mf is not None else next((f for f in self.files.files if f.start > at), None)

    def ensure_room(self, queue_offset: int) -> MappedFile:
        """The file that will hold ``queue_offset``, created if needed (may raise DiskFullError)."""
        pos = queue_offset * CQ_ENTRY_SIZE
        mf = self.files.find(pos)
        if mf is None:
            last = self.files.last
            start = pos - pos % self.files.file_size
            if last is not None and start < last.end:
                raise AssertionError("consume queue files out of order")
            mf = self.files.create(start)
            self._update_room()
            if last is None:
                self.min_offset = self.max_offset = self.assigned = start // CQ_ENTRY_SIZE
        return mf

    def put_entry(self, qo: int, phys: int, size: int, tags: int) -> bool:
        """Write entry ``qo``; False when it is already there (re-dispatch)."""
        if qo == self.max_offset:  # the usual case: append at the tail file
            pos = qo * CQ_ENTRY_SIZE
            tail = self._tail
            if tail is None or not tail.start <= pos < tail.end or tail.closed:
                tail = self._tail = self.ensure_room(qo)
            pack_cq_entry_into(tail.view, pos - tail.start, phys, size, tags)
            tail.dirty = True
            self.max_offset = qo + 1
            if self.assigned < self.max_offset:
                self.assigned = self.max_offset
            return True
        if qo < self.max_offset:
            return False
        if qo > self.max_offset:
            # a queue offset read from the log (a master's, a raft leader's) sizes the padding:
            # one file's worth at most, and file names stay 20 digits
            if qo > QUEUE_OFFSET_MAX or (self.files.last is not None and qo - self.max_offset > self.gap_pad_max):
                log.warning("consume queue %s-%d: entry %d far past its end %d left out", self.topic,
                            self.queue_id, qo, self.max_offset)
                return False
            if self.files.last is None:  # first seen far above 0 (a replica that starts mid-log)
                self.ensure_room(qo)
                self._pad(self.max_offset, qo)
                self.min_offset = qo
            else:
                log.warning("consume queue %s-%d: gap %d..%d padded", self.topic, self.queue_id,
                            self.max_offset, qo)
                self._pad(self.max_offset, qo)
        self._write(qo, encode_cq_entry(phys, size, tags))
        self.max_offset = qo + 1
        self.assigned = max(self.assigned, self.max_offset)
        return True

    def put_entries(self, first: int, offsets: list[int], sizes: list[int], tags: list[int] | None) -> None:
        """Write entries ``first``, ``first + 1``, ... (a batch's records; ``tags`` None: all
        0): one packing when they extend the tail file, else one by one."""
        count = len(offsets)
        pos = first * CQ_ENTRY_SIZE
        tail = self._tail
        if first == self.max_offset and tail is not None and tail.start <= pos and \
                pos + count * CQ_ENTRY_SIZE <= tail.end and not tail.closed:
            pack_cq_entries_into(tail.view, pos - tail.start, offsets, sizes, tags or repeat(0, count))
            tail.dirty = True
            self.max_offset = first + count
            if self.assigned < self.max_offset:
                self.assigned = self.max_offset
            return
        for qo, phys, size, tag in zip(range(first, first + count), offsets, sizes, tags or repeat(0, count)):
            self.put_entry(qo, phys, size, tag)

    def _pad(self, lo: int, hi: int) -> None:
        """Write padding entries ``[lo, hi)``, a file's share at a time (a replica that starts
        mid-log begins its queues far above 0)."""
        pad = encode_cq_entry(0, PAD_SIZE, 0)
        while lo < hi:
            mf = self.ensure_room(lo)
            lo = max(lo, mf.start // CQ_ENTRY_SIZE)
            stop = min(hi, mf.end // CQ_ENTRY_SIZE)
            mf.write(lo * CQ_ENTRY_SIZE - mf.start, pad * (stop - lo))
            lo = stop

    def _write(self, index: int, entry: bytes) -> None:
        mf = self.ensure_room(index)
        mf.write(index * CQ_ENTRY_SIZE - mf.start, entry)

    def entry(self, index: int) -> CQEntry | None:
        if not self.min_index <= index < max(self.max_offset, self.min_index):
            return None
        mf = self.files.find(index * CQ_ENTRY_SIZE)
        if mf is None:
            return None
        return decode_cq_entry(mf.view, index * CQ_ENTRY_SIZE - mf.start)

    def entries(self, index: int, count: int) -> Iterator[tuple[int, CQEntry]]:
        """Up to ``count`` written entries from ``index`` (or from the first one still kept,
        when ``index`` is below it); padding is skipped."""
        start = max(index, self.min_offset, self.min_index)
        end = min(self.max_offset, start + count)
        while start < end:  # a file's run of entries at a time, decoded in one pass
            mf = self._file_from(start)
            if mf is None:
                return
            start = max(start, mf.start // CQ_ENTRY_SIZE)
            if start >= end:
                return
            stop = min(end, mf.end // CQ_ENTRY_SIZE)
            at = start * CQ_ENTRY_SIZE - mf.start
            for i, entry in decode_cq_entries(mf.view[at : at + (stop - start) * CQ_ENTRY_SIZE], start):
                if not entry.is_padding:
                    yield i, entry
            start = stop

    def delete_below(self, log_min: int) -> int:
        """Drop files whose entries all point below the CommitLog's first offset."""
        dropped = 0
        while len(self.files.files) > 1:
            first = self.files.files[0]
            last_index = first.end // CQ_ENTRY_SIZE - 1
            entry = decode_cq_entry(first.view, (last_index * CQ_ENTRY_SIZE) - first.start)
            if entry.phys_offset + entry.size > log_min:
                break
            self.files.drop_first()
            dropped += 1
        self._correct_min(log_min)
        return dropped


class ConsumeQueueTable:
    """All ConsumeQueues of a store."""

    def __init__(self, root: Path, entries_per_file: int) -> None:
        self.root = root
        self.entries_per_file = entries_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.refused: set[tuple[str, int]] = set()  # names found in the log that got no queue

    def recover(self, log_end: int, log_min: int = 0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for qdir in sorted(topic_dir.iterdir()):
                if qdir.is_dir() and qdir.name.isdigit():
                    cq = self.get_or_create_for_log(topic_dir.name, int(qdir.name))
                    if cq is not None:
                        cq.recover(log_end, log_min)

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, made when new; raises :class:`UnsafePathError` for a name the store
        refuses to make a folder of."""
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = ConsumeQueue(queue_dir(self.root, topic, queue_id), topic, queue_id, self.entries_per_file)
            self.queues[key] = cq
        return cq

    def get_or_create_for_log(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """:meth:`get_or_create` for a record found in the log or a folder found on disk: a
        refused name (written before names were checked, or by a hostile master) gets no
        queue, is logged once, and the store keeps serving."""
        try:
            return self.get_or_create(topic, queue_id)
        except UnsafePathError as exc:
            if (topic, queue_id) not in self.refused:
                self.refused.add((topic, queue_id))
                log.warning("records of an unsafe queue name stay out of the ConsumeQueues: %s", exc)
            return None

    def dirty_files(self) -> list[MappedFile]:
        return [mf for cq in self.queues.values() for mf in cq.files.dirty_files()]

    def delete_below(self, log_min: int) -> int:
        return sum(cq.delete_below(log_min) for cq in self.queues.values())

    def clear(self) -> None:
        """Delete every queue's files (the log they pointed into is gone)."""
        for cq in self.queues.values():
            cq.files.drop_after(-1)
        self.queues.clear()

    def close(self) -> None:
        for cq in self.queues.values():
            cq.files.close()
