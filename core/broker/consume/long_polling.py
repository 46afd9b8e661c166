"""Held requests: a PULL that finds nothing waits here until a record for its queue is
dispatched or its deadline passes (RocketMQ's PullRequestHoldService); so do POPs and
NOTIFICATIONs that poll. Each waiting request holds a :class:`HeldSlot`, counted against its
connection (``broker.held_pulls_per_connection_max``) and the node (:data:`PARKED_MAX`)."""

from __future__ import annotations

from collections.abc import Iterable

import trio

from core.plugin_markers import hookimpl
from core.store.dispatch import DispatchBatch

PARKED_MAX = 100_000
ANY_QUEUE = -1  # a waiter for every queue of a topic (a POP of all its queues)
HELD_REQUESTS = "held_requests"  # the connection attribute counting its requests held now


class _HeldCount:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


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

    def slot(self, attributes: dict[str, object], per_connection_max: int) -> HeldSlot:
        """A place for one request of the connection with ``attributes``, taken when it first
        waits (use it as a context manager: the place is given back when the request ends)."""
        held = attributes.get(HELD_REQUESTS)
        if not isinstance(held, _HeldCount):
            held = attributes[HELD_REQUESTS] = _HeldCount()
        return HeldSlot(self, held, per_connection_max)

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


class HeldSlot:
    """One request's place among the held ones. :meth:`take` before its first wait (an answer
    found at once takes none); checked and counted in one step, so requests of a connection
    started together are bounded as they run."""

    def __init__(self, hold: PullHold, held: _HeldCount, per_connection_max: int) -> None:
        self._hold, self._held, self._max = hold, held, per_connection_max
        self._taken = False

    def take(self) -> str | None:
        """Count the request as held; why it may not wait (the limit it met), or ``None``."""
        if self._taken:
            return None
        if self._held.count >= self._max:
            return (f"{self._held.count} requests of this connection are held, its limit "
                    "(broker.held_pulls_per_connection_max)")
        if self._hold.parked >= self._hold.parked_max:
            return f"{self._hold.parked} requests are held on this broker, its limit"
        self._held.count += 1
        self._hold.parked += 1
        self._taken = True
        return None

    def __enter__(self) -> HeldSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._taken:
            self._held.count -= 1
            self._hold.parked -= 1
            self._taken = False
