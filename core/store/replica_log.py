"""The replica applier: a log that grows from outside (a slave's bytes copied from its master)
and the dispatch of the records they hold (RocketMQ's ReputMessageService for a log it did not
write itself); and the log as replication reads it, by offset (``log_*``): a master streams it,
a slave compares it. Replication uses these (through the store) and never the CommitLog itself.
Cutting a replica's log where it stops agreeing with its master is the store's
``truncate``."""

from __future__ import annotations

import trio

from core.errors import DiskFullError, StoreClosedError, StoreError
from core.store.commitlog import CommitLog
from core.store.dispatcher import Dispatcher
from core.store.prefault import Prefaulter
from core.store.write_gate import WriteGate


class ReplicaLog:
    """Reads the CommitLog by offset and grows it with a master's bytes."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, gate: WriteGate, prefault: Prefaulter) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.gate = gate
        self.prefault = prefault
        self.grown = False  # whether bytes were appended here (a tail may end inside a record)

    def read_log(self, position: int, size_max: int) -> bytes:
        """Up to ``size_max`` bytes from ``position``, stopping at the log's end and at the end
        of the segment holding ``position`` (a StoreError when it is no longer in the log)."""
        seg = self.commitlog.segment_of(position)
        if seg is None:
            raise StoreError(f"offset {position} is no longer in this log")
        size = min(size_max, self.commitlog.write_offset - position, seg.end - position)
        return seg.read(position - seg.start, size) if size > 0 else b""

    def append_replicated(self, offset: int, data: bytes) -> None:
        """Append bytes a master's log holds at ``offset``; :meth:`dispatch_replicated` then
        makes their records visible."""
        gate = self.gate
        if gate.disk_full is not None:
            raise DiskFullError(gate.disk_full)
        if not gate.open:
            raise StoreClosedError("the store is not open")
        self.commitlog.append_replicated(offset, data)
        self.grown = True
        dispatcher = self.dispatcher
        dispatcher.reput_offset = max(dispatcher.reput_offset, self.commitlog.min_offset)  # a log that began mid-way
        prefault = self.prefault
        if prefault.populated_until - (offset + len(data)) < prefault.half_window:
            prefault.wanted.set()  # as for a put: fault the pages ahead in a thread, not here

    def dispatch_replicated(self) -> int:
        """Dispatch every record that replicated bytes completed, up to the dispatcher's limit
        (controller mode: the master's confirm offset); returns how many. A chunk may end
        inside a record: that one waits for the chunk holding its end. A replica's hot loop, a
        segment at a time (:mod:`core.store.log_dispatch`)."""
        limit = self.dispatcher.limit
        end = self.commitlog.write_offset
        return self._dispatch_to(end if limit is None else min(end, limit))

    def _dispatch_to(self, log_end: int) -> int:
        dispatcher = self.dispatcher
        dispatcher.dispatch_pending()
        log_ = self.commitlog
        reput = dispatcher.reput_offset
        batch = dispatcher.batch()
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
        dispatcher.reput_offset = reput
        return batch.finish()

    def incomplete_tail(self) -> int | None:
        """Where a record the master has not finished sending begins, when the log ends inside
        one (after :meth:`dispatch_replicated`); None when it ends at a record's end."""
        if not self.grown:
            return None
        self._dispatch_to(self.commitlog.write_offset)  # every whole record, past any limit
        reput = self.dispatcher.reput_offset
        return reput if reput < self.commitlog.write_offset else None

    async def wait_log_beyond(self, offset: int) -> None:
        """Return once the CommitLog extends past ``offset``."""
        dispatcher = self.dispatcher
        while self.commitlog.write_offset <= offset:
            if dispatcher.log_grew.is_set():
                dispatcher.log_grew = trio.Event()
            await dispatcher.log_grew.wait()
