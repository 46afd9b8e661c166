"""Latency fault tolerance (RocketMQ's MQFaultStrategy and LatencyFaultToleranceImpl), sans-IO.

After every send attempt the producer records the broker's latency; a slow broker is isolated
for the time its latency bucket names, and queue selection skips isolated brokers:

```
 latency of the attempt (ms)   >= 0   50   100   550   1000   2000   3000   15000
 isolated for (s)                 0    0     0    30     60    120    180     600
```

A failed attempt isolates its broker for ``failure_isolation_ms`` (30 s). RocketMQ 4.x books a
failure as a 30 s *latency*, which its table turns into 600 s of isolation: a broker that
refused one connection while it restarted is then shunned for ten minutes after it is back.
Thirty seconds covers a restart and a route refresh.

Times are the caller's clock in seconds (``trio.current_time()``); durations are in ms.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
FAILURE_ISOLATION_MS = 30_000


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """``enabled`` is RocketMQ's sendLatencyFaultEnable (off by default, as there)."""

    enabled: bool = False
    latency_max_ms: tuple[int, ...] = LATENCY_MAX_MS
    not_available_ms: tuple[int, ...] = NOT_AVAILABLE_MS
    failure_isolation_ms: int = FAILURE_ISOLATION_MS

    def __post_init__(self) -> None:
        if len(self.latency_max_ms) != len(self.not_available_ms) or not self.latency_max_ms:
            raise ValueError("latency_max_ms and not_available_ms need the same, non-zero, number of buckets")
        if list(self.latency_max_ms) != sorted(self.latency_max_ms):
            raise ValueError("latency_max_ms must ascend")

    def isolation_ms(self, latency_ms: float) -> int:
        """How long a broker answering in ``latency_ms`` is left out: the bucket of the
        largest bound not above the latency."""
        for bound, duration in zip(reversed(self.latency_max_ms), reversed(self.not_available_ms)):
            if latency_ms >= bound:
                return duration
        return 0


@dataclass(slots=True)
class FaultItem:
    """One broker in the fault table."""

    broker: str
    latency_ms: float  # of its last attempt
    available_at: float  # the caller's clock, seconds
    failures: int = 0  # attempts that failed in a row

    def available(self, now: float) -> bool:
        return now >= self.available_at


class FaultRow(NamedTuple):
    """What ``mqctl send --faults`` shows of a broker."""

    broker: str
    latency_ms: float
    isolated_for_s: float  # 0 when available
    failures: int


class LatencyFaultTable:
    """Per broker: the last latency and when it may be chosen again."""

    def __init__(self, settings: FaultSettings) -> None:
        self.settings = settings
        self._items: dict[str, FaultItem] = {}

    def record(self, broker: str, latency_ms: float, now: float, *, failed: bool = False) -> None:
        """An attempt on ``broker`` took ``latency_ms`` (and failed, or not)."""
        duration = self.settings.failure_isolation_ms if failed else self.settings.isolation_ms(latency_ms)
        item = self._items.get(broker)
        if item is None:
            item = self._items[broker] = FaultItem(broker, latency_ms, now)
        item.latency_ms = latency_ms
        item.available_at = now + duration / 1000
        item.failures = item.failures + 1 if failed else 0

    def is_available(self, broker: str, now: float) -> bool:
        item = self._items.get(broker)
        return item is None or item.available(now)

    def least_bad(self, brokers: Iterable[str], now: float) -> str | None:
        """Of ``brokers``, the one to try when all are isolated (RocketMQ's pickOneAtLeast):
        the one free soonest, then the one with the lower latency."""
        def badness(name: str) -> tuple[float, float]:
            item = self._items.get(name)
            return (0.0, 0.0) if item is None else (max(0.0, item.available_at - now), item.latency_ms)

        return min(brokers, key=badness, default=None)

    def keep_only(self, brokers: set[str]) -> None:
        """Forget brokers that left every route."""
        for name in [n for n in self._items if n not in brokers]:
            del self._items[name]

    def rows(self, now: float) -> list[FaultRow]:
        return [FaultRow(i.broker, round(i.latency_ms, 1), round(max(0.0, i.available_at - now), 3), i.failures)
                for i in sorted(self._items.values(), key=lambda i: i.broker)]
