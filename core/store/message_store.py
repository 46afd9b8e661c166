"""The message store of one node: CommitLog, ConsumeQueues, key index, checkpoint, recovery,
flushing, retention, driven by trio.

A store is made of parts, each given what it needs when it is made (never the store):

```
 MessageStore            the write path (put, put_many, put_batch), open/close, roles, truncate
  |- files               StoreFiles: CommitLog, ConsumeQueues, key index     (files.py)
  |- gate                WriteGate: whether writes are taken, and why not    (write_gate.py)
  |- dispatcher          Dispatcher: records -> queue and index entries      (dispatcher.py)
  |- parts.log           RecordLog: where puts go                            (interfaces.py)
  |- parts.recovery      Recovery: back from disk before serving
  |- parts.retention     Retention: which segments may go
  |- flusher             GroupCommit: fdatasync, sync-flush waiters          (group_commit.py)
  |- upkeep              Upkeep: checkpoints, disk state, retiring/archiving (store_upkeep.py)
  |- prefault            Prefaulter: pages ahead of the appends              (prefault.py)
  |- replica             ReplicaLog: a log grown from a master, read by offset (replica_log.py)
  '- reads               StoreReads: records, queue entries, keys            (store_reads.py)
```
``parts`` is the classic CommitLog's unless a replication mode passes its own factory
(``log_parts``, see :mod:`core.store.interfaces`): raft mode's proposes puts to the raft node
and dispatches committed entries. Methods of the parts that callers use are bound onto the
store once, when it is made, so a call costs no extra layer.

Appends run on the event loop and stay cheap (an encode and a copy into a mapped segment).
Everything that blocks (fdatasync, page pre-faulting, archiving, checkpoint writes) runs in worker
threads. Under sync flush, :meth:`MessageStore.put_durable` waits for a group commit: one
fdatasync covers every record appended before it started.

    async with open_message_store(root, StoreConfig()) as store:
        result = await store.put_durable(record)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from itertools import repeat
from pathlib import Path

import trio

from core.clock import Clock, now_ms
from core.config import StoreConfig
from core.errors import MessageTooLargeError
from core.nursery import open_unwrapped_nursery
from core.store.consume_queue import ConsumeQueue
from core.store.dispatch import BatchAppended
from core.store.dispatcher import Dispatcher
from core.store.files import StoreFiles
from core.store.group_commit import GroupCommit
from core.store.interfaces import LogParts, LogPartsFactory, TruncationListener
from core.store.layout import ABORT_FILE
from core.store.layout import holds_unsealed_raft as holds_unsealed_raft  # re-exported: mqctl asks it
from core.store.prefault import Prefaulter
from core.store.record_log import ClassicParts, CommitLogWriter
from core.store.recovery import CommitLogRecovery
from core.store.replica_log import ReplicaLog
from core.store.retention import AgeRetention
from core.store.store_reads import StoreReads
from core.store.store_types import BatchPut, PutResult, RecoveryReport, StoreHooks, StoreRole, StoreStatistics
from core.store.store_upkeep import Upkeep
from core.store.write_gate import WriteGate
from formats.properties import index_keys
from formats.record import MessageRecord, prepare_record
from formats.record_batch import RecordBatch
from formats.sysflag import TRANSACTION_PREPARED as TRANSACTION_HALF_BIT

log = logging.getLogger(__name__)


class MessageStore:
    """The store under ``root`` (``data_dir/<node>``)."""

    def __init__(
        self,
        root: Path,
        config: StoreConfig,
        plugins: StoreHooks | None = None,
        *,
        archive_dir: Path | None = None,
        clock: Clock = now_ms,
        log_parts: LogPartsFactory | None = None,
    ) -> None:
        self.root = root
        self.config = config
        self.plugins = plugins
        self.clock = clock  # stamps every record's store time
        self.archive_dir = archive_dir or root.parent / "archive" / root.name
        files = self.files = StoreFiles(root, config, plugins, clock)
        commitlog = self.commitlog = files.commitlog
        self.queues = files.queues
        self.index = files.index
        self.stats = StoreStatistics()
        gate = self.gate = WriteGate(self.stats)
        prefault = self.prefault = Prefaulter(commitlog, config.prefault_window_bytes)
        dispatcher = self.dispatcher = Dispatcher(files, prefault)
        classic = CommitLogRecovery(files, dispatcher)
        parts: LogParts
        if log_parts is None:
            parts = ClassicParts(CommitLogWriter(commitlog, dispatcher.keep), classic, AgeRetention(commitlog, config))
        else:
            parts = log_parts(files, dispatcher, classic)
        self.parts = parts
        self.log = log_ = parts.log
        flusher = self.flusher = GroupCommit(root, config, commitlog, self.stats, gate)
        upkeep = self.upkeep = Upkeep(files, dispatcher, gate, self.stats, parts.retention, self.archive_dir)
        replica = self.replica = ReplicaLog(commitlog, dispatcher, gate, prefault)
        reads = self.reads = StoreReads(commitlog, files.queues, files.index, dispatcher.dispatch_pending)
        self.role = StoreRole.WRITER
        self._truncation_listeners: list[TruncationListener] = []
        self._body_size_max = config.message_size_bytes_max
        self._index_enabled = config.index_enabled
        # the put path's calls into its parts, bound once
        self._placements = log_.placements
        self._write_records = log_.write_records
        self._write_batch = log_.write_batch
        self._keep = log_.keep
        # dispatching, flushing and upkeep
        self.dispatch_pending = dispatcher.dispatch_pending
        self.dispatch_batch = dispatcher.batch
        self.wait_flushed = flusher.wait_flushed
        self.flush = flusher.flush
        self.checkpoint = upkeep.checkpoint
        self.apply_retention = upkeep.apply_retention
        self.retire_segments = upkeep.retire_segments
        self.log_floor = files.log_floor
        # reads (docs/store.md): every one dispatches what was put first
        self.read_record = reads.read_record
        self.read_bytes = reads.read_bytes
        self.queue_entries = reads.queue_entries
        self.iter_queue_entries = reads.iter_queue_entries
        self.max_queue_offset = reads.max_queue_offset
        self.min_queue_offset = reads.min_queue_offset
        self.offset_by_time = reads.offset_by_time
        self.earliest_store_time = reads.earliest_store_time
        self.query_by_key = reads.query_by_key
        self.copies_since = reads.copies_since
        # the log as replication reads and grows it (core.store.interfaces.ReplicatedStore)
        self.read_log = replica.read_log
        self.record_start_at_or_before = commitlog.record_start_at_or_before
        self.first_difference = commitlog.first_difference
        self.append_replicated = replica.append_replicated
        self.dispatch_replicated = replica.dispatch_replicated
        self.wait_log_beyond = replica.wait_log_beyond

    @property
    def log_end(self) -> int:
        """Where the log's next byte goes (the CommitLog's write offset; a raft member's
        readable end)."""
        return self.commitlog.write_offset

    @property
    def log_start(self) -> int:
        """The log's first byte still on disk."""
        return self.commitlog.min_offset

    @property
    def log_segment_size(self) -> int:
        return self.commitlog.segment_size

    @property
    def reput_offset(self) -> int:
        """How far the log is dispatched to the ConsumeQueues and the key index."""
        return self.dispatcher.reput_offset

    # ---------------------------------------------------------------- opening

    def open(self) -> RecoveryReport:
        """Recover the store from disk (blocking; runs before serving)."""
        self.root.mkdir(parents=True, exist_ok=True)
        report = self.parts.recovery.recover()
        (self.root / ABORT_FILE).touch()  # an unclean stop leaves it
        self.gate.opened()
        self.dispatcher.opened()
        self.upkeep.update_disk_state()
        return report

    # ---------------------------------------------------------------- roles and truncation

    def set_role(self, role: StoreRole, reason: str | None = None) -> None:
        """Switch, at run time, between taking local writes (``WRITER``) and being a replica
        (``REPLICA``: puts refused with ``reason``; the log grows only from outside, by
        :meth:`append_replicated` or a raft log's commits).

        Becoming the writer again: a replicated tail that ends inside a record is cut (with
        :meth:`truncate`, so listeners hear of it), queue offsets continue from the
        ConsumeQueues, and the log forgets what an earlier term left (a raft leader's lost
        proposals)."""
        if role is StoreRole.REPLICA:
            self.dispatcher.dispatch_pending()
            self.gate.set_read_only(reason or "this store is a replica: send to its master")
        else:
            if self.role is StoreRole.REPLICA:
                tail = self.replica.incomplete_tail()
                if tail is not None:
                    self.truncate(tail)
                for cq in self.queues.queues.values():
                    cq.assigned = cq.max_offset
                self.index.reserved = 0  # reservations of puts that never reached the log
                self.log.writes_resumed()
            self.gate.set_read_only(None)
        self.role = role

    def set_readable_limit(self, limit: int | None) -> None:
        """Keep records ending past ``limit`` from readers (controller mode: the confirm offset,
        what every in-sync replica holds), whether put here or copied; None: readers see every
        record."""
        self.dispatcher.set_limit(limit)
        if self.replica.grown:
            self.replica.dispatch_replicated()

    def set_replicas_short(self, reason: str | None) -> None:
        """Refuse puts with ``reason`` while too few replicas are in sync (None: take them)."""
        self.gate.set_replicas_short(reason)

    def on_truncate(self, listener: TruncationListener) -> None:
        """Call ``listener(end)`` after every :meth:`truncate`, once the store's own derived
        state is cut: the broker's state derived from the log (timers, transaction halves,
        POP state, consumer offsets) follows it there."""
        self._truncation_listeners.append(listener)

    def truncate(self, end: int) -> int:
        """Cut the log at ``end`` (a record boundary) and everything derived from it: the
        ConsumeQueue entries and key-index files pointing at or past it, the dispatch cursor,
        the readable end and the checkpoint on disk; then call the :meth:`on_truncate`
        listeners. Returns the bytes cut. A replica cuts where it stops agreeing with its
        master; a raft log refuses (only its leader's entries cut it)."""
        self.dispatcher.dispatch_pending()
        self.dispatcher.forget_past(end)  # what a readable limit held back past the cut
        cut = self.log.truncate(end)
        self.files.truncate_derived(end)
        self.dispatcher.reput_offset = min(self.dispatcher.reput_offset, end)
        self.upkeep.clamp_checkpoint(end)
        for listener in self._truncation_listeners:
            listener(end)
        return cut

    # ---------------------------------------------------------------- writing

    def put(self, rec: MessageRecord) -> PutResult:
        """Append ``rec``; its queue offset, physical offset and store time are assigned here.

        Does not wait for the disk. Dispatch to the ConsumeQueues and the key index follows in
        batches (on the next yield to the loop, or at once when the batch is full); readers of
        this store always dispatch first, so they see every record put before.
        """
        if self.gate.refusal is not None:
            self.gate.refuse()
        self._check_body(rec)
        prep = prepare_record(rec)
        # Every allocation (queue file, index file, segment) happens before the append, so a
        # full disk leaves the store as it was.
        cq, queue_offset = self._claim_queue(rec.topic, rec.queue_id, rec.sysflag, 1)
        keys = index_keys(rec.properties) if self._index_enabled else None
        reserved = self._reserve_index_entries(len(keys)) if keys else 0
        stamp = self.clock()
        try:
            (phys,) = self._write_records((rec,), (prep,), (queue_offset,), stamp)
        except BaseException:
            self.index.reserved -= reserved
            raise
        size = prep[0]
        self._written(cq, queue_offset, stamp)
        self._keep([(rec, cq, phys, size, queue_offset, stamp, keys)], 1, phys)
        return PutResult(phys, queue_offset, size, stamp)

    def put_many(self, records: list[MessageRecord]) -> list[PutResult]:
        """:meth:`put` for a batch: records of one topic, queue and sysflag, stored back to back
        in one segment (rolled first if they do not fit), so a full disk refuses the whole batch
        before any of it is written."""
        if len(records) < 2:
            return [self.put(rec) for rec in records]
        if self.gate.refusal is not None:
            self.gate.refuse()
        first = records[0]
        self._check_batch(records)
        preps = [prepare_record(rec) for rec in records]
        if self._placements([prep[0] for prep in preps]) is None:
            return [self.put(rec) for rec in records]  # larger than a segment: one by one
        keys = [index_keys(rec.properties) for rec in records] if self._index_enabled else None
        count = len(records)
        cq, queue_offset = self._claim_queue(first.topic, first.queue_id, first.sysflag, count)
        reserved = self._reserve_index_entries(sum(map(len, keys))) if keys is not None else 0
        stamp = self.clock()
        qos = range(queue_offset, queue_offset + count) if cq is not None else (0,) * count
        try:
            offsets = self._write_records(records, preps, qos, stamp)
        except BaseException:
            self.index.reserved -= reserved
            raise
        self._written(cq, qos[-1], stamp)
        self._keep(list(zip(records, repeat(cq), offsets, (p[0] for p in preps), qos, repeat(stamp),
                            keys or repeat(None))), count, offsets[-1])
        return [PutResult(phys, qo, prep[0], stamp) for phys, qo, prep in zip(offsets, qos, preps)]

    def put_batch(self, batch: RecordBatch) -> BatchPut:
        """:meth:`put_many` for a batch request's records as one :class:`RecordBatch`: encoded
        and written in one copy, their queue and index entries written together at dispatch."""
        self._admit_batch(batch)
        count = len(batch)
        offsets = self._placements(batch.sizes)
        if offsets is None:  # larger than a segment: one by one
            results = [self.put(batch.record(i, 0, 0, 0)) for i in range(count)]
            return BatchPut([r.phys_offset for r in results], results[0].queue_offset,
                            results[-1].phys_offset + results[-1].size, results[-1].store_timestamp)
        cq, queue_offset = self._claim_queue(batch.topic, batch.queue_id, batch.sysflag, count)
        uniq_keys = keys = None
        reserved = 0
        if self._index_enabled:
            uniq_keys = batch.one_key_each()
            if uniq_keys is None:
                keys = batch.index_keys()
            reserved = self._reserve_index_entries(len(uniq_keys) if uniq_keys is not None else sum(map(len, keys or ())))
        stamp = self.clock()
        queue_offsets = range(queue_offset, queue_offset + count) if cq is not None else [0] * count
        try:
            self._write_batch(batch, offsets, queue_offsets, stamp)
        except BaseException:
            self.index.reserved -= reserved
            raise
        self._written(cq, queue_offset + count - 1, stamp)
        self._keep([BatchAppended(batch, cq, offsets, queue_offset, stamp, uniq_keys, keys)], count, offsets[-1])
        return BatchPut(offsets, queue_offset if cq is not None else 0, offsets[-1] + batch.sizes[-1], stamp)

    async def put_durable(self, rec: MessageRecord) -> PutResult:
        """:meth:`put`, then under sync flush wait for the group commit that covers it."""
        result = self.put(rec)
        if self.config.flush != "sync":
            return result
        flushed = await self.wait_flushed(result.phys_offset + result.size, self.config.sync_flush_timeout_ms / 1000)
        if flushed:
            return result
        return PutResult(result.phys_offset, result.queue_offset, result.size, result.store_timestamp, flushed=False)

    def _admit_batch(self, batch: RecordBatch) -> None:
        """Refuse a batch while writes are refused, or when a body is over the limit."""
        if self.gate.refusal is not None:
            self.gate.refuse()
        longest = max(map(len, batch.bodies))
        if longest > self._body_size_max:
            raise MessageTooLargeError(f"body of {longest} bytes is over the {self._body_size_max}-byte limit")

    def _check_batch(self, records: list[MessageRecord]) -> None:
        """A batch's records: each body within the limit, all of one topic, queue and sysflag."""
        first = records[0]
        for rec in records:
            self._check_body(rec)
            if (rec.topic, rec.queue_id, rec.sysflag) != (first.topic, first.queue_id, first.sysflag):
                raise ValueError("put_many takes records of one topic, queue and sysflag")

    def _check_body(self, rec: MessageRecord) -> None:
        if len(rec.body) > self._body_size_max:
            raise MessageTooLargeError(
                f"body of {len(rec.body)} bytes is over the {self._body_size_max}-byte limit")

    def _claim_queue(self, topic: str, queue_id: int, sysflag: int, count: int) -> tuple[ConsumeQueue | None, int]:
        """The queue ``count`` records of ``topic`` and ``queue_id`` go to, and their first
        offset, with queue-file room made (transaction halves get none: offset 0)."""
        if sysflag & TRANSACTION_HALF_BIT:
            return None, 0
        cq = self.queues.queues.get((topic, queue_id)) or self.queues.get_or_create(topic, queue_id)
        first = cq.assigned
        if first + count > cq.room_end:
            cq.ensure_room(first)
            cq.ensure_room(first + count - 1)
        return cq, first

    def _reserve_index_entries(self, count: int) -> int:
        """Reserve key-index room for ``count`` keys of records about to be put."""
        if count:
            self.index.reserve(count)
        return count

    def _written(self, cq: ConsumeQueue | None, last_queue_offset: int, stamp: int) -> None:
        """Records reached the log: their queue offsets and store time are taken."""
        if cq is not None:
            cq.assigned = last_queue_offset + 1
        self.dispatcher.last_store_ts = stamp

    # ---------------------------------------------------------------- background work

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the flush, dispatch, checkpoint, retention, disk and pre-fault tasks until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.flusher.loop)
            nursery.start_soon(self.dispatcher.loop)
            if self.config.flush == "sync":
                nursery.start_soon(self.flusher.watchdog)
            nursery.start_soon(self.upkeep.checkpoint_loop)
            nursery.start_soon(self.upkeep.maintenance_loop)
            if self.prefault.enabled:
                nursery.start_soon(self.prefault.loop)
            task_status.started()

    # ---------------------------------------------------------------- closing

    async def close(self) -> None:
        """Flush everything, write the checkpoint, mark a clean shutdown and unmap."""
        if not self.gate.open:
            return
        with trio.CancelScope(shield=True):
            self.dispatch_pending()
            try:
                await self.flush()
                await self.checkpoint()
            except OSError as exc:  # e.g. no room for the checkpoint: recovery will redo it
                log.error("store %s: final flush failed (%s); next start recovers", self.root, exc)
                self._close_files()
                return
            self._close_files()
            (self.root / ABORT_FILE).unlink(missing_ok=True)

    def _close_files(self) -> None:
        self.gate.closed()
        self.flusher.release_waiters()
        self.files.close()
        self.parts.close()


@contextlib.asynccontextmanager
async def open_message_store(
    root: Path, config: StoreConfig, plugins: StoreHooks | None = None, *, store: MessageStore | None = None,
    **kwargs: object,
) -> AsyncIterator[MessageStore]:
    """Open (recover) a store, run its background tasks, and close it cleanly on exit.
    ``store`` is one made already (a replication mode's own, see ``mq_message_store``)."""
    if store is None:
        store = MessageStore(root, config, plugins, **kwargs)  # type: ignore[arg-type]
    await trio.to_thread.run_sync(store.open)
    try:
        async with open_unwrapped_nursery() as nursery:
            await nursery.start(store.serve)
            try:
                yield store
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await store.close()


@contextlib.contextmanager
def opened_store(root: Path, config: StoreConfig, *, clock: Clock = now_ms) -> Iterator[MessageStore]:
    """A recovered store for synchronous tools (no background tasks); closed without flushing
    the CommitLog beyond what recovery did. For tests and offline repair."""
    store = MessageStore(root, config, clock=clock)
    store.open()
    try:
        yield store
    finally:
        trio.run(store.close)
