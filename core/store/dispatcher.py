"""Dispatch: what makes records visible to consumers, by writing their ConsumeQueue entries
and key-index entries (RocketMQ's ReputMessageService). Records a store put itself wait on a
pending list and are dispatched in batches, on the loop's next turn or when the batch is full;
records found in the log (a replica's, a raft member's, recovery's) go through a
:class:`core.store.log_dispatch.LogDispatch`. :attr:`Dispatcher.reput_offset` is how far the
log is dispatched. Under a controller, :attr:`Dispatcher.limit` holds back records past the
confirm offset (what every SyncStateSet member holds), so a reader never sees a record a later
master could lack."""

from __future__ import annotations

from typing import cast

import trio

from core.store.dispatch import Appended, BatchAppended, DispatchBatch, DispatchRequest, record_tags_code
from core.store.files import StoreFiles
from core.store.interfaces import KeptUnits
from core.store.key_index import key_hash
from core.store.log_dispatch import LogDispatch, write_batch_entries
from core.store.prefault import Prefaulter
from core.topic_names import SCHEDULE_TOPIC
from formats.properties import TAGS as TAGS_PROPERTY
from formats.tags import tags_code

DISPATCH_BATCH_MAX = 1024


class Dispatcher:
    """The dispatch of one store's records (a :class:`core.store.interfaces.DispatchCursor`)."""

    def __init__(self, files: StoreFiles, prefault: Prefaulter) -> None:
        self.root = files.root
        self.plugins = files.plugins
        self.queues = files.queues
        self.index = files.index
        self.index_enabled = files.index_enabled
        self.delay_levels_ms = files.config.delay_levels_ms
        self.notify_dispatch = False  # whether plugins listen (known once the store is open)
        self.reput_offset = 0
        self.last_store_ts = 0
        self.last_dispatch_ts = 0
        # records put and not yet dispatched: one by one, or a batch's together
        self._pending: list[Appended | BatchAppended] = []
        self._pending_records = 0
        self.limit: int | None = None  # records ending past it wait (None: none wait)
        self._wanted = trio.Event()
        self.log_grew = trio.Event()  # set on every put: the HA service streams as the log grows
        self._prefault = prefault

    def opened(self) -> None:
        self.notify_dispatch = self.plugins is not None and self.plugins.listens_to_dispatch()

    def keep(self, units: KeptUnits, count: int, last_phys: int) -> None:
        """The CommitLog's :meth:`RecordLog.keep`: onto the pending list, and wake the
        dispatch, the HA service and the pre-fault task."""
        self._pending.extend(units)
        self.log_grew.set()
        pending = self._pending_records = self._pending_records + count
        if pending == count:
            self._wanted.set()
        if pending >= DISPATCH_BATCH_MAX:
            self.dispatch_pending()
        prefault = self._prefault
        if prefault.populated_until - last_phys < prefault.half_window:
            prefault.wanted.set()

    def set_limit(self, limit: int | None) -> None:
        """Dispatch no record ending past ``limit`` (None: every record); what now fits of the
        records put goes (a replica's copied records go at its next ``dispatch_replicated``)."""
        self.limit = limit
        self.dispatch_pending()

    def dispatch_pending(self) -> int:
        """Write the queue and index entries of every record put but not yet dispatched (up to
        :attr:`limit`)."""
        pending, count = self._pending, self._pending_records
        if not pending:
            return 0
        if self.limit is not None and _unit_end(pending[-1]) > self.limit:
            fits = 0
            while fits < len(pending) and _unit_end(pending[fits]) <= self.limit:
                fits += 1
            if fits == 0:
                return 0
            pending, self._pending = pending[:fits], pending[fits:]
            count = sum(_unit_records(u) for u in pending)
            self._pending_records -= count
        else:
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
                             record_tags_code(rec.topic, rec.properties, stamp, self.delay_levels_ms))
            if keys:
                topic = rec.topic
                index_entries.extend([(key_hash(topic, k), phys, stamp) for k in keys])
        self.index.put_many(index_entries)
        last = pending[-1]
        if type(last) is BatchAppended:
            self.reput_offset = last.offsets[-1] + last.batch.sizes[-1]
            self.last_dispatch_ts = last.store_timestamp
        else:
            self.reput_offset = last[2] + last[3]  # type: ignore[operator]
            self.last_dispatch_ts = last[5]  # type: ignore[assignment]
        if self.notify_dispatch and self.plugins is not None:
            self.plugins.records_dispatched(self.root, DispatchBatch(pending, self.delay_levels_ms))
        return count

    def forget_past(self, end: int) -> None:
        """The log was cut at ``end``: records held back past it are gone."""
        kept = [u for u in self._pending if _unit_end(u) <= end]
        if len(kept) != len(self._pending):
            self._pending = kept
            self._pending_records = sum(_unit_records(u) for u in kept)

    async def loop(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            self.dispatch_pending()

    def batch(self) -> LogDispatch:
        """A batch for dispatching records found in the log (a replica's or a raft log's):
        :meth:`LogDispatch.scan` or :meth:`LogDispatch.add` them, then
        :meth:`LogDispatch.finish`."""
        return LogDispatch(self)

    def dispatch_found(self, req: DispatchRequest) -> None:
        """Dispatch one record found by scanning the log (recovery's catch-up)."""
        if req.to_consume_queue and (cq := self.queues.get_or_create_for_log(req.topic, req.queue_id)):
            cq.put_entry(req.queue_offset, req.phys_offset, req.size, req.tags_code)
        if self.index_enabled and not self.index.indexed_below(req.phys_offset):
            keys = [*req.keys, *([req.uniq_key] if req.uniq_key else [])]  # = index_keys of the record
            self.index.reserve(len(keys))
            self.index.put_many([(key_hash(req.topic, k), req.phys_offset, req.store_timestamp)
                                 for k in keys])
        self.last_dispatch_ts = req.store_timestamp
        if self.notify_dispatch and self.plugins is not None:
            self.plugins.records_dispatched(self.root, DispatchBatch.of_requests((req,)))


def _unit_end(unit: Appended | BatchAppended) -> int:
    if type(unit) is BatchAppended:
        return unit.offsets[-1] + unit.batch.sizes[-1]
    return unit[2] + unit[3]  # type: ignore[operator, no-any-return]


def _unit_records(unit: Appended | BatchAppended) -> int:
    return len(unit.offsets) if type(unit) is BatchAppended else 1
