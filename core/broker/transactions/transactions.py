"""Transactional messages, the sans-IO part: the stored forms of a half message and of its
decision, and the table of halves still waiting for one.

A producer sends a *half* (``TRAN_MSG`` = true, sysflag PREPARED). The broker stores it in
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real topic and queue in ``REAL_TOPIC`` /
``REAL_QID`` and the transaction bits cleared, so it gets a ConsumeQueue entry there (the
half's queue offset is the ``tranStateTableOffset`` the producer sends back) but no consumer
sees it. END_TRANSACTION then either stores the *committed* message in the real topic (sysflag
COMMIT, ``PREPARED TRANSACTION OFFSET`` = the half's CommitLog offset) or drops it; either way an
*op* record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (body = the half's queue offset as decimal text,
tag ``d``, as RocketMQ writes it) marks the half decided, so a restart knows what is still open.

The :class:`HalfTable` holds the open halves. Unlike RocketMQ, which re-appends a half to the
half topic at every check (the CommitLog grows with every check of a slow transaction) and
accepts a second decision for a decided half (a repeated commit stores the message twice), the
table is the one place that says a half is open: only the first decision counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.broker.timers.real_destination import real_destination
from core.topic_names import TRANS_CHECK_MAX_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_TOPIC
from formats.properties import PGROUP, REAL_QID, REAL_TOPIC, TAGS, TRAN_MSG
from formats.record import Host, MessageRecord
from formats.sysflag import TRANSACTION_COMMIT, TRANSACTION_MASK

HALF_QUEUE_ID = 0
OP_TAG = "d"  # RocketMQ's REMOVETAG
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"


def is_half(rec: MessageRecord) -> bool:
    """Whether a send is a transaction half (RocketMQ decides by ``TRAN_MSG`` alone)."""
    return rec.properties.get(TRAN_MSG, "").lower() == "true"


def to_half(rec: MessageRecord) -> MessageRecord:
    """The record as stored while its transaction is open."""
    props = dict(rec.properties)
    props[REAL_TOPIC] = rec.topic
    props[REAL_QID] = str(rec.queue_id)
    return replace(rec, topic=TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID, sysflag=rec.sysflag & ~TRANSACTION_MASK,
                   properties=props, properties_text=None)


def committed(half: MessageRecord, store_host: Host) -> MessageRecord | None:
    """The message a commit stores in the real topic (``None`` when the half lacks its real
    topic). Consumers see ``TRAN_MSG`` and ``PGROUP`` as RocketMQ's do."""
    where = real_destination(half.properties)
    if where is None:
        return None
    props = dict(half.properties)
    props.pop(REAL_TOPIC, None)
    props.pop(REAL_QID, None)
    return MessageRecord(
        topic=where[0], body=half.body, properties=props, queue_id=where[1], flag=half.flag,
        sysflag=(half.sysflag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT, born_timestamp=half.born_timestamp,
        born_host=half.born_host, store_host=store_host, reconsume_times=half.reconsume_times,
        prepared_tx_offset=half.phys_offset,
    )


def gave_up(half: MessageRecord, store_host: Host) -> MessageRecord:
    """A half nobody decided after every check, kept for operators in TRANS_CHECK_MAX_TIME_TOPIC."""
    return replace(half, topic=TRANS_CHECK_MAX_TOPIC, queue_id=0, store_host=store_host, properties_text=None)


def op_record(half_queue_offset: int, now_ms: int, store_host: Host) -> MessageRecord:
    """The record that marks the half at ``half_queue_offset`` decided."""
    return MessageRecord(topic=TRANS_OP_TOPIC, body=str(half_queue_offset).encode(), properties={TAGS: OP_TAG},
                         queue_id=HALF_QUEUE_ID, born_timestamp=now_ms, born_host=store_host, store_host=store_host)


def op_half_offset(op: MessageRecord) -> int | None:
    """The half queue offset an op record decides (``None`` for a malformed one)."""
    try:
        return int(op.body.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass(slots=True)
class OpenHalf:
    """A half waiting for its decision."""

    queue_offset: int
    phys_offset: int
    group: str
    stored_ms: int
    first_check_ms: int  # not checked before this (timeout, or the message's immunity time)
    checks: int = 0
    next_check_ms: int = 0
    recovered: bool = False  # found by a restart: its decision may be stored without its op


def first_check_ms(half: MessageRecord, stored_ms: int, timeout_ms: int) -> int:
    """When a half is first worth asking about: ``timeout_ms`` after it was stored, or the
    message's own ``CHECK_IMMUNITY_TIME_IN_SECONDS`` when it sets a longer one."""
    wait_ms = timeout_ms
    raw = half.properties.get(CHECK_IMMUNITY_TIME_IN_SECONDS)
    if raw:
        try:
            wait_ms = max(wait_ms, int(raw) * 1000)
        except ValueError:
            pass
    return stored_ms + wait_ms


class HalfTable:
    """Open halves by their queue offset in the half topic."""

    def __init__(self) -> None:
        self.open: dict[int, OpenHalf] = {}

    def add(self, half: MessageRecord, queue_offset: int, phys_offset: int, stored_ms: int, timeout_ms: int, *,
            recovered: bool = False) -> OpenHalf:
        first = first_check_ms(half, stored_ms, timeout_ms)
        entry = OpenHalf(queue_offset, phys_offset, half.properties.get(PGROUP, ""), stored_ms, first,
                         next_check_ms=first, recovered=recovered)
        self.open[queue_offset] = entry
        return entry

    def find(self, queue_offset: int, phys_offset: int) -> OpenHalf | None:
        """The open half at ``queue_offset`` if it is the record at ``phys_offset``."""
        entry = self.open.get(queue_offset)
        return entry if entry is not None and entry.phys_offset == phys_offset else None

    def decide(self, queue_offset: int) -> OpenHalf | None:
        """Close a half; ``None`` when it was not open (decided already, or never a half)."""
        return self.open.pop(queue_offset, None)

    def due(self, now_ms: int) -> list[OpenHalf]:
        """Halves to ask their producer about at ``now_ms``, oldest first."""
        return sorted((h for h in self.open.values() if h.next_check_ms <= now_ms), key=lambda h: h.queue_offset)

    def checked(self, half: OpenHalf, now_ms: int, interval_ms: int) -> None:
        half.checks += 1
        half.next_check_ms = now_ms + interval_ms

    def low_water(self, scanned_to: int) -> int:
        """The lowest queue offset still open (``scanned_to`` when none): a restart rebuilds
        the table from here."""
        return min(self.open, default=scanned_to)
