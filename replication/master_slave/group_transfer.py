"""Sync sends waiting for a slave to hold their bytes (RocketMQ's GroupTransferService).

A send in sync mode is answered once some connected slave has acknowledged an offset at or
past the send's end: SEND_OK, or FLUSH_SLAVE_TIMEOUT after ``store.sync_flush_timeout_ms``.
With no slave connected, or the best one further behind than
``replication.ha_slave_fallbehind_max`` (RocketMQ's isSlaveOK), it is answered
SLAVE_NOT_AVAILABLE at once. The waiting itself is the watermark wait raft's pending appends
use too (:class:`replication.watermark_waiters.AckWaiters`): one shared event per advance.
"""

from __future__ import annotations

from collections.abc import Callable

from core.broker.replication import Replicated
from replication.master_slave.acks import SlaveLink, best_ack, slave_ok
from replication.watermark_waiters import AckWaiters


class GroupTransferService:
    def __init__(self, links: list[SlaveLink], log_end: Callable[[], int], *, fallbehind_max: int,
                 timeout_s: float) -> None:
        self._links = links  # the HA service's connected slaves (the same list, kept up to date there)
        self._log_end = log_end
        self._fallbehind_max = fallbehind_max
        self._timeout_s = timeout_s
        self.acks = AckWaiters()

    def slave_acked(self) -> None:
        """A slave reported an offset: sends waiting up to the best one are released."""
        best = best_ack(self._links)
        if best is not None:
            self.acks.advance(best)

    async def wait_transfer(self, end_offset: int) -> Replicated:
        """Wait until a slave holds every byte before ``end_offset``."""
        if not slave_ok(self._links, self._log_end(), self._fallbehind_max):
            return Replicated.NO_REPLICA
        if await self.acks.wait(end_offset, self._timeout_s):
            return Replicated.OK
        return Replicated.TIMEOUT

    async def run(self) -> None:
        """Wake the waiting sends now and then to check their deadlines; runs until cancelled."""
        await self.acks.tick()
