"""A log that grows from outside: a slave's bytes copied from its master, a raft member's
entries, and the dispatch of the records they hold (RocketMQ's ReputMessageService for a log
it did not write itself), plus cutting such a log where it stops agreeing with its source; and
the log as replication reads it, by offset (``log_*``): a master streams it, a slave compares
it. Replication uses these and never the CommitLog itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import trio

from core.errors import DiskFullError, StoreClosedError, StoreError
from core.store.commitlog import CommitLog
from core.store.consume_queue import ConsumeQueueTable
from core.store.key_index import KeyIndex
from core.store.log_dispatch import LogDispatch
from core.store.store_types import StoreHooks


class ReplicaLog:
    """The replica side of :class:`core.store.message_store.MessageStore` (a mixin)."""

    root: Path
    plugins: StoreHooks | None
    commitlog: CommitLog
    queues: ConsumeQueueTable
    index: KeyIndex
    reput_offset: int
    _open: bool
    _read_only: str | None
    _disk_full: str | None
    _refusal: str | None
    _flush_failed: bool
    _notify_dispatch: bool
    _index_enabled: bool
    _delay_levels_ms: tuple[int, ...]
    _last_store_ts: int
    _last_dispatch_ts: int
    _log_grew: trio.Event
    _prefault_wanted: trio.Event
    _prefault_half_window: int
    _populated_until: int

    if TYPE_CHECKING:
        def dispatch_pending(self) -> int: ...

    @property
    def log_end(self) -> int:
        """Where the log's next byte goes (the CommitLog's write offset)."""
        return self.commitlog.write_offset

    @property
    def log_start(self) -> int:
        """The log's first byte still on disk."""
        return self.commitlog.min_offset

    @property
    def log_segment_size(self) -> int:
        return self.commitlog.segment_size

    def read_log(self, position: int, size_max: int) -> bytes:
        """Up to ``size_max`` bytes from ``position``, stopping at the log's end and at the end
        of the segment holding ``position`` (a StoreError when it is no longer in the log)."""
        seg = self.commitlog.segment_of(position)
        if seg is None:
            raise StoreError(f"offset {position} is no longer in this log")
        size = min(size_max, self.commitlog.write_offset - position, seg.end - position)
        return seg.read(position - seg.start, size) if size > 0 else b""

    def record_start_at_or_before(self, target: int) -> int:
        """The start of the last complete record at or before ``target`` (or its segment's start)."""
        return self.commitlog.record_start_at_or_before(target)

    def first_difference(self, offset: int, data: bytes) -> int | None:
        """Where ``data``, another log's bytes at ``offset``, first differs from this log."""
        return self.commitlog.first_difference(offset, data)

    def set_read_only(self, reason: str | None) -> None:
        """Refuse (with ``reason``) or allow local writes: a replica's log only grows by
        :meth:`append_replicated`, so its bytes stay its master's."""
        self._read_only = reason
        if self._open and not self._flush_failed:
            self._refusal = reason or self._disk_full

    def append_replicated(self, offset: int, data: bytes) -> None:
        """Append bytes a master's log holds at ``offset``; :meth:`dispatch_replicated` then
        makes their records visible."""
        if self._disk_full is not None:
            raise DiskFullError(self._disk_full)
        if not self._open:
            raise StoreClosedError("the store is not open")
        self.commitlog.append_replicated(offset, data)
        self.reput_offset = max(self.reput_offset, self.commitlog.min_offset)  # a log that began mid-way
        if self._populated_until - (offset + len(data)) < self._prefault_half_window:
            self._prefault_wanted.set()  # as for a put: fault the pages ahead in a thread, not here

    def dispatch_replicated(self) -> int:
        """Dispatch every record that replicated bytes completed; returns how many. A chunk
        may end inside a record: that one waits for the chunk holding its end. A replica's hot
        loop, a segment at a time (:mod:`core.store.log_dispatch`)."""
        self.dispatch_pending()
        log_ = self.commitlog
        log_end = log_.write_offset
        reput = self.reput_offset
        batch = self.dispatch_batch()
        while reput < log_end:
            seg = log_.segment_of(reput)
            if seg is None:
                break
            base = seg.start
            # stops at a record the next chunk completes, or at the segment's end after a BLANK
            pos = batch.scan(seg.view, reput - base, min(log_end, seg.end) - base, base)
            if base + pos == reput:
                break
            reput = base + pos
        self.reput_offset = reput
        return batch.finish()

    def dispatch_batch(self) -> LogDispatch:
        """A batch for dispatching records found in the log (a replica's or a raft log's):
        :meth:`LogDispatch.scan` or :meth:`LogDispatch.add` them, then
        :meth:`LogDispatch.finish`."""
        return LogDispatch(self)

    def truncate_replica(self, end: int) -> int:
        """Cut a replica's log (and the queue entries pointing into the cut) at ``end``, where
        it stops agreeing with its master; returns the bytes cut. Stale key-index entries stay:
        lookups check every record they find."""
        self.dispatch_pending()
        cut = self.commitlog.truncate(end)
        for cq in self.queues.queues.values():
            cq.truncate(end)
        self.reput_offset = min(self.reput_offset, end)
        return cut

    async def wait_log_beyond(self, offset: int) -> None:
        """Return once the CommitLog extends past ``offset``."""
        while self.commitlog.write_offset <= offset:
            if self._log_grew.is_set():
                self._log_grew = trio.Event()
            await self._log_grew.wait()

