"""The master's view of its slaves' acknowledgements: who is connected, how far each has
acked, how far behind that is in bytes and in time, and the sends waiting for an ack
(RocketMQ's GroupTransferService)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import trio

TIMELINE_SAMPLE_S = 0.1
TIMELINE_SAMPLES_MAX = 36_000  # an hour at one sample a tenth of a second


@dataclass(slots=True)
class SlaveLink:
    """One connected slave, as the master sees it."""

    peer: str  # the slave's end of the HA connection
    connected_at: float  # trio time
    last_heard: float
    acked: int | None = None  # its newest report; None until the first


class WriteTimeline:
    """When the log grew past which offset, sampled: how long the oldest byte a slave lacks
    has been waiting (its lag in seconds)."""

    def __init__(self, sample_s: float = TIMELINE_SAMPLE_S, samples_max: int = TIMELINE_SAMPLES_MAX) -> None:
        self._samples: collections.deque[tuple[int, float]] = collections.deque(maxlen=samples_max)
        self.sample_s = sample_s

    def note(self, log_end: int, now: float) -> None:
        """The log ended at ``log_end`` at ``now`` (called often; keeps a sample per period)."""
        samples = self._samples
        if samples and (samples[-1][0] >= log_end or now - samples[-1][1] < self.sample_s):
            return
        samples.append((log_end, now))

    def lag_s(self, acked: int, log_end: int, now: float) -> float:
        """Seconds since the log first held a byte at or after ``acked``; 0 when caught up."""
        if acked >= log_end:
            return 0.0
        for end, stamp in self._samples:
            if end > acked:
                return max(0.0, now - stamp)
        return 0.0 if not self._samples else max(0.0, now - self._samples[-1][1])


# How often waiting sends look at their deadlines: a shared tick, not a cancel scope per send
# (one per send cost more CPU than the wait itself on a busy sync master).
DEADLINE_TICK_S = 0.05


@dataclass(slots=True)
class AckWaiters:
    """Sends waiting until some slave acks their end offset. Waiters share one event per
    advance of the watermark (which only grows, as RocketMQ's push2SlaveMaxOffset); a tick
    (:meth:`tick`, run by the HA service) wakes them now and then to check their deadlines."""

    acked: int = 0
    waiting: int = 0
    _advanced: trio.Event = field(default_factory=trio.Event)

    def advance(self, offset: int) -> None:
        if offset > self.acked:
            self.acked = offset
            self._wake()

    def _wake(self) -> None:
        advanced, self._advanced = self._advanced, trio.Event()
        advanced.set()

    async def wait(self, offset: int, timeout_s: float) -> bool:
        """Wait until the watermark reaches ``offset``; False after ``timeout_s`` (give or
        take one tick)."""
        if self.acked >= offset:
            return True
        deadline = trio.current_time() + timeout_s
        self.waiting += 1
        try:
            while self.acked < offset and trio.current_time() < deadline:
                await self._advanced.wait()
        finally:
            self.waiting -= 1
        return self.acked >= offset

    async def tick(self, period_s: float = DEADLINE_TICK_S) -> None:
        """Wake the waiters every ``period_s`` so each checks its deadline; runs until cancelled."""
        while True:
            await trio.sleep(period_s)
            if self.waiting:
                self._wake()


def best_ack(links: list[SlaveLink]) -> int | None:
    """The highest offset any connected slave has acked."""
    acks = [link.acked for link in links if link.acked is not None]
    return max(acks) if acks else None


def slave_ok(links: list[SlaveLink], log_end: int, fallbehind_max: int) -> bool:
    """RocketMQ's isSlaveOK: a slave is connected and less than ``fallbehind_max`` behind."""
    best = best_ack(links)
    return best is not None and log_end - best < fallbehind_max
