"""The revive bookkeeping of POP consumption, sans-IO (RocketMQ's PopReviveService).

A broker's revive queue holds, in the order they were stored, the checkpoint of every POP (which
messages of a queue it handed out, and until when they stay invisible) and the acks that tick
messages off. The ledger is fed those records in queue order; it answers which checkpoints are
due (revive time passed, messages still un-acked: their messages go to the retry topic again)
and how far the queue's progress may be committed (everything before the oldest checkpoint still
waiting). A broker that restarts, or a new leader, re-reads from the committed progress and ends
in the same state: nothing un-acked is forgotten, at worst revived twice (delivery is at least
once).
"""

from __future__ import annotations

from formats.pop import Ack, CheckPoint

CheckPointKey = tuple[str, str, int, int, int, str]
EARLY_ACKS_MAX = 65536  # acks read before their checkpoint, kept at most (then the oldest go)


class ReviveLedger:
    """One revive queue, read in order."""

    def __init__(self) -> None:
        self._waiting: dict[CheckPointKey, CheckPoint] = {}  # in revive-offset order (insertion order)
        self._early: dict[CheckPointKey, set[int]] = {}
        self.read_to = -1  # the last revive-queue offset fed

    def __len__(self) -> int:
        return len(self._waiting)

    def feed_checkpoint(self, revive_offset: int, ck: CheckPoint) -> None:
        self._advance(revive_offset)
        ck.revive_offset = revive_offset
        for offset in self._early.pop(ck.key(), ()):
            ck.ack(offset)
        if ck.unacked_offsets():
            self._waiting.setdefault(ck.key(), ck)

    def feed_ack(self, revive_offset: int, ack: Ack) -> None:
        self._advance(revive_offset)
        ck = self._waiting.get(ack.checkpoint_key())
        if ck is None:  # its checkpoint was handled already, or comes later (kept, bounded)
            if len(self._early) >= EARLY_ACKS_MAX:
                del self._early[next(iter(self._early))]
            self._early.setdefault(ack.checkpoint_key(), set()).update(ack.offsets)
            return
        for offset in ack.offsets:
            ck.ack(offset)
        if not ck.unacked_offsets():
            del self._waiting[ack.checkpoint_key()]

    def inflight(self) -> dict[tuple[str, str], int]:
        """Messages handed out and not acked yet, by (group, topic) of their POP."""
        counts: dict[tuple[str, str], int] = {}
        for ck in self._waiting.values():
            key = (ck.group, ck.topic)
            counts[key] = counts.get(key, 0) + len(ck.unacked_offsets())
        return counts

    def skip(self, revive_offset: int) -> None:
        """A revive-queue entry that is neither (unreadable, or another kind): read past it."""
        self._advance(revive_offset)

    def due(self, now_ms: int) -> list[CheckPoint]:
        """Checkpoints whose revive time has come, with un-acked messages; they leave the ledger
        (the caller re-puts their messages, then commits :meth:`committable`)."""
        ready = [ck for ck in self._waiting.values() if ck.revive_time_ms <= now_ms]
        for ck in ready:
            del self._waiting[ck.key()]
        return ready

    def put_back(self, ck: CheckPoint) -> None:
        """A due checkpoint whose messages could not be re-put: it waits again (progress stays
        before it), to be tried at the next round."""
        self._waiting[ck.key()] = ck
        self._waiting = dict(sorted(self._waiting.items(), key=lambda item: item[1].revive_offset))

    def committable(self) -> int:
        """The revive-queue offset up to which everything is handled (-1: nothing yet)."""
        if not self._waiting:
            return self.read_to
        return next(iter(self._waiting.values())).revive_offset - 1

    def _advance(self, revive_offset: int) -> None:
        if revive_offset <= self.read_to:
            raise ValueError(f"revive offset {revive_offset} fed after {self.read_to}")
        self.read_to = revive_offset
