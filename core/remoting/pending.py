"""What a remoting connection keeps about requests in flight: a request waiting for its answer
(a task waiting, or a callback to call), a processor's promise to answer later, and the
connections a reader relays frames to (core/remoting/connection.py uses them all)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

import trio

from core.errors import RemotingError
from core.remoting.command import RemotingCommand

log = logging.getLogger(__name__)


class AnswerLater:
    """What a processor returns when it answers through :meth:`Connection.answer` itself."""

    __slots__ = ()


ANSWER_LATER = AnswerLater()

# What a request sent with a callback gets: its response, or why there is none.
Outcome = RemotingCommand | RemotingError


def request_bytes(cmd: RemotingCommand) -> int:
    """About what a request occupies: its frame when kept, else its body and header fields."""
    if cmd.frame:
        return len(cmd.frame)
    ext = cmd.ext_fields
    return len(cmd.body) + sum(map(len, ext)) + sum(map(len, ext.values()))


class Flushable(Protocol):
    async def flush(self) -> None: ...


class Touched(list[Flushable]):
    """Connections a reader queued frames on while it handled what one read completed: it
    writes them itself afterwards, so no writer task is woken for them (the proxy's relay)."""

    open = False


# the reader task's list (the task that queues is a reader only while its list is open)
TOUCHED: ContextVar[Touched | None] = ContextVar("TOUCHED", default=None)


class Waiting:
    """A pending request a task waits for (Connection.request)."""

    __slots__ = ("event", "response", "deadline")

    def __init__(self, deadline: float) -> None:
        self.event = trio.Event()
        self.response: RemotingCommand | None = None
        self.deadline = deadline

    def settle(self, outcome: Outcome) -> None:
        if isinstance(outcome, RemotingCommand):
            self.response = outcome
        self.event.set()  # no response: request() says why


class Callback:
    """A pending request answered by calling ``then`` (from the reader, the sweeper or close)."""

    __slots__ = ("then", "code")

    def __init__(self, then: Callable[[Outcome], None], code: int) -> None:
        self.then = then
        self.code = code

    def settle(self, outcome: Outcome) -> None:
        try:
            self.then(outcome)
        except Exception:  # a callback's bug must not take the connection down
            log.exception("the callback of request %d failed", self.code)


@dataclass(slots=True)
class ConnectionStatistics:
    frames_received: int = 0
    frames_sent: int = 0
    sends: int = 0  # socket writes: fewer than frames_sent when replies were coalesced
    inflight: int = 0
    pending_requests: int = 0
    queued_frames: int = 0
