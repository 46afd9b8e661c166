"""Which queue a send goes to, and what an attempt's outcome teaches (sans-IO: the caller
passes the clock). The ``selection`` plugin hands producers this default
(:func:`core.hookspecs.mq_queue_selector`); another plugin may replace it.

Round robin over the topic's writable queues with one counter per topic. A retry prefers a
queue on another broker than the one that just failed (``last_broker``), falling back to any
queue when the topic lives on one broker only. With latency fault tolerance on, isolated
brokers (:mod:`core.client.fault`) are skipped too, and when every broker is isolated the
least bad one is taken rather than failing the send.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.client.fault import FaultRow, FaultSettings, LatencyFaultTable
from core.client.route import MessageQueue


class QueueSelector(Protocol):
    """What a producer asks of its queue selection."""

    def select(self, topic: str, queues: Sequence[MessageQueue], last_broker: str | None, now: float) -> MessageQueue:
        """The queue of ``queues`` (non-empty) the next attempt goes to."""
        ...

    def attempt_done(self, broker: str, latency_ms: float, now: float, *, failed: bool) -> None:
        """An attempt on ``broker`` ended after ``latency_ms``."""
        ...

    def brokers_in_routes(self, brokers: set[str]) -> None:
        """The brokers of every route the client knows, after a route refresh."""
        ...

    def fault_rows(self, now: float) -> list[FaultRow]:
        """The fault table, for display (empty when fault tolerance is off)."""
        ...


class RoundRobinSelector:
    """The default :class:`QueueSelector` (RocketMQ's MQFaultStrategy.selectOneMessageQueue)."""

    def __init__(self, settings: FaultSettings | None = None) -> None:
        self.settings = settings or FaultSettings()
        self.faults = LatencyFaultTable(self.settings)
        self._counters: dict[str, int] = {}

    def select(self, topic: str, queues: Sequence[MessageQueue], last_broker: str | None, now: float) -> MessageQueue:
        n = self._counters.get(topic, 0)
        self._counters[topic] = n + 1
        size = len(queues)
        if not self.settings.enabled:
            for i in range(size):
                queue = queues[(n + i) % size]
                if queue.broker_name != last_broker:
                    return queue
            return queues[n % size]
        faults = self.faults
        fallback = None  # available, but the broker that just failed
        for i in range(size):
            queue = queues[(n + i) % size]
            if faults.is_available(queue.broker_name, now):
                if queue.broker_name != last_broker:
                    return queue
                fallback = fallback or queue
        if fallback is not None:
            return fallback
        brokers = {q.broker_name for q in queues}
        others = brokers - {last_broker} if len(brokers) > 1 else brokers
        best = faults.least_bad(sorted(others), now)
        mine = [q for q in queues if q.broker_name == best]
        return mine[n % len(mine)]

    def attempt_done(self, broker: str, latency_ms: float, now: float, *, failed: bool) -> None:
        if self.settings.enabled:
            self.faults.record(broker, latency_ms, now, failed=failed)

    def brokers_in_routes(self, brokers: set[str]) -> None:
        self.faults.keep_only(brokers)

    def fault_rows(self, now: float) -> list[FaultRow]:
        return self.faults.rows(now) if self.settings.enabled else []
