"""Held pulls: a PULL that finds nothing waits here until a record for its queue is
dispatched or its deadline passes (RocketMQ's PullRequestHoldService); so do POPs and
NOTIFICATIONs that poll. Each held request counts against its connection
(``broker.held_pulls_per_connection_max``) and the node (:data:`PARKED_MAX`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import trio

from core.hookspecs import hookimpl
from core.store.dispatch import DispatchBatch

PARKED_MAX = 100_000
ANY_QUEUE = -1  # a waiter for every queue of a topic (a POP of all its queues)
HELD_REQUESTS = "held_requests"  # the connection attribute counting its requests held now


class HeldCount:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


def held_count(attributes: dict[str, object]) -> HeldCount:
    """The count of held requests kept in a connection's attributes."""
    held = attributes.get(HELD_REQUESTS)
    if not isinstance(held, HeldCount):
        held = attributes[HELD_REQUESTS] = HeldCount()
    return held


class PullHold:
    def __init__(self, parked_max: int = PARKED_MAX) -> None:
        self._waiting: dict[tuple[str, int], trio.Event] = {}
        self.parked = 0
        self.parked_max = parked_max

    def waiter(self, topic: str, queue_id: int) -> trio.Event:
        """The event set at the next arrival on ``topic``/``queue_id``."""
        key = (topic, queue_id)
        event = self._waiting.get(key)
        if event is None:
            event = self._waiting[key] = trio.Event()
        return event

    def full(self, held: HeldCount, per_connection_max: int) -> str | None:
        """Why one more request of a connection with ``held`` may not wait, or ``None``."""
        if held.count >= per_connection_max:
            return f"{held.count} requests of this connection are held, its limit (broker.held_pulls_per_connection_max)"
        if self.parked >= self.parked_max:
            return f"{self.parked} requests are held on this broker, its limit"
        return None

    @contextlib.contextmanager
    def holding(self, held: HeldCount) -> Iterator[None]:
        """Count a request against its connection and the node while it waits."""
        held.count += 1
        self.parked += 1
        try:
            yield
        finally:
            held.count -= 1
            self.parked -= 1

    def wake(self, keys: Iterable[tuple[str, int]]) -> None:
        for topic, queue_id in keys:
            for key in ((topic, queue_id), (topic, ANY_QUEUE)):
                event = self._waiting.pop(key, None)
                if event is not None:
                    event.set()

    @hookimpl
    def mq_records_dispatched(self, store_dir: object, requests: DispatchBatch) -> None:
        if self._waiting:
            self.wake(requests.queues)
