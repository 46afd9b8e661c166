"""What a record contributes to the ConsumeQueues and the key index once it is appended."""

from __future__ import annotations

from typing import NamedTuple

from formats.properties import UNIQ_KEY, message_keys
from formats.record import MessageRecord
from formats.sysflag import is_dispatched
from formats.tags import tags_code


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
           store_timestamp: int | None = None) -> DispatchRequest:
        """The request for ``rec``; the offset and time default to the ones the record carries
        (a record read back from the log) and are passed for one just appended."""
        props = rec.properties
        return cls(
            topic=rec.topic,
            queue_id=rec.queue_id,
            queue_offset=rec.queue_offset if queue_offset is None else queue_offset,
            phys_offset=phys_offset,
            size=size,
            tags_code=tags_code(rec.tags),
            store_timestamp=rec.store_timestamp if store_timestamp is None else store_timestamp,
            sysflag=rec.sysflag,
            keys=tuple(message_keys(props)),
            uniq_key=props.get(UNIQ_KEY),
        )
