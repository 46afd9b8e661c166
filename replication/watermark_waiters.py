"""Sends waiting for a watermark that only grows: a slave's acked offset under master-slave,
the commit index under raft (the waiting of master_slave.group_transfer's GroupTransferService and
of DLedger's pending appends)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import trio

# How often waiting sends look at their deadlines: a shared tick, not a cancel scope per send
# (one per send cost more CPU than the wait itself on a busy sync master).
DEADLINE_TICK_S = 0.05


@dataclass(slots=True)
class AckWaiters:
    """Sends waiting until the watermark (a slave's ack, the commit index) reaches theirs.
    Waiters share one event per advance of the watermark (which only grows, as RocketMQ's
    push2SlaveMaxOffset); a tick (:meth:`tick`, run by the replication service) wakes them
    now and then to check their deadlines."""

    acked: int = 0
    waiting: int = 0
    _advanced: trio.Event = field(default_factory=trio.Event)

    def advance(self, offset: int) -> None:
        if offset > self.acked:
            self.acked = offset
            self.wake()

    def wake(self) -> None:
        """Wake every waiter to look at its watermark, deadline and give-up test again."""
        advanced, self._advanced = self._advanced, trio.Event()
        advanced.set()

    async def wait(self, offset: int, timeout_s: float, give_up: Callable[[], bool] | None = None) -> bool:
        """Wait until the watermark reaches ``offset``; False after ``timeout_s`` (give or
        take one tick) or once ``give_up()`` holds (checked at each wake-up)."""
        if self.acked >= offset:
            return True
        deadline = trio.current_time() + timeout_s
        self.waiting += 1
        try:
            while self.acked < offset and trio.current_time() < deadline and not (give_up and give_up()):
                await self._advanced.wait()
        finally:
            self.waiting -= 1
        return self.acked >= offset

    async def tick(self, period_s: float = DEADLINE_TICK_S) -> None:
        """Wake the waiters every ``period_s`` so each checks its deadline; runs until cancelled."""
        while True:
            await trio.sleep(period_s)
            if self.waiting:
                self.wake()
