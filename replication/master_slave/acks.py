"""The master's view of its slaves' acknowledgements: who is connected, how far each has
acked, and how far behind that is in bytes and in time. The sends waiting for an ack are
:mod:`replication.master_slave.group_transfer`'s."""

from __future__ import annotations

import collections
from dataclasses import dataclass

TIMELINE_SAMPLE_S = 0.1
TIMELINE_SAMPLES_MAX = 36_000  # an hour at one sample a tenth of a second


@dataclass(slots=True)
class SlaveLink:
    """One connected slave, as the master sees it."""

    peer: str  # the slave's end of the HA connection
    connected_at: float  # trio time
    last_heard: float
    acked: int | None = None  # its newest report; None until the first
    member: str = ""  # the broker id it proved (ACL on), else unknown


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


def best_ack(links: list[SlaveLink]) -> int | None:
    """The highest offset any connected slave has acked."""
    acks = [link.acked for link in links if link.acked is not None]
    return max(acks) if acks else None


def slave_ok(links: list[SlaveLink], log_end: int, fallbehind_max: int) -> bool:
    """RocketMQ's isSlaveOK: a slave is connected and less than ``fallbehind_max`` behind."""
    best = best_ack(links)
    return best is not None and log_end - best < fallbehind_max
