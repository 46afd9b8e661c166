"""The server side of one gRPC connection over HTTP/2, sans-IO: bytes in, call events out;
answers in, bytes out (frames in formats/http2.py, headers in formats/hpack.py).

``receive(data)`` returns what the client did, in order:

- :class:`CallOpened`: a stream's request headers (path, metadata, deadline);
- :class:`CallMessage`: one complete gRPC message of the stream, decompressed;
- :class:`CallHalfClosed`: the client has sent all it will (END_STREAM);
- :class:`CallCancelled`: the client reset the stream, or the stream broke a bound (the client
  was answered already: the server should drop the call).

The driver hands each message's ``wire_size`` to :meth:`consumed` once it has taken it (a unary
call at once, a stream as its handler reads): so what a client may send and this side holds is
bounded by the windows, a stream's and the connection's.

Answers: :meth:`send_message` (the response headers go first, once), :meth:`finish` (the status
trailers, after every queued message; a call with no message gets one trailers-only HEADERS),
then :meth:`data_to_send`. Both directions keep HTTP/2 flow control: what the client sends is
bounded by the windows this side grants (granted again as it is read), what this side sends
waits in the stream's queue for the client's window.

Bounds on what a client can make this side hold: streams open at once (more are refused with
REFUSED_STREAM), a header block (``HEADER_BLOCK_MAX``, and the decoded list), a message
(``message_max``, after decompression too: beyond, RESOURCE_EXHAUSTED), frame sizes (ours as
announced). A broken connection (bad preface, bad frame, bad HPACK) is answered GOAWAY and
:attr:`closed` is set: the driver sends what is left and closes.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

from formats import http2 as h2
from formats.hpack import HpackDecoder, HpackError, encode_indexed, encode_literal

STREAMS_MAX = 256  # HTTP/2 streams one connection may have open
STREAM_WINDOW = 1 << 20  # what a stream may send before it is granted more
CONNECTION_WINDOW = 16 << 20
HEADER_LIST_MAX = 16 << 10
HEADER_BLOCK_MAX = 64 << 10  # coded, across CONTINUATIONs
MESSAGE_TEXT_MAX = 1000  # of a grpc-message
GRPC_OK, GRPC_CANCELLED, GRPC_UNKNOWN, GRPC_DEADLINE_EXCEEDED, GRPC_PERMISSION_DENIED = 0, 1, 2, 4, 7
GRPC_RESOURCE_EXHAUSTED, GRPC_UNIMPLEMENTED, GRPC_INTERNAL, GRPC_UNAVAILABLE, GRPC_UNAUTHENTICATED = 8, 12, 13, 14, 16
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_RESPONSE_HEADERS = encode_indexed(8) + encode_literal(b"content-type", b"application/grpc")


@dataclass(slots=True)
class CallOpened:
    stream_id: int
    path: str
    metadata: dict[str, str]
    timeout_s: float | None


@dataclass(slots=True)
class CallMessage:
    stream_id: int
    message: bytes
    wire_size: int  # octets it took in the stream: hand to consumed() once the message is taken


@dataclass(slots=True)
class CallHalfClosed:
    stream_id: int


@dataclass(slots=True)
class CallCancelled:
    stream_id: int


Event = CallOpened | CallMessage | CallHalfClosed | CallCancelled


class ConnectionBroken(Exception):
    """A connection error: answered GOAWAY with ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


@dataclass(slots=True)
class _Stream:
    id: int
    send_window: int
    encoding: str = "identity"
    inbox: bytearray = field(default_factory=bytearray)
    outstanding: int = 0  # DATA octets received and not granted again (the stream's window)
    credit: int = 0  # of those, octets taken (consumed): granted again in a batch
    untaken: int = 0  # DATA octets received and not yet taken (credited to the connection at the end)
    remote_closed: bool = False
    headers_sent: bool = False
    outbox: deque[bytes] = field(default_factory=deque)
    trailers: bytes | None = None  # the status, sent once the outbox is empty
    finished: bool = False  # answered; ends the call on this side


def grpc_timeout(text: str) -> float | None:
    """grpc-timeout (1..8 digits and a unit) in seconds; None when absent or malformed."""
    if 2 <= len(text) <= 9 and text[:-1].isdigit() and text[-1] in _TIMEOUT_UNITS:
        return int(text[:-1]) * _TIMEOUT_UNITS[text[-1]]
    return None


class GrpcConnection:
    """One client connection (see the module's docstring)."""

    def __init__(self, message_max: int) -> None:
        self.message_max = message_max
        self.closed = False
        self._buffer = bytearray()
        self._preface = False
        self._decoder = HpackDecoder(list_size_max=HEADER_LIST_MAX)
        self._streams: dict[int, _Stream] = {}
        self._last_id = 0
        self._out: list[bytes] = [h2.settings({
            h2.SETTINGS_MAX_CONCURRENT_STREAMS: STREAMS_MAX, h2.SETTINGS_INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.SETTINGS_MAX_HEADER_LIST_SIZE: HEADER_LIST_MAX, h2.SETTINGS_ENABLE_PUSH: 0}),
            h2.window_update(0, CONNECTION_WINDOW - h2.DEFAULT_WINDOW)]
        self._peer_window = h2.DEFAULT_WINDOW  # initial send window of each new stream (client's setting)
        self._peer_frame_max = h2.DEFAULT_FRAME_SIZE
        self._send_window = h2.DEFAULT_WINDOW  # the connection's, granted by the client
        self._outstanding = 0  # the connection's, as a stream's
        self._credit = 0
        self._blocked: dict[int, None] = {}  # streams with data waiting for a window, in order
        self._block: bytearray | None = None  # a header block awaiting CONTINUATION
        self._block_stream = 0
        self._block_ends = False

    # ------------------------------------------------------------------ reading

    def receive(self, data: bytes) -> list[Event]:
        """What ``data`` (the next bytes from the client) made happen."""
        events: list[Event] = []
        if self.closed:
            return events
        self._buffer += data
        try:
            if not self._preface:
                if len(self._buffer) < len(h2.PREFACE):
                    if not h2.PREFACE.startswith(bytes(self._buffer)):
                        raise ConnectionBroken(h2.PROTOCOL_ERROR, "not an HTTP/2 client preface")
                    return events
                if bytes(self._buffer[:len(h2.PREFACE)]) != h2.PREFACE:
                    raise ConnectionBroken(h2.PROTOCOL_ERROR, "not an HTTP/2 client preface")
                del self._buffer[:len(h2.PREFACE)]
                self._preface = True
            pos, buffer = 0, self._buffer
            while len(buffer) - pos >= h2.FRAME_HEADER_SIZE:
                length, kind, flags, stream_id = h2.parse_header(buffer, pos)
                if length > h2.DEFAULT_FRAME_SIZE:  # we never announce a larger SETTINGS_MAX_FRAME_SIZE
                    raise ConnectionBroken(h2.FRAME_SIZE_ERROR, f"a frame of {length} octets")
                end = pos + h2.FRAME_HEADER_SIZE + length
                if end > len(buffer):
                    break
                self._frame(kind, flags, stream_id, bytes(buffer[pos + h2.FRAME_HEADER_SIZE:end]), events)
                pos = end
            del buffer[:pos]
        except ConnectionBroken as exc:
            self._break(exc.code, str(exc), events)
        return events

    def _break(self, code: int, reason: str, events: list[Event]) -> None:
        self._out.append(h2.goaway(self._last_id, code, reason.encode()[:200]))
        self.closed = True
        for stream_id in list(self._streams):
            events.append(CallCancelled(stream_id))
        self._streams.clear()

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if self._block is not None and (kind != h2.CONTINUATION or stream_id != self._block_stream):
            raise ConnectionBroken(h2.PROTOCOL_ERROR, "a header block interrupted")
        if kind == h2.DATA:
            self._data(flags, stream_id, payload, events)
        elif kind == h2.HEADERS:
            if stream_id == 0 or not stream_id & 1:
                raise ConnectionBroken(h2.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
            block = h2.unpad(flags, payload)
            if block is None:
                raise ConnectionBroken(h2.PROTOCOL_ERROR, "padding past the frame")
            if flags & h2.PRIORITY_FLAG:
                block = block[5:]
            self._block, self._block_stream, self._block_ends = bytearray(block), stream_id, bool(flags & h2.END_STREAM)
            if flags & h2.END_HEADERS:
                self._headers_done(events)
        elif kind == h2.CONTINUATION:
            if self._block is None:
                raise ConnectionBroken(h2.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
            self._block += payload
            if len(self._block) > HEADER_BLOCK_MAX:
                raise ConnectionBroken(h2.ENHANCE_YOUR_CALM, "a header block over 64 KiB")
            if flags & h2.END_HEADERS:
                self._headers_done(events)
        elif kind == h2.SETTINGS:
            self._settings(flags, stream_id, payload)
        elif kind == h2.WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == h2.PING:
            if len(payload) != 8 or stream_id:
                raise ConnectionBroken(h2.PROTOCOL_ERROR, "a malformed PING")
            if not flags & h2.ACK:
                self._out.append(h2.frame(h2.PING, h2.ACK, 0, payload))
        elif kind == h2.RST_STREAM:
            if (stream := self._streams.get(stream_id)) is not None:
                self._drop(stream)
                events.append(CallCancelled(stream_id))
        elif kind == h2.GOAWAY:
            pass  # no new calls will come; those open go on until the client closes
        elif kind == h2.PUSH_PROMISE:
            raise ConnectionBroken(h2.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        # PRIORITY and unknown frame types are ignored, as RFC 9113 says

    def _headers_done(self, events: list[Event]) -> None:
        assert self._block is not None
        block, stream_id, ends = bytes(self._block), self._block_stream, self._block_ends
        self._block = None
        try:
            fields = self._decoder.decode(block)
        except HpackError as exc:  # the table may be out of step now: the connection is lost
            raise ConnectionBroken(h2.COMPRESSION_ERROR, str(exc)) from None
        stream = self._streams.get(stream_id)
        if stream is not None:  # trailers from the client: the end of its messages
            if ends:
                self._remote_closed(stream, events)
            return
        if stream_id <= self._last_id:
            return  # a stream this side reset; its late frames are ignored
        self._last_id = stream_id
        if len(self._streams) >= STREAMS_MAX:
            self._out.append(h2.rst_stream(stream_id, h2.REFUSED_STREAM))
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in fields}
        stream = _Stream(stream_id, self._peer_window, encoding=headers.get("grpc-encoding", "identity"))
        self._streams[stream_id] = stream
        metadata = {k: v for k, v in headers.items() if not k.startswith(":")}
        events.append(CallOpened(stream_id, headers.get(":path", ""), metadata,
                                 grpc_timeout(headers.get("grpc-timeout", ""))))
        if headers.get(":method") != "POST" or not headers.get("content-type", "").startswith("application/grpc"):
            self._refuse(stream, GRPC_UNIMPLEMENTED, "not a gRPC call", events)
        elif ends:
            self._remote_closed(stream, events)

    def _data(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        self._outstanding += len(payload)
        if self._outstanding > CONNECTION_WINDOW:
            raise ConnectionBroken(h2.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id > self._last_id:
                raise ConnectionBroken(h2.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            self._grant_connection(len(payload))  # a stream this side answered or reset: late data is dropped
            return
        stream.outstanding += len(payload)
        stream.untaken += len(payload)
        if stream.outstanding > STREAM_WINDOW:
            raise ConnectionBroken(h2.FLOW_CONTROL_ERROR, f"DATA past stream {stream_id}'s window")
        data = h2.unpad(flags, payload)
        if data is None:
            raise ConnectionBroken(h2.PROTOCOL_ERROR, "padding past the frame")
        if len(data) < len(payload):
            self.consumed(stream_id, len(payload) - len(data))
        stream.inbox += data
        inbox = stream.inbox
        while len(inbox) >= h2.GRPC_PREFIX_SIZE:
            compressed, length = h2.GRPC_PREFIX.unpack_from(inbox)
            if length > self.message_max:
                self._refuse(stream, GRPC_RESOURCE_EXHAUSTED, f"a message of {length} bytes, over "
                             f"{self.message_max}", events)
                return
            if len(inbox) < h2.GRPC_PREFIX_SIZE + length:
                break
            message = bytes(inbox[h2.GRPC_PREFIX_SIZE:h2.GRPC_PREFIX_SIZE + length])
            del inbox[:h2.GRPC_PREFIX_SIZE + length]
            if compressed:
                inflated = self._decompress(stream, message, events)
                if inflated is None:
                    return
                message = inflated
            events.append(CallMessage(stream_id, message, h2.GRPC_PREFIX_SIZE + length))
        if flags & h2.END_STREAM:
            self._remote_closed(stream, events)

    def consumed(self, stream_id: int, size: int) -> None:
        """``size`` octets of the stream's DATA were taken: the client may send them again
        (granted in batches of half a window). A stream that has ended gave its back then."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.untaken -= size
        self._grant_connection(size)
        stream.credit += size
        if stream.credit >= STREAM_WINDOW // 2 and not stream.remote_closed:
            self._out.append(h2.window_update(stream_id, stream.credit))
            stream.outstanding -= stream.credit
            stream.credit = 0

    def _grant_connection(self, size: int) -> None:
        self._credit += size
        if self._credit >= CONNECTION_WINDOW // 2:
            self._out.append(h2.window_update(0, self._credit))
            self._outstanding -= self._credit
            self._credit = 0

    def _drop(self, stream: _Stream) -> None:
        """The stream has ended: what it held and nobody took goes back to the connection."""
        if self._streams.pop(stream.id, None) is not None:
            self._blocked.pop(stream.id, None)
            self._grant_connection(stream.untaken)
            stream.untaken = 0

    def _decompress(self, stream: _Stream, message: bytes, events: list[Event]) -> bytes | None:
        wbits = {"gzip": 31, "deflate": 15}.get(stream.encoding)
        if wbits is None:
            self._refuse(stream, GRPC_UNIMPLEMENTED, f"message encoding {stream.encoding!r} is not served", events)
            return None
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(message, self.message_max + 1)  # bounded before memory is committed
        except zlib.error as exc:
            self._refuse(stream, GRPC_INTERNAL, f"a compressed message does not inflate: {exc}", events)
            return None
        if len(out) > self.message_max or inflater.unconsumed_tail:
            self._refuse(stream, GRPC_RESOURCE_EXHAUSTED, f"a message inflating past {self.message_max} bytes", events)
            return None
        return out

    def _remote_closed(self, stream: _Stream, events: list[Event]) -> None:
        stream.remote_closed = True
        if stream.inbox:
            self._refuse(stream, GRPC_INTERNAL, "the stream ended inside a message", events)
            return
        events.append(CallHalfClosed(stream.id))

    def _refuse(self, stream: _Stream, code: int, reason: str, events: list[Event]) -> None:
        """Answer the call ``code`` now (a client still sending is reset) and tell the driver to
        drop it."""
        stream.inbox.clear()
        stream.outbox.clear()
        if stream.trailers is None:
            self.finish(stream.id, code, reason)
        else:
            self._flush(stream)
        events.append(CallCancelled(stream.id))

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id or len(payload) % 6:
            raise ConnectionBroken(h2.PROTOCOL_ERROR, "a malformed SETTINGS")
        if flags & h2.ACK:
            return
        for key, value in h2.parse_settings(payload):
            if key == h2.SETTINGS_INITIAL_WINDOW_SIZE:
                if value > h2.WINDOW_MAX:
                    raise ConnectionBroken(h2.FLOW_CONTROL_ERROR, "an initial window past 2^31-1")
                delta, self._peer_window = value - self._peer_window, value
                for stream in self._streams.values():
                    stream.send_window += delta
            elif key == h2.SETTINGS_MAX_FRAME_SIZE:
                if not h2.DEFAULT_FRAME_SIZE <= value <= h2.FRAME_SIZE_LIMIT:
                    raise ConnectionBroken(h2.PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value}")
                self._peer_frame_max = value
        self._out.append(h2.frame(h2.SETTINGS, h2.ACK, 0))
        self._flush_blocked()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionBroken(h2.FRAME_SIZE_ERROR, "a WINDOW_UPDATE of the wrong size")
        increment = int.from_bytes(payload, "big") & 0x7FFF_FFFF
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > h2.WINDOW_MAX:
                raise ConnectionBroken(h2.FLOW_CONTROL_ERROR, "the connection's window past 2^31-1")
            self._flush_blocked()
        elif (stream := self._streams.get(stream_id)) is not None:
            stream.send_window += increment
            self._flush(stream)

    # ------------------------------------------------------------------ answering

    def send_message(self, stream_id: int, message: bytes) -> bool:
        """Queue one response message; False when the call is gone (reset, or answered)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None or self.closed:
            return False
        if not stream.headers_sent:
            stream.headers_sent = True
            self._out.append(h2.frame(h2.HEADERS, h2.END_HEADERS, stream_id, _RESPONSE_HEADERS))
        stream.outbox.append(h2.grpc_message(message))
        self._flush(stream)
        return True

    def finish(self, stream_id: int, code: int, message: str = "") -> None:
        """End the call with its status (after its queued messages)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None or self.closed:
            return
        block = encode_literal(b"grpc-status", str(code).encode())
        if message:
            block += encode_literal(b"grpc-message", h2.percent_encode(message[:MESSAGE_TEXT_MAX]))
        if not stream.headers_sent:  # trailers-only
            stream.headers_sent = True
            block = _RESPONSE_HEADERS + block
        stream.trailers = block
        self._flush(stream)

    def queued(self, stream_id: int) -> int:
        """Messages of the stream's answer not yet sent (waiting for the client's window)."""
        stream = self._streams.get(stream_id)
        return len(stream.outbox) if stream is not None else 0

    def data_to_send(self) -> bytes:
        """Every frame made since the last call, to write to the socket."""
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def _flush(self, stream: _Stream) -> None:
        outbox = stream.outbox
        while outbox:
            room = min(self._send_window, stream.send_window, self._peer_frame_max)
            if room <= 0:
                self._blocked[stream.id] = None
                return
            chunk = outbox[0]
            if len(chunk) > room:
                outbox[0] = chunk[room:]
                chunk = chunk[:room]
            else:
                outbox.popleft()
            self._send_window -= len(chunk)
            stream.send_window -= len(chunk)
            self._out.append(h2.frame(h2.DATA, 0, stream.id, chunk))
        self._blocked.pop(stream.id, None)
        if stream.trailers is not None and not stream.finished:
            stream.finished = True
            self._out.append(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, stream.id, stream.trailers))
            if not stream.remote_closed:  # the client may still be sending: it has its answer, so it may stop
                self._out.append(h2.rst_stream(stream.id, h2.NO_ERROR))
            self._drop(stream)

    def _flush_blocked(self) -> None:
        for stream_id in list(self._blocked):
            stream = self._streams.get(stream_id)
            if stream is None:
                self._blocked.pop(stream_id, None)
                continue
            self._flush(stream)
            if self._send_window <= 0:
                return
