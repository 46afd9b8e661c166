"""The message store of one node: CommitLog, ConsumeQueues, key index, checkpoint, recovery,
flushing, retention, driven by trio.

Its parts: writing and recovery here; reads in :mod:`store_reads`, flushing in
:mod:`group_commit`, a log grown from a master or a raft leader in :mod:`replica_log`, and
checkpoints, retention and pre-faulting in :mod:`store_upkeep` (mixins of :class:`MessageStore`).

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
from typing import cast

import trio

from core.clock import Clock, now_ms
from core.config import StoreConfig
from core.errors import (
    DiskFullError,
    MessageTooLargeError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
)
from core.nursery import open_unwrapped_nursery
from core.store.checkpoint import read_checkpoint
from core.store.commitlog import CommitLog
from core.store.consume_queue import ConsumeQueue, ConsumeQueueTable
from core.store.dispatch import Appended, BatchAppended, DispatchBatch, DispatchRequest, record_tags_code
from core.store.group_commit import GroupCommit
from core.store.key_index import KeyIndex, key_hash
from core.store.log_dispatch import write_batch_entries
from core.store.record_log import CommitLogWriter, KeptUnits, RecordLog
from core.store.replica_log import ReplicaLog
from core.store.store_reads import StoreReads
from core.store.store_types import BatchPut, PutResult, RecoveryReport, StoreHooks, StoreStatistics
from core.store.store_upkeep import CHECKPOINT_FILE, StoreUpkeep
from core.topic_names import SCHEDULE_TOPIC
from formats.errors import RecordError
from formats.properties import TAGS as TAGS_PROPERTY
from formats.properties import index_keys
from formats.record import (
    MessageRecord,
    decode_record,
    is_blank,
    prepare_record,
)
from formats.record_batch import RecordBatch
from formats.sysflag import TRANSACTION_PREPARED as TRANSACTION_HALF_BIT
from formats.tags import tags_code

log = logging.getLogger(__name__)

DISPATCH_BATCH_MAX = 1024
ABORT_FILE = "abort"
# A store that ran as a raft member keeps its raft state here (replication.dledger.store).
RAFT_STATE_DIR = "dledger"
RAFT_BASE_FILE = "base"
# logFloor=<offset>: the CommitLog continues from this segment start; below it lies a sealed
# raft era (DLedger entries, read by offset only). Written when a group leaves raft.
LOG_FLOOR_FILE = "logfloor"


def holds_unsealed_raft(root: Path) -> bool:
    """Whether the store under ``root`` holds raft entries no seal has closed (it can only open
    as a raft member's store until `mqctl restart` seals it)."""
    return (root / RAFT_STATE_DIR / RAFT_BASE_FILE).exists() and not (root / LOG_FLOOR_FILE).exists()


class MessageStore(StoreReads, StoreUpkeep, GroupCommit, ReplicaLog):
    """The store under ``root`` (``data_dir/<node>``)."""

    def __init__(
        self,
        root: Path,
        config: StoreConfig,
        plugins: StoreHooks | None = None,
        *,
        archive_dir: Path | None = None,
        clock: Clock = now_ms,
    ) -> None:
        self.root = root
        self.clock = clock  # stamps every record's store time
        self.config = config
        self.plugins = plugins
        self.archive_dir = archive_dir or root.parent / "archive" / root.name
        self.commitlog = CommitLog(root / "commitlog", config.segment_size_bytes)
        self.log: RecordLog = CommitLogWriter(self.commitlog, self._keep_for_dispatch)
        self.queues = ConsumeQueueTable(root / "consumequeue", config.cq_entries_per_file)
        self.index = KeyIndex(root / "index", config.index_slots, config.index_entries)
        self.reput_offset = 0
        self.stats = StoreStatistics()
        self._disk_full: str | None = None
        self._read_only: str | None = None  # why a replica refuses local writes
        self._log_grew = trio.Event()  # set on every append: the HA service streams as the log grows
        self._refusal: str | None = "the store is not open"  # None while writes are allowed
        self._flush_failed = False
        self._body_size_max = config.message_size_bytes_max
        self._index_enabled = config.index_enabled
        self._delay_levels_ms = config.delay_levels_ms
        # records put and not yet dispatched: one by one, or a batch's together
        self._pending: list[Appended | BatchAppended] = []
        self._pending_records = 0
        self._dispatch_wanted = trio.Event()
        self._prefault_half_window = config.prefault_window_bytes // 2
        self._open = False
        self._notify_dispatch = False
        self._last_store_ts = 0
        self._last_dispatch_ts = 0
        # Group commit: every waiter of a round shares the event of the flush that starts next.
        self._next_round_done = trio.Event()
        self._flush_waiters = 0
        self._round_in_flight: trio.Event | None = None
        self._round_started: float | None = None
        self._flush_wanted = trio.Event()
        self._prefault_wanted = trio.Event()
        self._populated_until = 0
        self._prefault_ok = config.prefault_window_bytes > 0

    # ---------------------------------------------------------------- opening and recovery

    def open(self) -> RecoveryReport:
        """Recover the store from disk (blocking; runs before serving)."""
        self.root.mkdir(parents=True, exist_ok=True)
        clean = not (self.root / ABORT_FILE).exists()
        checkpoint = read_checkpoint(self.root / CHECKPOINT_FILE)
        floor = self.log_floor()
        if holds_unsealed_raft(self.root):
            raise StoreError(f"{self.root} holds raft (DLedger) entries that were never sealed: start it with "
                             "replication.mode = \"dledger\", or switch the group with `mqctl restart` after "
                             "`mqctl config set replication.mode ...`")
        log_recovery = self.commitlog.recover(checkpoint, cut_damage=self.config.recover_cut_damage, floor=floor or 0)
        end = log_recovery.end
        self.queues.recover(end, self.commitlog.min_offset)
        if self.config.index_enabled:
            self.index.recover(end)
        start = max(self.commitlog.min_offset, floor or 0)
        if checkpoint is not None:
            start = max(start, min(checkpoint.dispatched_offset, end))
        self.reput_offset = start
        redispatched = self._catch_up()
        self._opened()
        return RecoveryReport(clean, log_recovery, redispatched)

    def log_floor(self) -> int | None:
        """Where the CommitLog continues a sealed raft era (None: it has none)."""
        try:
            text = (self.root / LOG_FLOOR_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        key, _, value = text.strip().partition("=")
        if key != "logFloor" or not value.isdigit():
            raise StoreError(f"{self.root / LOG_FLOOR_FILE}: expected logFloor=<offset>, found {text.strip()!r}")
        return int(value)

    def _opened(self) -> None:
        """Recovery is over: mark the store open (an unclean stop leaves the abort file)."""
        (self.root / ABORT_FILE).touch()
        self._open = True
        self._refusal = self._read_only
        self._notify_dispatch = self.plugins is not None and self.plugins.listens_to_dispatch()
        self._update_disk_state()

    def _catch_up(self) -> int:
        """Dispatch every record between the reput cursor and the end of the log."""
        count = 0
        log_ = self.commitlog
        while self.reput_offset < log_.write_offset:
            seg = log_.segment_of(self.reput_offset)
            if seg is None:
                raise StoreCorruptError("reput cursor outside the log", offset=self.reput_offset)
            pos = self.reput_offset - seg.start
            if is_blank(seg.view, pos):
                self.reput_offset = seg.end
                continue
            try:
                rec = decode_record(seg.view, pos, limit=min(seg.size, log_.write_offset - seg.start),
                                    check_crc=False, with_body=False)
            except RecordError as exc:
                raise StoreCorruptError(f"cannot dispatch: {exc.reason}", seg.path,
                                        self.reput_offset) from exc
            req = DispatchRequest.of(rec, self.reput_offset, rec.total_size, delay_levels_ms=self._delay_levels_ms)
            self._dispatch(req)
            self.reput_offset += rec.total_size
            count += 1
        return count

    # ---------------------------------------------------------------- writing

    def put(self, rec: MessageRecord) -> PutResult:
        """Append ``rec``; its queue offset, physical offset and store time are assigned here.

        Does not wait for the disk. Dispatch to the ConsumeQueues and the key index follows in
        batches (on the next yield to the loop, or at once when the batch is full); readers of
        this store always dispatch first, so they see every record put before.
        """
        if self._refusal is not None:
            self._refuse()
        self._check_body(rec)
        prep = prepare_record(rec)
        # Every allocation (queue file, index file, segment) happens before the append, so a
        # full disk leaves the store as it was.
        cq, queue_offset = self._claim_queue(rec.topic, rec.queue_id, rec.sysflag, 1)
        keys = index_keys(rec.properties) if self._index_enabled else None
        reserved = self._reserve_index_entries(len(keys)) if keys else 0
        stamp = self.clock()
        try:
            (phys,) = self.log.write_records((rec,), (prep,), (queue_offset,), stamp)
        except BaseException:
            self.index.reserved -= reserved
            raise
        size = prep[0]
        self._written(cq, queue_offset, stamp)
        self.log.keep([(rec, cq, phys, size, queue_offset, stamp, keys)], 1, phys)
        return PutResult(phys, queue_offset, size, stamp)

    def put_many(self, records: list[MessageRecord]) -> list[PutResult]:
        """:meth:`put` for a batch: records of one topic, queue and sysflag, stored back to back
        in one segment (rolled first if they do not fit), so a full disk refuses the whole batch
        before any of it is written."""
        if len(records) < 2:
            return [self.put(rec) for rec in records]
        if self._refusal is not None:
            self._refuse()
        first = records[0]
        self._check_batch(records)
        preps = [prepare_record(rec) for rec in records]
        if self.log.placements([prep[0] for prep in preps]) is None:
            return [self.put(rec) for rec in records]  # larger than a segment: one by one
        keys = [index_keys(rec.properties) for rec in records] if self._index_enabled else None
        count = len(records)
        cq, queue_offset = self._claim_queue(first.topic, first.queue_id, first.sysflag, count)
        reserved = self._reserve_index_entries(sum(map(len, keys))) if keys is not None else 0
        stamp = self.clock()
        qos = range(queue_offset, queue_offset + count) if cq is not None else (0,) * count
        try:
            offsets = self.log.write_records(records, preps, qos, stamp)
        except BaseException:
            self.index.reserved -= reserved
            raise
        self._written(cq, qos[-1], stamp)
        self.log.keep(list(zip(records, repeat(cq), offsets, (p[0] for p in preps), qos, repeat(stamp),
                               keys or repeat(None))), count, offsets[-1])
        return [PutResult(phys, qo, prep[0], stamp) for phys, qo, prep in zip(offsets, qos, preps)]

    def put_batch(self, batch: RecordBatch) -> BatchPut:
        """:meth:`put_many` for a batch request's records as one :class:`RecordBatch`: encoded
        and written in one copy, their queue and index entries written together at dispatch."""
        self._admit_batch(batch)
        count = len(batch)
        offsets = self.log.placements(batch.sizes)
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
            self.log.write_batch(batch, offsets, queue_offsets, stamp)
        except BaseException:
            self.index.reserved -= reserved
            raise
        self._written(cq, queue_offset + count - 1, stamp)
        self.log.keep([BatchAppended(batch, cq, offsets, queue_offset, stamp, uniq_keys, keys)], count, offsets[-1])
        return BatchPut(offsets, queue_offset if cq is not None else 0, offsets[-1] + batch.sizes[-1], stamp)

    def _admit_batch(self, batch: RecordBatch) -> None:
        """Refuse a batch while writes are refused, or when a body is over the limit."""
        if self._refusal is not None:
            self._refuse()
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
        self._last_store_ts = stamp

    def _keep_for_dispatch(self, units: KeptUnits, count: int, last_phys: int) -> None:
        """The CommitLog's :meth:`RecordLog.keep`: onto the pending list, and wake the
        dispatch, the HA service and the pre-fault task."""
        self._pending.extend(units)
        self._log_grew.set()
        pending = self._pending_records = self._pending_records + count
        if pending == count:
            self._dispatch_wanted.set()
        if pending >= DISPATCH_BATCH_MAX:
            self.dispatch_pending()
        if self._populated_until - last_phys < self._prefault_half_window:
            self._prefault_wanted.set()

    def _refuse(self) -> None:
        if not self._open:
            raise StoreClosedError("the store is not open")
        if self._refusal is self._read_only:
            raise ReadOnlyStoreError(self._read_only)
        if self._refusal is self._disk_full:
            self.stats.refused_disk_full += 1
            raise DiskFullError(self._refusal)
        raise StoreError(self._refusal or "writes refused")

    def dispatch_pending(self) -> int:
        """Write the queue and index entries of every record put but not yet dispatched."""
        pending, count = self._pending, self._pending_records
        if not pending:
            return 0
        self._pending = []
        self._pending_records = 0
        index_entries: list[tuple[int, int, int]] = []
        for unit in pending:
            if type(unit) is BatchAppended:
                write_batch_entries(self.index, unit, index_entries)
                continue
            rec, cq, phys, size, queue_offset, stamp, keys = cast(Appended, unit)
            if cq is not None:
                cq.put_entry(queue_offset, phys, size, tags_code(rec.properties.get(TAGS_PROPERTY))
                             if rec.topic != SCHEDULE_TOPIC else
                             record_tags_code(rec.topic, rec.properties, stamp, self._delay_levels_ms))
            if keys:
                topic = rec.topic
                index_entries.extend([(key_hash(topic, k), phys, stamp) for k in keys])
        self.index.put_many(index_entries)
        last = pending[-1]
        if type(last) is BatchAppended:
            self.reput_offset = last.offsets[-1] + last.batch.sizes[-1]
            self._last_dispatch_ts = last.store_timestamp
        else:
            self.reput_offset = last[2] + last[3]  # type: ignore[operator]
            self._last_dispatch_ts = last[5]  # type: ignore[assignment]
        if self._notify_dispatch and self.plugins is not None:
            self.plugins.records_dispatched(self.root, DispatchBatch(pending, self._delay_levels_ms))
        return count

    async def _dispatch_loop(self) -> None:
        while True:
            await self._dispatch_wanted.wait()
            self._dispatch_wanted = trio.Event()
            self.dispatch_pending()

    def _dispatch(self, req: DispatchRequest) -> None:
        """Dispatch one record found by scanning the log (recovery and catch-up)."""
        if req.to_consume_queue and (cq := self.queues.get_or_create_for_log(req.topic, req.queue_id)):
            cq.put_entry(req.queue_offset, req.phys_offset, req.size, req.tags_code)
        if self._index_enabled and not self.index.indexed_below(req.phys_offset):
            keys = [*req.keys, *([req.uniq_key] if req.uniq_key else [])]  # = index_keys of the record
            self.index.reserve(len(keys))
            self.index.put_many([(key_hash(req.topic, k), req.phys_offset, req.store_timestamp)
                                 for k in keys])
        self._last_dispatch_ts = req.store_timestamp
        if self._notify_dispatch and self.plugins is not None:
            self.plugins.records_dispatched(self.root, DispatchBatch.of_requests((req,)))

    # ---------------------------------------------------------------- background work

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the flush, checkpoint, retention, disk and pre-fault tasks until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flush_loop)
            nursery.start_soon(self._dispatch_loop)
            if self.config.flush == "sync":
                nursery.start_soon(self._flush_watchdog)
            nursery.start_soon(self._checkpoint_loop)
            nursery.start_soon(self._maintenance_loop)
            if self._prefault_ok:
                nursery.start_soon(self._prefault_loop)
            task_status.started()

    # ---------------------------------------------------------------- closing

    async def close(self) -> None:
        """Flush everything, write the checkpoint, mark a clean shutdown and unmap."""
        if not self._open:
            return
        with trio.CancelScope(shield=True):
            self.dispatch_pending()
            try:
                await self.flush()
                await self.checkpoint()
            except OSError as exc:  # e.g. no room for the checkpoint: recovery will redo it
                log.error("store %s: final flush failed (%s); next start recovers", self.root, exc)
                self._open = False
                self._close_files()
                return
            self._open = False
            self._close_files()
            (self.root / ABORT_FILE).unlink(missing_ok=True)

    def _close_files(self) -> None:
        self._refusal = "the store is closed"
        self._next_round_done.set()
        self.commitlog.close()
        self.queues.close()
        self.index.close()


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
