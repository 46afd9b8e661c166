"""Held pulls: a PULL that finds nothing waits here until a record for its queue is
dispatched or its deadline passes (RocketMQ's PullRequestHoldService)."""

from __future__ import annotations

from collections.abc import Iterable

import trio

from core.hookspecs import hookimpl
from core.store.dispatch import DispatchBatch

PARKED_MAX = 100_000
ANY_QUEUE = -1  # a waiter for every queue of a topic (a POP of all its queues)


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
