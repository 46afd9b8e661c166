"""Where a producer's records go: into the store, then through the waits the config asks for
before the producer is answered (a sync flush; the replicas in sync and dledger modes).

The send processor hands records here and maps the outcome to its reply; it never touches the
store's or the replication strategy's own settings.
"""

from __future__ import annotations

from types import MappingProxyType

from core.broker.replication import Replicated, Replication
from core.remoting.codes import ResponseCode
from core.store.message_store import MessageStore
from core.store.store_types import BatchPut, PutResult
from formats.record import MessageRecord
from formats.record_batch import RecordBatch

LOST_LEADERSHIP_REMARK = ("the broker stopped leading its raft group before the message committed "
                          "(it may still be stored): send again, to the new leader")
_REPLICATED_CODES = MappingProxyType({
    Replicated.OK: ResponseCode.SUCCESS, Replicated.TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    Replicated.NO_REPLICA: ResponseCode.SLAVE_NOT_AVAILABLE, Replicated.LOST_LEADERSHIP: ResponseCode.SERVICE_NOT_AVAILABLE})


class WritePath:
    """A broker's store and replication, seen from a send."""

    def __init__(self, store: MessageStore, replication: Replication) -> None:
        self._store = store
        self._replication = replication
        self._sync_flush = store.config.flush == "sync"
        self._flush_timeout_s = store.config.sync_flush_timeout_ms / 1000

    @property
    def body_size_max(self) -> int:
        """The largest body (and inflated batch) a send may carry."""
        return self._store.config.message_size_bytes_max

    @property
    def waits(self) -> bool:
        """Whether a send is answered only after :meth:`confirmed`."""
        return self._sync_flush or self._replication.waits_for_replicas

    def put(self, records: list[MessageRecord]) -> list[PutResult]:
        """Append ``records`` (one append for a batch); store errors propagate."""
        return self._store.put_many(records) if len(records) > 1 else [self._store.put(records[0])]

    def put_batch(self, batch: RecordBatch) -> BatchPut:
        """Append a batch request's records together (store errors propagate)."""
        return self._store.put_batch(batch)

    async def confirmed(self, results: list[PutResult]) -> tuple[int, str | None]:
        """:meth:`confirmed_through` the end of ``results``."""
        last = results[-1]
        return await self.confirmed_through(last.phys_offset, last.phys_offset + last.size)

    async def confirmed_through(self, last_offset: int, end: int) -> tuple[int, str | None]:
        """Wait until the flush and the replicas that apply hold the log up to ``end`` (the
        last record put begins at ``last_offset``); the response code and remark.

        Either way the records are stored: a timeout code tells the producer only that they may
        be less safe than asked, and a producer that resends them stores them twice."""
        if self._sync_flush and not await self._store.wait_flushed(end, self._flush_timeout_s):
            return ResponseCode.FLUSH_DISK_TIMEOUT, None
        if self._replication.waits_for_replicas:
            code = _REPLICATED_CODES[await self._replication.wait_replicated(last_offset, end)]
            return code, LOST_LEADERSHIP_REMARK if code == ResponseCode.SERVICE_NOT_AVAILABLE else None
        return ResponseCode.SUCCESS, None
