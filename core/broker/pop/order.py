"""FIFO POP, sans-IO (RocketMQ's ConsumerOrderInfoManager): a queue popped in order stays
blocked for the group while any message of its last batch is neither acked nor visible again.

Per (group, topic, queue) the book keeps the batch handed out: its offsets, which are acked, when
each becomes visible again, and how often each was handed out (the consumer's reconsume count).
The group's committed offset stays at the first message not acked, so a broker that restarts
(the book is kept in memory, as RocketMQ keeps it in a file of its own) hands the same messages
out again in the same order: at least once, never out of order.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

OrderKey = tuple[str, str, int]  # (group, topic, queue id)


class Turn(enum.Enum):
    NEW = "new"  # nothing outstanding: read on from the committed offset
    SAME = "same"  # the same attempt asks again: the same batch, as it was
    AGAIN = "again"  # the batch became visible again un-acked: its messages once more
    BLOCKED = "blocked"  # the batch is out and invisible: nothing from this queue


@dataclass(slots=True)
class OrderBatch:
    offsets: list[int]
    next_offset: int  # where reading goes on once every message is acked
    attempt_id: str
    visible_at_ms: dict[int, int]
    counts: dict[int, int]  # how often each message was handed out
    acked: set[int] = field(default_factory=set)

    def pending(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]


class OrderBook:
    def __init__(self) -> None:
        self._batches: dict[OrderKey, OrderBatch] = {}

    def turn(self, key: OrderKey, now_ms: int, attempt_id: str) -> tuple[Turn, OrderBatch | None]:
        batch = self._batches.get(key)
        if batch is None or not batch.pending():
            return Turn.NEW, None
        if attempt_id and attempt_id == batch.attempt_id:
            return Turn.SAME, batch
        if now_ms < min(batch.visible_at_ms[o] for o in batch.pending()):
            return Turn.BLOCKED, batch
        return Turn.AGAIN, batch

    def hand_out(self, key: OrderKey, offsets: list[int], next_offset: int, now_ms: int, invisible_ms: int,
                 attempt_id: str) -> OrderBatch:
        """Record a batch handed out (a new one, or the pending messages of the last once more)."""
        old = self._batches.get(key)
        counts = {o: (old.counts.get(o, 0) if old is not None else 0) + 1 for o in offsets}
        batch = OrderBatch(offsets=offsets, next_offset=next_offset if old is None or not old.pending() else old.next_offset,
                           attempt_id=attempt_id, visible_at_ms=dict.fromkeys(offsets, now_ms + invisible_ms),
                           counts=counts)
        self._batches[key] = batch
        return batch

    def ack(self, key: OrderKey, offset: int) -> int | None:
        """Mark ``offset`` acked; the group's new committed offset (None: nothing to move)."""
        batch = self._batches.get(key)
        if batch is None or offset not in batch.offsets:
            return None
        batch.acked.add(offset)
        pending = batch.pending()
        if not pending:
            del self._batches[key]
            return batch.next_offset
        return pending[0]

    def change_invisible(self, key: OrderKey, offset: int, now_ms: int, invisible_ms: int) -> int | None:
        """Make ``offset`` visible again at ``now + invisible``; that time (None: not handed out)."""
        batch = self._batches.get(key)
        if batch is None or offset not in batch.pending():
            return None
        batch.visible_at_ms[offset] = now_ms + invisible_ms
        return batch.visible_at_ms[offset]
