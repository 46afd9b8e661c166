"""Queue locks for orderly consumers (RocketMQ's RebalanceLockManager), sans-IO.

An orderly push consumer locks the queues it was allocated (LOCK_BATCH_MQ) and consumes a queue
only while it holds the lock, so no two members of a group consume one queue at once, even
while a rebalance moves queues between them. A lock lasts ``lock_ttl_ms`` (RocketMQ: 60 s)
unless renewed (clients renew every 20 s); an expired lock may be taken by another member.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

LOCK_TTL_MS = 60_000


class LockedQueue(NamedTuple):
    topic: str
    broker_name: str
    queue_id: int


class QueueLocks:
    def __init__(self, lock_ttl_ms: int = LOCK_TTL_MS) -> None:
        self.lock_ttl_ms = lock_ttl_ms
        # group -> queue -> (client id, last renewal ms)
        self._held: dict[str, dict[LockedQueue, tuple[str, int]]] = {}

    def try_lock(self, group: str, client_id: str, queues: Iterable[LockedQueue], now_ms: int) -> list[LockedQueue]:
        """Lock (or renew) every queue that is free, expired or already ``client_id``'s;
        returns those now held by ``client_id``."""
        held = self._held.setdefault(group, {})
        locked = []
        for mq in queues:
            owner = held.get(mq)
            if owner is None or owner[0] == client_id or now_ms - owner[1] > self.lock_ttl_ms:
                held[mq] = (client_id, now_ms)
                locked.append(mq)
        return locked

    def unlock(self, group: str, client_id: str, queues: Iterable[LockedQueue]) -> None:
        """Release the queues ``client_id`` holds (others' locks are left alone)."""
        held = self._held.get(group, {})
        for mq in queues:
            owner = held.get(mq)
            if owner is not None and owner[0] == client_id:
                del held[mq]
        if not held:
            self._held.pop(group, None)

    def owner(self, group: str, mq: LockedQueue, now_ms: int) -> str | None:
        """Who holds ``mq`` now (``None`` when free or expired)."""
        owner = self._held.get(group, {}).get(mq)
        if owner is None or now_ms - owner[1] > self.lock_ttl_ms:
            return None
        return owner[0]

    def drop_client(self, client_id: str) -> None:
        """A client went away (connection closed): its locks are free at once."""
        for group in list(self._held):
            held = self._held[group]
            for mq in [mq for mq, owner in held.items() if owner[0] == client_id]:
                del held[mq]
            if not held:
                del self._held[group]
