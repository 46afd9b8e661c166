"""What a record contributes to the ConsumeQueues and the key index once it is appended."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, overload

from core.topic_names import SCHEDULE_TOPIC
from formats.properties import DELAY, TAGS, TIMER_OUT_MS, UNIQ_KEY, decode_properties, message_keys
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


class LogRun(NamedTuple):
    """Records found in the log one after another in one queue (a master's batch, copied),
    dispatched together: their topic, queue and sysflag, the first queue offset (the rest
    follow it), and each one's physical offset, size, store time and properties text."""

    topic: str
    queue_id: int
    sysflag: int
    queue_offset: int
    offsets: list[int]
    sizes: list[int]
    tags: list[int] | None  # None: all 0
    stamps: list[int]
    texts: list[bytes]

    def fields(self) -> list[DispatchFields]:
        tags = self.tags or [0] * len(self.offsets)
        return [(self.topic, self.queue_id, self.queue_offset + i, phys, size, tag, stamp, self.sysflag,
                 decode_properties(text.decode()))
                for i, (phys, size, tag, stamp, text) in enumerate(zip(self.offsets, self.sizes, tags, self.stamps,
                                                                       self.texts))]


# What a DispatchBatch is built from: records put one by one or as a batch, records found in
# the log, one by one or as a run.
DispatchUnit = Appended | BatchAppended | DispatchFields | LogRun


class DispatchBatch(Sequence[DispatchRequest]):
    """Records just dispatched, as ``mq_records_dispatched`` sees them: made of what the
    dispatcher had at hand (:data:`DispatchUnit`), turned into requests only when read.
    Building one per record on every append cost a tenth of the broker's batch path, and the
    usual listener (long polling) only needs :attr:`queues`."""

    __slots__ = ("_delay_levels_ms", "_requests", "_units")

    def __init__(self, units: Sequence[DispatchUnit], delay_levels_ms: tuple[int, ...] = ()) -> None:
        self._units = units
        self._delay_levels_ms = delay_levels_ms
        self._requests: Sequence[DispatchRequest] | None = None

    @classmethod
    def of_requests(cls, requests: Sequence[DispatchRequest]) -> DispatchBatch:
        """A batch of requests already built."""
        batch = cls(())
        batch._requests = requests
        return batch

    def __len__(self) -> int:
        if self._requests is not None:
            return len(self._requests)
        return sum(map(_unit_len, self._units))

    @overload
    def __getitem__(self, index: int) -> DispatchRequest: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[DispatchRequest]: ...

    def __getitem__(self, index: int | slice) -> DispatchRequest | Sequence[DispatchRequest]:
        if self._requests is None:
            self._requests = [request for unit in self._units for request in self._unit_requests(unit)]
        return self._requests[index]

    def _unit_requests(self, unit: DispatchUnit) -> list[DispatchRequest]:
        if type(unit) is LogRun:
            return [DispatchRequest.of_fields(*f) for f in unit.fields()]
        if type(unit) is BatchAppended:
            return [self._request(a) for a in unit.appended()]
        if isinstance(unit[0], str):  # found in the log
            return [DispatchRequest.of_fields(*unit)]  # type: ignore[arg-type]
        return [self._request(unit)]  # type: ignore[arg-type]

    def _request(self, appended: Appended) -> DispatchRequest:
        rec, _cq, phys, size, queue_offset, stamp, _keys = appended
        return DispatchRequest.of(rec, phys, size, queue_offset, stamp, self._delay_levels_ms)

    @property
    def queues(self) -> set[tuple[str, int]]:
        """The (topic, queue id) pairs that received records."""
        if self._requests is not None:
            return {(r.topic, r.queue_id) for r in self._requests}
        return {_unit_queue(u) for u in self._units}


def _unit_len(unit: DispatchUnit) -> int:
    return len(unit.offsets) if type(unit) is BatchAppended or type(unit) is LogRun else 1  # type: ignore[union-attr]


def _unit_queue(unit: DispatchUnit) -> tuple[str, int]:
    if type(unit) is LogRun:
        return unit.topic, unit.queue_id
    if type(unit) is BatchAppended:
        return unit.batch.topic, unit.batch.queue_id
    if isinstance(unit[0], str):
        return unit[0], unit[1]  # type: ignore[return-value]
    return unit[0].topic, unit[0].queue_id  # type: ignore[union-attr]
