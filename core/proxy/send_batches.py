"""Concurrent sends of one client merged into batch requests upstream, as the 4.x client's
auto-batching merges them, for clients that send one message a call (RocketMQ 5's SDKs do).

Sends wait in a line per key: (client session, broker group, topic, and the queue when the
message has a message group). When a line has fewer batches in flight than it may, every send
that joined it in this scheduler pass goes out as one request: one message as SEND_MESSAGE_V2,
more as SEND_BATCH_MESSAGE (at most ``BATCH_MESSAGES_MAX`` messages and ``BATCH_BYTES_MAX``
bytes). Nothing waits for a timer: an idle line sends at once, a busy one gathers what arrives
while its batches are in flight.

Order: a message group's line has one batch in flight at a time, so a group's messages are
stored in the order the proxy read them (as separate sends would be). Other lines may have
``UNORDERED_INFLIGHT_MAX`` batches in flight, each to the next writable queue.

Only plain messages merge: transactional halves, delayed or timed messages and compressed
bodies go alone, as the broker refuses them in batches. A batch request carries one born
timestamp, the earliest of its messages'. The broker's answer to a batch is every message's:
the status is shared, the offsets follow on from the first.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from core.client.producer import send_request
from core.remoting.command import RemotingCommand
from formats.batch import BatchItem, encode_batch
from formats.errors import FormatError

log = logging.getLogger(__name__)

BATCH_MESSAGES_MAX = 128
BATCH_BYTES_MAX = 512 * 1024
UNORDERED_INFLIGHT_MAX = 4


@dataclass(slots=True)
class Send:
    """One message to send: what its request is made of."""

    topic: str
    body: bytes
    sysflag: int
    properties: dict[str, str]
    born_ms: int
    batchable: bool


@dataclass(slots=True)
class SendAnswer:
    """The broker's answer for one message of a request: the response, and which message of
    the request it was (``index``: its msgId is the index-th, its offset the first plus index)."""

    response: RemotingCommand | None
    index: int = 0

    def offset(self) -> int:
        return int(self.response.ext_fields.get("queueOffset", "-1")) + self.index if self.response else -1

    def msg_id(self) -> str:
        if self.response is None:
            return ""
        ids = self.response.ext_fields.get("msgId", "").split(",")
        return ids[self.index] if self.index < len(ids) else ""


Write = Callable[[RemotingCommand], Awaitable[RemotingCommand | None]]


@dataclass(slots=True)
class Ticket:
    """A submitted send: :meth:`answer` waits for the broker's answer."""

    send: Send
    done: trio.Event = field(default_factory=trio.Event)
    result: SendAnswer | None = None

    async def answer(self) -> SendAnswer:
        await self.done.wait()
        assert self.result is not None
        return self.result


class _Line:
    """The sends waiting for one key, and its batches in flight."""

    __slots__ = ("waiting", "inflight", "inflight_max", "launching")

    def __init__(self, inflight_max: int) -> None:
        self.waiting: list[Ticket] = []
        self.inflight = 0
        self.inflight_max = inflight_max
        self.launching = False


class SendBatches:
    """The lines of one proxy (see the module's docstring); sends are answered in their tasks."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._lines: dict[tuple[object, ...], _Line] = {}
        self._round_robin = itertools.count()
        self.requests = 0  # requests sent upstream, and the messages they carried
        self.messages = 0

    def submit(self, send: Send, key: tuple[object, ...], queues: list[int], ordered: bool,
               write: Write) -> Ticket:
        """Put ``send`` on the line ``key`` (session, group, topic[, queue]); ``queues``: the
        queue ids it may go to (one, for an ordered line); ``write(request)`` forwards a request
        to the key's group on the key's session. Submitted in order, sent in order."""
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line(1 if ordered else UNORDERED_INFLIGHT_MAX)
        ticket = Ticket(send)
        line.waiting.append(ticket)
        if not line.launching and line.inflight < line.inflight_max:
            line.launching = True
            self._nursery.start_soon(self._launch, key, line, queues, ordered, write)
        return ticket

    def _next(self, queues: list[int]) -> int:
        return queues[next(self._round_robin) % len(queues)]

    async def _launch(self, key: tuple[object, ...], line: _Line, queues: list[int], ordered: bool,
                      write: Write) -> None:
        await trio.lowlevel.checkpoint()  # every sender woken in this pass joins the batch
        line.launching = False
        while line.waiting and line.inflight < line.inflight_max:
            take, size = 0, 0
            for ticket in line.waiting:  # a message that cannot merge goes in a request of its own
                size += len(ticket.send.body)
                if take and (take >= BATCH_MESSAGES_MAX or size > BATCH_BYTES_MAX or not ticket.send.batchable):
                    break
                take += 1
                if not ticket.send.batchable:
                    break
            batch, line.waiting = line.waiting[:take], line.waiting[take:]
            line.inflight += 1
            self._nursery.start_soon(self._send_batch, key, line, batch, queues[0] if ordered else self._next(queues),
                                     queues, ordered, write)

    async def _send_batch(self, key: tuple[object, ...], line: _Line, batch: list[Ticket], queue_id: int,
                          queues: list[int], ordered: bool, write: Write) -> None:
        response: RemotingCommand | None = None
        try:
            self.requests += 1
            self.messages += len(batch)
            response = await write(self._request([t.send for t in batch], queue_id))
        except FormatError as exc:  # checked when submitted: a bug if it happens
            log.error("a send the proxy could not encode: %s", exc)
        finally:
            for i, ticket in enumerate(batch):
                ticket.result = SendAnswer(response, i)
                ticket.done.set()
            line.inflight -= 1
            if line.waiting and not line.launching:
                line.launching = True
                self._nursery.start_soon(self._launch, key, line, queues, ordered, write)
            elif not line.waiting and not line.inflight and self._lines.get(key) is line:
                del self._lines[key]

    @staticmethod
    def _request(sends: list[Send], queue_id: int) -> RemotingCommand:
        first = sends[0]
        if len(sends) == 1:  # RocketMQ's proxy sends with the topic as the producer group
            return send_request(first.topic, first.topic, queue_id, first.body, first.sysflag, 0, first.properties,
                                born_ms=first.born_ms)
        body = encode_batch([BatchItem(s.body, s.properties) for s in sends])
        return send_request(first.topic, first.topic, queue_id, body, 0, 0, {},
                            born_ms=min(s.born_ms for s in sends), batch=True)
