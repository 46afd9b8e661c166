"""What a node allows its peers, so that one peer cannot starve the others or grow the node's
memory without bound (RocketMQ bounds the same things with Netty settings and thread pools).

Per node: connections, and the bytes of large frames being received at once. Per connection:
requests being handled at once, and their bytes. Outgoing bytes per connection are bounded by
the connection itself; held pulls per connection by the broker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    connections_max: int = 1024
    inflight_requests_max: int = 1024
    inflight_bytes_max: int = 64 * MiB
    # a frame at least this long reserves its length from the node-wide budget before it is read
    large_frame_bytes: int = 1 * MiB
    large_frames_bytes_max: int = 256 * MiB
    # such a frame must arrive whole within this: a peer that starts large frames and goes
    # silent would otherwise hold the budget for good
    large_frame_s: float = 30.0


DEFAULT_LIMITS = ConnectionLimits()


class ByteBudget:
    """Bytes reserved node-wide, never more than ``limit`` (sans-IO: reserve or be refused)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0

    def reserve(self, size: int) -> bool:
        if self.reserved + size > self.limit:
            return False
        self.reserved += size
        return True

    def release(self, size: int) -> None:
        self.reserved -= size


class LargeFrameHold:
    """One connection's share of the node's large-frame budget: the frame it is receiving, while
    it is ``large_frame_bytes`` or more, and by when that frame must be whole."""

    __slots__ = ("_budget", "_limits", "deadline", "reserved")

    def __init__(self, budget: ByteBudget, limits: ConnectionLimits) -> None:
        self._budget = budget
        self._limits = limits
        self.reserved = 0
        self.deadline = math.inf

    def follow(self, partial_bytes: int, now: float) -> bool:
        """The frame being received is now ``partial_bytes`` long (0: none begun); False when
        the budget cannot hold it (the connection is to be closed). A finished large frame
        gives its bytes back at once."""
        wanted = partial_bytes if partial_bytes >= self._limits.large_frame_bytes else 0
        if wanted != self.reserved:
            self.release()
            if wanted:
                if not self._budget.reserve(wanted):
                    return False
                self.reserved, self.deadline = wanted, now + self._limits.large_frame_s
        return True

    def release(self) -> None:
        self._budget.release(self.reserved)
        self.reserved, self.deadline = 0, math.inf
