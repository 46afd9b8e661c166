"""What a client may send on one gRPC connection: the receive windows this side grants (RFC 9113
§5.2, §6.9), given back as the door takes what arrived, so a call whose handler lags holds its
client back; and room for messages larger than a stream's window.

Per stream: ``outstanding`` octets were received and not granted again (at most
``STREAM_WINDOW``); ``untaken`` of them are not given back yet (the connection gets them back
when the stream ends); taken octets (``credit``) are granted again in batches of half a window.
The connection keeps the same account against ``CONNECTION_WINDOW``.

A message of ``LARGE_MESSAGE_BYTES`` or more could never arrive if only whole messages were
given back (it is larger than the window), so once its length prefix is in, its whole length is
reserved from a budget the door shares among its connections, and its octets are granted as they
arrive (``advanced``); when the budget is spent, the call is refused (RESOURCE_EXHAUSTED) rather
than left to hang. The reservation ends with the message.
"""

from __future__ import annotations

from core.proxy.grpc.calls import CallStream
from core.remoting.limits import ByteBudget
from formats import http2 as h2

STREAM_WINDOW = 1 << 20  # what a stream may send before it is granted more
CONNECTION_WINDOW = 16 << 20
LARGE_MESSAGE_BYTES = STREAM_WINDOW // 4


class Inflow:
    """The receive windows of one connection (see the module's docstring)."""

    __slots__ = ("_budget", "_credit", "_out", "_outstanding")

    def __init__(self, out: list[bytes], budget: ByteBudget) -> None:
        self._out = out  # where WINDOW_UPDATE frames go
        self._budget = budget
        self._outstanding = 0
        self._credit = 0

    def received(self, stream: CallStream, size: int) -> str | None:
        """``size`` octets of DATA (padding included) arrived on ``stream``; why that breaks a
        window the client was given (a connection FLOW_CONTROL_ERROR), or None."""
        self._outstanding += size
        if self._outstanding > CONNECTION_WINDOW:
            return "DATA past the connection's window"
        stream.outstanding += size
        stream.untaken += size
        if stream.outstanding > STREAM_WINDOW:
            return f"DATA past stream {stream.id}'s window"
        return None

    def late(self, size: int) -> str | None:
        """DATA on a stream that is not open: it counts against the connection's window (§6.9)
        and is given back at once."""
        self._outstanding += size
        if self._outstanding > CONNECTION_WINDOW:
            return "DATA past the connection's window"
        self._grant_connection(size)
        return None

    def give_back(self, stream: CallStream, size: int) -> None:
        """``size`` octets of the stream's DATA are done with (padding, or data dropped)."""
        stream.untaken -= size
        self._grant_connection(size)
        stream.credit += size
        if stream.credit >= STREAM_WINDOW // 2 and not stream.remote_closed:
            self._out.append(h2.window_update(stream.id, stream.credit))
            stream.outstanding -= stream.credit
            stream.credit = 0

    def taken(self, stream: CallStream, size: int) -> None:
        """The door took a message of ``size`` octets: what was not granted ahead is given back."""
        ahead = min(size, stream.advanced)
        stream.advanced -= ahead
        if size > ahead:
            self.give_back(stream, size - ahead)

    def partial(self, stream: CallStream, declared: int, buffered: int) -> bool:
        """The stream holds ``buffered`` octets of a message ``declared`` octets long (prefix
        included): for a large one, reserve it and grant what arrived; False when the budget
        cannot hold it (the call is to be refused)."""
        if declared < LARGE_MESSAGE_BYTES:
            return True
        if not stream.reserved:
            if not self._budget.reserve(declared):
                return False
            stream.reserved = declared
        ahead = buffered - stream.advanced
        if ahead > 0:
            stream.advanced += ahead
            self.give_back(stream, ahead)
        return True

    def message_complete(self, stream: CallStream) -> None:
        """The stream's large message has arrived whole: its reservation ends."""
        if stream.reserved:
            self._budget.release(stream.reserved)
            stream.reserved = 0

    def ended(self, stream: CallStream) -> None:
        """The stream is gone: what it held and nobody took goes back to the connection."""
        self._grant_connection(stream.untaken)
        stream.untaken = 0
        self.message_complete(stream)

    def _grant_connection(self, size: int) -> None:
        self._credit += size
        if self._credit >= CONNECTION_WINDOW // 2:
            self._out.append(h2.window_update(0, self._credit))
            self._outstanding -= self._credit
            self._credit = 0
