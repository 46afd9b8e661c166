"""What this side of a gRPC connection sends: frames ready for the socket, and each call's answer
waiting in its stream for the client's flow-control windows (RFC 9113 §5.2, §6.9).

A call's answer is its response headers (once, before the first message), its messages, then
its status trailers; a call with no message gets one trailers-only HEADERS. When the client has
not finished sending, an answered stream is also reset with NO_ERROR (§8.1: it may stop).
Headers are written as literals with static names, never indexed, so the encoder keeps no
table; when the client lowers SETTINGS_HEADER_TABLE_SIZE, the next header block starts with a
table size update to 0 (RFC 7541 §4.2).
"""

from __future__ import annotations

from collections.abc import Callable

from core.proxy.grpc.calls import CallStream, status_block
from core.proxy.grpc.http2 import frame_rules as rules
from core.proxy.grpc.http2.floods import FloodMeter
from core.proxy.grpc.http2.stream_states import ENDED, RESET_SENT
from formats import http2 as h2
from formats.hpack import encode_indexed, encode_literal

RESPONSE_HEADERS = encode_indexed(8) + encode_literal(b"content-type", b"application/grpc")  # :status 200
TABLE_CLEARED = b"\x20"  # a dynamic table size update to 0
_OK = status_block(0, "")
DEFAULT_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE until the client says otherwise


class Answers:
    """The sending half of one connection (see the module's docstring)."""

    __slots__ = ("out", "peer_window", "peer_frame_max", "send_window", "table_update", "_streams", "_flood",
                 "_ended", "_blocked")

    def __init__(self, streams: dict[int, CallStream], flood: FloodMeter,
                 ended: Callable[[CallStream, int], None]) -> None:
        self.out: list[bytes] = []  # frames ready for the socket
        self.peer_window = h2.DEFAULT_WINDOW  # initial send window of each new stream (client's setting)
        self.peer_frame_max = h2.DEFAULT_FRAME_SIZE
        self.send_window = h2.DEFAULT_WINDOW  # the connection's, granted by the client
        self.table_update = b""  # put before the next header block
        self._streams = streams
        self._flood = flood
        self._ended = ended  # a stream answered in full: the connection forgets it (how it closed)
        self._blocked: dict[int, None] = {}  # streams with data waiting for a window, in order

    def header_prefix(self) -> bytes:
        prefix, self.table_update = self.table_update, b""
        return prefix

    def headers_only(self, stream_id: int, block: bytes, *, request_ended: bool) -> None:
        """Answer a stream with one header block (no call: a refusal); a client still sending
        is told to stop."""
        self.out.append(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, stream_id, self.header_prefix() + block))
        if not request_ended:
            self.out.append(h2.rst_stream(stream_id, h2.NO_ERROR))
        self._flood.answered += 1

    def send_message(self, stream_id: int, message: bytes) -> bool:
        """Queue one response message; False when the call is gone (reset, or answered)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None:
            return False
        if not stream.headers_sent:
            stream.headers_sent = True
            self.out.append(h2.frame(h2.HEADERS, h2.END_HEADERS, stream_id, self.header_prefix() + RESPONSE_HEADERS))
        stream.outbox.append(h2.grpc_message(message))
        self.flush(stream)
        return True

    def finish(self, stream_id: int, code: int, message: str = "") -> None:
        """End the call with its status (after its queued messages)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None:
            return
        block = _OK if code == 0 and not message else status_block(code, message)
        if not stream.headers_sent:  # trailers-only
            stream.headers_sent = True
            block = RESPONSE_HEADERS + block
        stream.trailers = block
        self._flood.answered += 1
        self.flush(stream)

    def queued(self, stream_id: int) -> int:
        """Messages of the stream's answer not yet sent (waiting for the client's window)."""
        stream = self._streams.get(stream_id)
        return len(stream.outbox) if stream is not None else 0

    def data_to_send(self) -> bytes:
        """Every frame made since the last call, to write to the socket."""
        if not self.out:
            return b""
        out = b"".join(self.out)
        self.out.clear()
        return out

    def pending_bytes(self) -> int:
        """Octets ready for the socket (what waits for a window is not counted: windows bound it)."""
        return sum(map(len, self.out))

    def flush(self, stream: CallStream) -> None:
        """Send what the windows let through of the stream's answer; its trailers once the rest
        is out."""
        outbox = stream.outbox
        while outbox:
            room = min(self.send_window, stream.send_window, self.peer_frame_max)
            if room <= 0:
                self._blocked[stream.id] = None
                return
            chunk = outbox[0]
            if len(chunk) > room:
                outbox[0] = chunk[room:]
                chunk = chunk[:room]
            else:
                outbox.popleft()
            self.send_window -= len(chunk)
            stream.send_window -= len(chunk)
            self.out.append(h2.frame(h2.DATA, 0, stream.id, chunk))
            self._flood.useful += 1  # the client may answer it with WINDOW_UPDATEs and a PING
        self._blocked.pop(stream.id, None)
        if stream.trailers is not None and not stream.finished:
            stream.finished = True
            self.out.append(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, stream.id,
                                     self.header_prefix() + stream.trailers))
            if not stream.remote_closed:  # the client may still be sending: it has its answer, so it may stop
                self.out.append(h2.rst_stream(stream.id, h2.NO_ERROR))
            self._ended(stream, ENDED if stream.remote_closed else RESET_SENT)

    def flush_blocked(self) -> None:
        """A window opened: send what waited for it, oldest first."""
        for stream_id in list(self._blocked):
            stream = self._streams.get(stream_id)
            if stream is None:
                self._blocked.pop(stream_id, None)
                continue
            self.flush(stream)
            if self.send_window <= 0:
                return

    def forget(self, stream_id: int) -> None:
        self._blocked.pop(stream_id, None)

    def connection_window(self, increment: int) -> bool:
        """The client granted ``increment`` more to the connection; False when that takes it past
        2^31-1 (a connection FLOW_CONTROL_ERROR)."""
        self.send_window += increment
        if self.send_window > h2.WINDOW_MAX:
            return False
        self.flush_blocked()
        return True

    def peer_settings(self, pairs: list[tuple[int, int]]) -> tuple[int, str] | None:
        """Apply the client's SETTINGS, in order (§6.5.3); the outcome and reason of the first
        value the RFC forbids, or None."""
        for key, value in pairs:
            problem = rules.settings_problem(key, value)
            if problem is not None:
                return problem
            if key == h2.SETTINGS_INITIAL_WINDOW_SIZE:  # every open stream's window moves by the change
                delta, self.peer_window = value - self.peer_window, value
                for stream in self._streams.values():
                    stream.send_window += delta
                    if stream.send_window > h2.WINDOW_MAX:  # §6.9.2
                        return rules.conn(h2.FLOW_CONTROL_ERROR), f"stream {stream.id}'s window past 2^31-1"
            elif key == h2.SETTINGS_MAX_FRAME_SIZE:
                self.peer_frame_max = value
            elif key == h2.SETTINGS_HEADER_TABLE_SIZE and value < DEFAULT_TABLE_SIZE:
                self.table_update = TABLE_CLEARED  # RFC 7541 §4.2: our encoder must say so
        return None
