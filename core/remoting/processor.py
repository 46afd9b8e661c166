"""What a remoting connection hands the requests it reads to (a :class:`Processor`), what that
returns (a :data:`Reply`), the plugin hooks it calls around each request, and where it counts
each answer's latency (a :class:`LatencyMeter`: the wire owns the interface, metrics implement
it). ``conn`` is the :class:`core.remoting.connection.Connection` the request came on (typed
loosely here: the connection imports this module)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from core.remoting.command import RemotingCommand
from core.remoting.pending import AnswerLater

# What a processor returns: a response now, one later (an awaitable, or ANSWER_LATER), or none
Reply = RemotingCommand | Awaitable[RemotingCommand | None] | AnswerLater | None


class Processor(Protocol):
    """Handles the requests arriving on connections."""

    def process(self, request: RemotingCommand, conn: Any) -> Reply: ...


class RpcHooks(Protocol):
    """The plugin hooks a connection calls around each request (the plugin host is one)."""

    def has_rpc_hooks(self) -> bool: ...

    def rpc_before_request(self, conn: Any, request: RemotingCommand) -> None: ...

    def rpc_after_response(self, conn: Any, request: RemotingCommand, response: RemotingCommand) -> None: ...


class LatencyMeter(Protocol):
    """Counts each answer's seconds from its request's read, keyed by (request, response) code;
    :class:`core.metrics.counters.Histogram` is one."""

    def observe(self, key: tuple[int, int], value: float) -> None: ...
