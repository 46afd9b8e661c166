"""Requests of the same kind merged while earlier ones are in flight, as the 4.x client's
auto-batching merges sends: the proxy's answer to clients that send one message, or one ack, a
call (RocketMQ 5's SDKs do).

Items wait in a line per key (the caller's: a client session, a broker group, ...). When a line
has fewer batches in flight than it may, every item that joined it in this scheduler pass goes
out as one batch: ``flush(key, items)``, one function for every line of a :class:`Lines`, which
reads from the key where the batch goes. Nothing waits for a timer: an idle line sends
at once, a busy one gathers what arrives while its batches are in flight.

An ordered line has one batch in flight at a time, so its items reach the broker in the order
they were submitted; others may have ``UNORDERED_INFLIGHT_MAX``. An item that may not merge
(``mergeable`` false) goes in a batch of its own, in its place in the line.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import trio

log = logging.getLogger(__name__)

I = TypeVar("I")  # noqa: E741 - an item
A = TypeVar("A")  # an item's answer
UNORDERED_INFLIGHT_MAX = 4

Flush = Callable[[Any, list[I]], Awaitable[list[A]]]  # (the line's key, its batch) -> an answer per item


@dataclass(slots=True)
class Ticket(Generic[I, A]):
    """A submitted item: :meth:`answer` waits for its batch's answer (None: the batch failed
    without one, which the flush has logged)."""

    item: I
    mergeable: bool
    size: int
    done: trio.Event = field(default_factory=trio.Event)
    result: A | None = None

    async def answer(self) -> A | None:
        await self.done.wait()
        return self.result


class _Line(Generic[I, A]):
    __slots__ = ("waiting", "inflight", "inflight_max", "launching")

    def __init__(self, inflight_max: int) -> None:
        self.waiting: list[Ticket[I, A]] = []
        self.inflight = 0
        self.inflight_max = inflight_max
        self.launching = False


class Lines(Generic[I, A]):
    """The lines of one kind of request (see the module's docstring)."""

    def __init__(self, nursery: trio.Nursery, flush: Flush[I, A], *, items_max: int, bytes_max: int) -> None:
        self._nursery = nursery
        self._flush_batch = flush
        self._lines: dict[Hashable, _Line[I, A]] = {}
        self.items_max = items_max
        self.bytes_max = bytes_max
        self.batches = 0  # batches flushed, and the items they held
        self.items = 0

    def submit(self, item: I, key: Hashable, *, ordered: bool, mergeable: bool = True,
               size: int = 0) -> Ticket[I, A]:
        """Line ``item`` up on line ``key``; submitted in order, flushed in order."""
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line(1 if ordered else UNORDERED_INFLIGHT_MAX)
        ticket: Ticket[I, A] = Ticket(item, mergeable, size)
        line.waiting.append(ticket)
        if not line.launching and line.inflight < line.inflight_max:
            line.launching = True
            self._nursery.start_soon(self._launch, key, line)
        return ticket

    async def _launch(self, key: Hashable, line: _Line[I, A]) -> None:
        await trio.lowlevel.checkpoint()  # every submitter woken in this pass joins the batch
        line.launching = False
        while line.waiting and line.inflight < line.inflight_max:
            take, size = 0, 0
            for ticket in line.waiting:
                size += ticket.size
                if take and (take >= self.items_max or size > self.bytes_max or not ticket.mergeable):
                    break
                take += 1
                if not ticket.mergeable:
                    break
            batch, line.waiting = line.waiting[:take], line.waiting[take:]
            line.inflight += 1
            self._nursery.start_soon(self._flush, key, line, batch)

    async def _flush(self, key: Hashable, line: _Line[I, A], batch: list[Ticket[I, A]]) -> None:
        answers: list[A] = []
        try:
            self.batches += 1
            self.items += len(batch)
            answers = await self._flush_batch(key, [t.item for t in batch])
        except Exception:  # a bug in a flush: its items are answered None, the proxy goes on
            log.exception("a batch of %d could not be sent", len(batch))
        finally:
            for i, ticket in enumerate(batch):
                ticket.result = answers[i] if i < len(answers) else None
                ticket.done.set()
            line.inflight -= 1
            if line.waiting and not line.launching:
                line.launching = True
                self._nursery.start_soon(self._launch, key, line)
            elif not line.waiting and not line.inflight and self._lines.get(key) is line:
                del self._lines[key]
