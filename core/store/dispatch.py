"""What a record contributes to the ConsumeQueues and the key index once it is appended."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, overload

from core.topic_names import SCHEDULE_TOPIC
from formats.properties import DELAY, TAGS, TIMER_OUT_MS, UNIQ_KEY, message_keys
from formats.record import MessageRecord
from formats.record_batch import RecordBatch
from formats.sysflag import is_dispatched
from formats.tags import tags_code

if TYPE_CHECKING:
    from core.store.consume_queue import ConsumeQueue


class DispatchRequest(NamedTuple):
    """One appended record, as the ConsumeQueue and key index see it."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    sysflag: int
    keys: tuple[str, ...]
    uniq_key: str | None

    @property
    def to_consume_queue(self) -> bool:
        """Prepared and rolled-back transaction halves stay out of the ConsumeQueues."""
        return is_dispatched(self.sysflag)

    @classmethod
    def of(cls, rec: MessageRecord, phys_offset: int, size: int, queue_offset: int | None = None,
           store_timestamp: int | None = None, delay_levels_ms: tuple[int, ...] = ()) -> DispatchRequest:
        """The request for ``rec``; the offset and time default to the ones the record carries
        (a record read back from the log) and are passed for one just appended."""
        stamp = rec.store_timestamp if store_timestamp is None else store_timestamp
        return cls.of_fields(rec.topic, rec.queue_id, rec.queue_offset if queue_offset is None else queue_offset,
                             phys_offset, size, record_tags_code(rec.topic, rec.properties, stamp, delay_levels_ms),
                             stamp, rec.sysflag, rec.properties)

    @classmethod
    def of_fields(cls, topic: str, queue_id: int, queue_offset: int, phys_offset: int, size: int, tags: int,
                  store_timestamp: int, sysflag: int, props: dict[str, str]) -> DispatchRequest:
        """The request for a record known by its fields (a replica's lean decode)."""
        return cls(topic, queue_id, queue_offset, phys_offset, size, tags, store_timestamp, sysflag,
                   tuple(message_keys(props)), props.get(UNIQ_KEY))


def record_tags_code(topic: str, props: dict[str, str], store_timestamp: int,
                     delay_levels_ms: tuple[int, ...]) -> int:
    """A record's ConsumeQueue tagsCode: the hash of its tag, except in the schedule topic,
    where it is the time the message is due (RocketMQ's CommitLog does the same)."""
    if topic == SCHEDULE_TOPIC and delay_levels_ms:
        return deliver_time_ms(props, store_timestamp, delay_levels_ms)
    return tags_code(props.get(TAGS))


def deliver_time_ms(props: dict[str, str], store_timestamp: int, delay_levels_ms: tuple[int, ...]) -> int:
    """When a delayed message is due: its store time plus its level's delay (levels above the
    last count as the last)."""
    due = props.get(TIMER_OUT_MS)
    if due is not None and due.isdigit():  # a timer message: its own due time
        return int(due)
    try:
        level = int(props.get(DELAY, "0"))
    except ValueError:
        level = 0
    if level <= 0:
        return store_timestamp
    return store_timestamp + delay_levels_ms[min(level, len(delay_levels_ms)) - 1]


# A record just appended, as the store keeps it until dispatch: (record, its ConsumeQueue or
# None, phys offset, size, queue offset, store timestamp, its index keys or None when the
# store keeps no key index).
Appended = tuple[MessageRecord, "ConsumeQueue | None", int, int, int, int, "list[str] | None"]


class BatchAppended(NamedTuple):
    """A batch's records just appended, kept as one until dispatch: its queue (None for
    none), each record's physical offset, the first one's queue offset, the store time, and
    each record's index keys: one each in ``uniq_keys``, or lists in ``keys`` (both None
    when the store keeps no key index)."""

    batch: RecordBatch
    cq: ConsumeQueue | None
    offsets: list[int]
    queue_offset: int
    store_timestamp: int
    uniq_keys: list[bytes] | None
    keys: list[list[bytes]] | None

    def appended(self) -> list[Appended]:
        """Each record as :data:`Appended` (for listeners that read records)."""
        batch, stamp = self.batch, self.store_timestamp
        out: list[Appended] = []
        for i, (phys, size) in enumerate(zip(self.offsets, batch.sizes)):
            qo = self.queue_offset + i if self.cq is not None else 0
            rec = batch.record(i, phys, qo, stamp)
            if self.uniq_keys is not None:
                keys: list[str] | None = [self.uniq_keys[i].decode()]
            else:
                keys = None if self.keys is None else [k.decode() for k in self.keys[i]]
            out.append((rec, self.cq, phys, size, qo, stamp, keys))
        return out

# A record found in the log, by the fields a replica's lean decode gives: topic, queue id,
# queue offset, phys offset, size, tags code, store timestamp, sysflag, properties.
DispatchFields = tuple[str, int, int, int, int, int, int, int, dict[str, str]]


class DispatchBatch(Sequence[DispatchRequest]):
    """Records just dispatched, as ``mq_records_dispatched`` sees them. Requests are built
    when read: building one per record on every append cost a tenth of the broker's batch
    path, and the usual listener (long polling) only needs :attr:`queues`."""

    __slots__ = ("_appended", "_delay_levels_ms", "_fields", "_requests", "_units")

    def __init__(self, appended: Sequence[Appended | BatchAppended], delay_levels_ms: tuple[int, ...] = ()) -> None:
        self._units = appended
        self._appended: Sequence[Appended] | None = None
        self._delay_levels_ms = delay_levels_ms
        self._fields: Sequence[DispatchFields] | None = None
        self._requests: Sequence[DispatchRequest] | None = None

    @classmethod
    def of_requests(cls, requests: Sequence[DispatchRequest]) -> DispatchBatch:
        """A batch of requests already built."""
        batch = cls(())
        batch._requests = requests
        return batch

    @classmethod
    def of_fields(cls, fields: Sequence[DispatchFields]) -> DispatchBatch:
        """A batch of records found by scanning the log, known by their fields."""
        batch = cls(())
        batch._fields = fields
        return batch

    def __len__(self) -> int:
        if self._requests is not None:
            return len(self._requests)
        if self._fields is not None:
            return len(self._fields)
        return sum(len(u.offsets) if type(u) is BatchAppended else 1 for u in self._units)

    @overload
    def __getitem__(self, index: int) -> DispatchRequest: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[DispatchRequest]: ...

    def __getitem__(self, index: int | slice) -> DispatchRequest | Sequence[DispatchRequest]:
        if self._requests is not None:
            return self._requests[index]
        if self._fields is not None:
            if isinstance(index, slice):
                return [DispatchRequest.of_fields(*f) for f in self._fields[index]]
            return DispatchRequest.of_fields(*self._fields[index])
        appended = self._records()
        if isinstance(index, slice):
            return [self._request(a) for a in appended[index]]
        return self._request(appended[index])

    def _records(self) -> Sequence[Appended]:
        if self._appended is None:
            self._appended = [a for u in self._units
                              for a in (u.appended() if type(u) is BatchAppended else (u,))]  # type: ignore[union-attr]
        return self._appended

    def _request(self, appended: Appended) -> DispatchRequest:
        rec, _cq, phys, size, queue_offset, stamp, _keys = appended
        return DispatchRequest.of(rec, phys, size, queue_offset, stamp, self._delay_levels_ms)

    @property
    def queues(self) -> set[tuple[str, int]]:
        """The (topic, queue id) pairs that received records."""
        if self._requests is not None:
            return {(r.topic, r.queue_id) for r in self._requests}
        if self._fields is not None:
            return {(f[0], f[1]) for f in self._fields}
        return {(u.batch.topic, u.batch.queue_id) if type(u) is BatchAppended else (u[0].topic, u[0].queue_id)
                for u in self._units}
