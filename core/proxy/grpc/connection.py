"""The server side of one gRPC connection over HTTP/2 (RFC 9113), sans-IO: bytes in, call events
out; answers in, bytes out (frames in formats/http2.py, headers in formats/hpack.py, the RFC's
rules in core/proxy/grpc/http2/).

``receive(data)`` returns what the client did, in order:

- :class:`CallOpened`: a gRPC request's headers (path, metadata, deadline);
- :class:`CallMessage`: one complete gRPC message of the stream, decompressed;
- :class:`CallHalfClosed`: the client has sent all it will (END_STREAM);
- :class:`CallCancelled`: the client reset the stream, or the stream broke a rule or a bound (the
  client was answered already: the server should drop the call).

The driver hands each message's ``wire_size`` to :meth:`consumed` once it has taken it (a unary
call at once, a stream as its handler reads): so what a client may send and this side holds is
bounded by the windows, a stream's and the connection's.

Answers: :meth:`send_message` (the response headers go first, once), :meth:`finish` (the status
trailers, after every queued message; a call with no message gets one trailers-only HEADERS),
then :meth:`data_to_send`. What this side sends waits in its stream's queue for the client's
window; :meth:`pending_bytes` is what is ready for the socket (the driver stops reading past a
bound until it drains).

Every frame and request is held to RFC 9113 as core/proxy/grpc/http2/ says (a connection
error: GOAWAY with the RFC's code, and :attr:`closed` is set; a stream error: RST_STREAM). A
well-formed request that is not gRPC (not POST: 405; not ``application/grpc``: 415) is answered
once it has ended, without a call.

Bounded: streams open at once (more: REFUSED_STREAM), a header block (``HEADER_BLOCK_MAX`` coded;
a list past ``HEADER_LIST_MAX``: RESOURCE_EXHAUSTED), a message (``message_max``, inflated too),
frame sizes (ours as announced), the closed streams remembered.
"""

from __future__ import annotations

from core.proxy.grpc.answers import RESPONSE_HEADERS, Answers
from core.proxy.grpc.calls import (
    GRPC_INTERNAL,
    GRPC_RESOURCE_EXHAUSTED,
    CallCancelled,
    CallHalfClosed,
    CallMessage,
    CallOpened,
    CallStream,
    Event,
    grpc_timeout,
    status_block,
    take_messages,
)
from core.proxy.grpc.http2 import frame_rules as rules
from core.proxy.grpc.http2 import stream_states as states
from core.proxy.grpc.http2.floods import HEADER_BLOCK_REFUSAL_COST, FloodMeter
from core.proxy.grpc.http2.request_fields import FieldChecker
from core.proxy.grpc.inflow import CONNECTION_WINDOW, STREAM_WINDOW, Inflow
from core.remoting.limits import ByteBudget
from formats import http2 as h2
from formats.hpack import HpackDecoder, HpackError, encode_literal

__all__ = ["CONNECTION_WINDOW", "STREAM_WINDOW", "CallCancelled", "CallHalfClosed", "CallMessage", "CallOpened",
           "ConnectionBroken", "Event", "GrpcConnection", "grpc_timeout"]

STREAMS_MAX = 256  # HTTP/2 streams one connection may have open
HEADER_LIST_MAX = 16 << 10
HEADER_BLOCK_MAX = 64 << 10  # coded, across CONTINUATIONs
_NOT_POST = encode_literal(b":status", b"405") + encode_literal(b"allow", b"POST")
_NOT_GRPC = encode_literal(b":status", b"415")
# what a header block completes: a new stream, a stream's trailers, or nothing (a stream this
# side reset); any other value is a stream error outcome to answer once the block is decoded
_NEW, _TRAILERS, _DROP = -1, -2, -3


class ConnectionBroken(Exception):
    """A connection error: answered GOAWAY with ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class GrpcConnection:
    """One client connection (see the module's docstring).

    One concept, 27 methods: RFC 9113's receiving half, one frame handler per frame type over
    state the frame types share (streams, windows, the flood meter, HPACK's table)."""

    def __init__(self, message_max: int, large_messages: ByteBudget | None = None) -> None:
        self.message_max = message_max
        self.closed = False
        self.close_reason: tuple[int, str] | None = None  # the GOAWAY's code and why
        self.preface_received = False  # the client's preface and its first SETTINGS
        self._buffer = bytearray()
        self._magic = False
        self._decoder = HpackDecoder(list_size_max=HEADER_LIST_MAX)
        self._fields = FieldChecker()
        self._flood = FloodMeter()
        self._streams: dict[int, CallStream] = {}
        self._closed_streams = states.ClosedStreams()
        self._last_id = 0
        self._answers = Answers(self._streams, self._flood, self._drop)
        self._out = self._answers.out
        self._out.append(h2.settings({
            h2.SETTINGS_MAX_CONCURRENT_STREAMS: STREAMS_MAX, h2.SETTINGS_INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.SETTINGS_MAX_HEADER_LIST_SIZE: HEADER_LIST_MAX, h2.SETTINGS_ENABLE_PUSH: 0}))
        self._out.append(h2.window_update(0, CONNECTION_WINDOW - h2.DEFAULT_WINDOW))
        # messages past a stream's window reserve their length here (the door's, shared by its
        # connections; alone, one such message at a time)
        self._inflow = Inflow(self._out, large_messages if large_messages is not None else ByteBudget(message_max))
        self._block: bytearray | None = None  # a header block awaiting CONTINUATION, and its stream,
        self._block_stream, self._block_ends, self._block_means, self._block_self_dependent = 0, False, _NEW, False

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def pending_bytes(self) -> int:
        """Octets made and not yet taken by :meth:`data_to_send` (answers waiting for the
        client's window are not counted: the windows bound those)."""
        return self._answers.pending_bytes()

    # ------------------------------------------------------------------ reading

    def receive(self, data: bytes) -> list[Event]:
        """What ``data`` (the next bytes from the client) made happen."""
        events: list[Event] = []
        if self.closed:
            return events
        self._buffer += data
        try:
            if not self._magic:
                if len(self._buffer) < len(h2.PREFACE):
                    if not h2.PREFACE.startswith(bytes(self._buffer)):
                        raise ConnectionBroken(h2.PROTOCOL_ERROR, "not an HTTP/2 client preface")
                    return events
                if bytes(self._buffer[:len(h2.PREFACE)]) != h2.PREFACE:
                    raise ConnectionBroken(h2.PROTOCOL_ERROR, "not an HTTP/2 client preface")
                del self._buffer[:len(h2.PREFACE)]
                self._magic = True
            pos, buffer = 0, self._buffer
            while len(buffer) - pos >= h2.FRAME_HEADER_SIZE and not self.closed:
                length, kind, flags, stream_id = h2.parse_header(buffer, pos)
                if length > h2.DEFAULT_FRAME_SIZE:  # we never announce a larger SETTINGS_MAX_FRAME_SIZE
                    raise ConnectionBroken(h2.FRAME_SIZE_ERROR, f"a frame of {length} octets, over 16384")
                end = pos + h2.FRAME_HEADER_SIZE + length
                if end > len(buffer):
                    break
                self._frame(kind, flags, stream_id, bytes(buffer[pos + h2.FRAME_HEADER_SIZE:end]), events)
                pos = end
            del buffer[:pos]
        except ConnectionBroken as exc:
            self._break(exc.code, str(exc), events)
        return events

    def go_away(self) -> None:
        """Close without error (an idle connection): GOAWAY NO_ERROR, no new stream."""
        if not self.closed:
            self._break(h2.NO_ERROR, "idle", [])

    def _break(self, code: int, reason: str, events: list[Event]) -> None:
        self._out.append(h2.goaway(self._last_id, code, reason.encode()[:200]))
        self.closed, self.close_reason = True, (code, reason)
        for stream in self._streams.values():
            self._inflow.message_complete(stream)  # a large message's reservation goes with it
            if stream.announced:
                events.append(CallCancelled(stream.id))
        self._streams.clear()

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not self.preface_received and (kind != h2.SETTINGS or flags & h2.ACK):
            raise ConnectionBroken(h2.PROTOCOL_ERROR, f"{rules.frame_name(kind)} before the client's SETTINGS")
        if self._block is not None:  # §6.10: a header block takes nothing but its CONTINUATIONs
            if kind != h2.CONTINUATION or stream_id != self._block_stream:
                problem = rules.header_problem(kind, flags, stream_id, len(payload))  # a malformed frame first
                if problem is not None and rules.is_connection_error(problem[0]):
                    raise ConnectionBroken(rules.error_code(problem[0]), problem[1])
                raise ConnectionBroken(h2.PROTOCOL_ERROR, f"{rules.frame_name(kind)} inside stream "
                                       f"{self._block_stream}'s header block")
            self._continuation(flags, payload, events)
            return
        if kind == h2.DATA:  # the common cases first: a DATA on an open stream, ...
            stream = self._streams.get(stream_id)
            if stream is not None and not stream.remote_closed:
                self._data(stream, flags, payload, events)
                return
        elif kind == h2.WINDOW_UPDATE and len(payload) == 4:  # ... a window opened (any stream id may)
            self._window_update(stream_id, payload, events)
            return
        problem = rules.header_problem(kind, flags, stream_id, len(payload))
        if problem is not None:
            self._control()
            self._apply(problem[0], stream_id, problem[1], events)
        elif kind == h2.DATA:
            self._late_data(stream_id, flags, payload, events)
        elif kind == h2.HEADERS:
            self._headers(flags, stream_id, payload, events)
        elif kind == h2.CONTINUATION:
            raise ConnectionBroken(h2.PROTOCOL_ERROR, f"CONTINUATION on stream {stream_id} without a header block")
        elif kind == h2.SETTINGS:
            self._settings(flags, payload)
        elif kind == h2.WINDOW_UPDATE:
            self._window_update(stream_id, payload, events)
        elif kind == h2.PING:
            self._control()
            if not flags & h2.ACK:
                self._out.append(h2.frame(h2.PING, h2.ACK, 0, payload))
        elif kind == h2.RST_STREAM:
            self._rst_stream(stream_id, events)
        elif kind == h2.PRIORITY:
            self._control()
            if int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF == stream_id:
                self._apply(rules.stream(h2.PROTOCOL_ERROR), stream_id, f"stream {stream_id} depends on itself", events)
        else:  # GOAWAY (the client opens no more streams; those open go on) and unknown types (§5.5)
            self._control()

    def _control(self) -> None:
        if self._flood.control_frame():
            raise ConnectionBroken(h2.ENHANCE_YOUR_CALM, f"{self._flood.control} control frames for "
                                   f"{self._flood.useful} useful ones")

    def _state(self, stream_id: int) -> int:
        stream = self._streams.get(stream_id)
        if stream is not None:
            return states.HALF_CLOSED_REMOTE if stream.remote_closed else states.OPEN
        if stream_id > self._last_id or not stream_id & 1:  # even: this side's, and it never opens one
            return states.IDLE
        return self._closed_streams.state(stream_id)

    def _apply(self, outcome: int, stream_id: int, reason: str, events: list[Event]) -> None:
        """Carry out a rule's outcome: a connection error, a stream error, or nothing. An idle
        stream cannot be reset (§6.4): an error there is the connection's."""
        if rules.is_connection_error(outcome) or (rules.is_stream_error(outcome) and self._state(stream_id) == states.IDLE):
            raise ConnectionBroken(rules.error_code(outcome), reason)
        if rules.is_stream_error(outcome):
            self._reset(stream_id, rules.error_code(outcome), events)

    def _reset(self, stream_id: int, code: int, events: list[Event]) -> None:
        """A stream error: RST_STREAM ``code``; the call, if any, is dropped."""
        self._out.append(h2.rst_stream(stream_id, code))
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._drop(stream, states.RESET_SENT)
            if stream.announced:
                events.append(CallCancelled(stream_id))
        else:
            self._closed_streams.closed(stream_id, states.RESET_SENT)

    # ------------------------------------------------------------------ headers

    def _headers(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        block = h2.unpad(flags, payload)
        if block is None:
            raise ConnectionBroken(h2.PROTOCOL_ERROR, "HEADERS padding past the frame")
        self_dependent = False
        if flags & h2.PRIORITY_FLAG:
            if len(block) < 5:  # §6.2: padding may not eat the priority; without padding the frame is short
                raise ConnectionBroken(h2.PROTOCOL_ERROR if flags & h2.PADDED else h2.FRAME_SIZE_ERROR,
                                       "HEADERS too short for its priority")
            self_dependent = int.from_bytes(block[:4], "big") & 0x7FFF_FFFF == stream_id
            block = block[5:]
        state = self._state(stream_id)
        if state == states.IDLE:
            if not stream_id & 1:
                raise ConnectionBroken(h2.PROTOCOL_ERROR, f"HEADERS on even stream {stream_id}")
            self._last_id = stream_id
            means = _NEW
        elif state == states.OPEN:
            means = _TRAILERS
        else:
            outcome = rules.state_outcome(h2.HEADERS, state)
            if rules.is_connection_error(outcome):  # closed: an identifier used again (§5.1.1)
                self._apply(outcome, stream_id, f"HEADERS on stream {stream_id}, {states.STATE_NAMES[state]}", events)
            means = _DROP if outcome == rules.IGNORE else outcome  # a stream error: once the block is decoded
        self._block, self._block_stream, self._block_ends = bytearray(block), stream_id, bool(flags & h2.END_STREAM)
        self._block_means, self._block_self_dependent = means, self_dependent
        if flags & h2.END_HEADERS:
            self._headers_done(events)

    def _continuation(self, flags: int, payload: bytes, events: list[Event]) -> None:
        assert self._block is not None
        self._control()  # each one: a chain of tiny CONTINUATIONs costs a frame's work per octet
        self._block += payload
        if len(self._block) > HEADER_BLOCK_MAX:
            raise ConnectionBroken(h2.ENHANCE_YOUR_CALM, f"a header block over {HEADER_BLOCK_MAX} octets")
        if flags & h2.END_HEADERS:
            self._headers_done(events)

    def _headers_done(self, events: list[Event]) -> None:
        assert self._block is not None
        block, stream_id, ends, means = bytes(self._block), self._block_stream, self._block_ends, self._block_means
        self._block = None
        try:  # decoded whatever it means: the dynamic table must stay in step with the client's
            fields, whole = self._decoder.decode_bounded(block)
        except HpackError as exc:
            raise ConnectionBroken(h2.COMPRESSION_ERROR, str(exc)) from None
        if means == _DROP:
            return
        if means >= 0:  # a stream error found at the HEADERS frame
            self._reset(stream_id, rules.error_code(means), events)
            return
        if means == _TRAILERS:
            stream = self._streams[stream_id]
            problem = "trailers past the header list limit" if not whole else self._fields.trailers(fields)
            if problem is not None or not ends:  # §8.1: a HEADERS mid-stream must end it
                self._reset(stream_id, h2.PROTOCOL_ERROR, events)
            else:
                self._remote_closed(stream, events)
            return
        if self._block_self_dependent:
            self._reset(stream_id, h2.PROTOCOL_ERROR, events)
            return
        if not whole:
            self._answers.headers_only(stream_id, RESPONSE_HEADERS + status_block(
                GRPC_RESOURCE_EXHAUSTED, f"request headers over {HEADER_LIST_MAX} octets"), request_ended=ends)
            self._closed_streams.closed(stream_id, states.ENDED if ends else states.RESET_SENT)
            if self._flood.stream_reset(HEADER_BLOCK_REFUSAL_COST):
                raise ConnectionBroken(h2.ENHANCE_YOUR_CALM, "too many refused header blocks")
            return
        if len(self._streams) >= STREAMS_MAX:
            self._reset(stream_id, h2.REFUSED_STREAM, events)
            return
        request = self._fields.request(fields)
        if isinstance(request, str):
            self._reset(stream_id, h2.PROTOCOL_ERROR, events)
            return
        metadata = request.metadata
        stream = CallStream(stream_id, self._answers.peer_window, encoding=metadata.get("grpc-encoding", "identity"),
                         content_length=request.content_length)
        self._streams[stream_id] = stream
        self._flood.useful += 1
        if request.method != "POST":
            stream.announced, stream.refusal = False, _NOT_POST
        elif not metadata.get("content-type", "").startswith("application/grpc"):
            stream.announced, stream.refusal = False, _NOT_GRPC
        else:
            events.append(CallOpened(stream_id, request.path, metadata, grpc_timeout(metadata.get("grpc-timeout", ""))))
        if ends:
            self._remote_closed(stream, events)

    # ------------------------------------------------------------------ data

    def _data(self, stream: CallStream, flags: int, payload: bytes, events: list[Event]) -> None:
        size = len(payload)
        if (broken := self._inflow.received(stream, size)) is not None:
            raise ConnectionBroken(h2.FLOW_CONTROL_ERROR, broken)
        data = h2.unpad(flags, payload)
        if data is None:
            raise ConnectionBroken(h2.PROTOCOL_ERROR, "DATA padding past the frame")
        if len(data) < size:
            self._inflow.give_back(stream, size - len(data))
        if data:
            self._flood.useful += 1
        elif not flags & h2.END_STREAM:
            self._control()  # an empty DATA that does not even end the stream
        stream.received += len(data)
        if 0 <= stream.content_length < stream.received:
            self._reset(stream.id, h2.PROTOCOL_ERROR, events)  # §8.1.1: more than content-length
            return
        if not stream.announced or stream.trailers is not None:  # refused or answered: dropped
            self._inflow.give_back(stream, len(data))
        else:
            inbox = stream.inbox
            inbox += data
            messages, refusal = take_messages(stream.id, inbox, self.message_max, stream.encoding)
            if messages:
                if stream.reserved:
                    self._inflow.message_complete(stream)
                events += messages
            if refusal is None and len(inbox) >= h2.GRPC_PREFIX_SIZE and not self._inflow.partial(
                    stream, h2.GRPC_PREFIX_SIZE + h2.GRPC_PREFIX.unpack_from(inbox)[1], len(inbox)):
                refusal = GRPC_RESOURCE_EXHAUSTED, "the proxy is receiving all the large messages it holds; try again"
            if refusal is not None:
                self._refuse(stream, refusal[0], refusal[1], events)
                return
        if flags & h2.END_STREAM:
            self._remote_closed(stream, events)

    def _late_data(self, stream_id: int, flags: int, payload: bytes, events: list[Event]) -> None:
        """DATA on a stream not open: counted in the connection's window (§6.9), judged by state."""
        if h2.unpad(flags, payload) is None:
            raise ConnectionBroken(h2.PROTOCOL_ERROR, "DATA padding past the frame")
        if (broken := self._inflow.late(len(payload))) is not None:
            raise ConnectionBroken(h2.FLOW_CONTROL_ERROR, broken)
        self._control()
        state = self._state(stream_id)
        self._apply(rules.state_outcome(h2.DATA, state), stream_id, f"DATA on stream {stream_id}, "
                    f"{states.STATE_NAMES[state]}", events)

    def consumed(self, stream_id: int, size: int) -> None:
        """``size`` octets of the stream's DATA were taken: the client may send them again
        (granted in batches of half a window). A stream that has ended gave its back then."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._inflow.taken(stream, size)

    def _drop(self, stream: CallStream, state: int) -> None:
        """The stream has ended (``state`` says how): what it held and nobody took goes back to
        the connection."""
        if self._streams.pop(stream.id, None) is not None:
            self._answers.forget(stream.id)
            if stream.untaken or stream.reserved:
                self._inflow.ended(stream)
            self._closed_streams.closed(stream.id, state)

    def _remote_closed(self, stream: CallStream, events: list[Event]) -> None:
        if 0 <= stream.content_length != stream.received:
            self._reset(stream.id, h2.PROTOCOL_ERROR, events)  # §8.1.1: less than content-length
            return
        stream.remote_closed = True
        if not stream.announced:
            if stream.refusal is not None:
                self._answers.headers_only(stream.id, stream.refusal, request_ended=True)
                self._drop(stream, states.ENDED)
            return
        if stream.trailers is not None:
            return  # answered already: the answer ends the stream once it is sent
        if stream.inbox:
            self._refuse(stream, GRPC_INTERNAL, "the stream ended inside a message", events)
            return
        events.append(CallHalfClosed(stream.id))

    def _refuse(self, stream: CallStream, code: int, reason: str, events: list[Event]) -> None:
        """Answer the call ``code`` now (a client still sending is reset) and tell the driver to
        drop it."""
        stream.inbox.clear()
        stream.outbox.clear()
        if stream.trailers is None:
            self.finish(stream.id, code, reason)
        else:
            self._answers.flush(stream)
        events.append(CallCancelled(stream.id))

    def _rst_stream(self, stream_id: int, events: list[Event]) -> None:
        state = self._state(stream_id)
        outcome = rules.state_outcome(h2.RST_STREAM, state)
        if outcome != rules.ACCEPT:
            self._control()
            self._apply(outcome, stream_id, f"RST_STREAM on stream {stream_id}, {states.STATE_NAMES[state]}", events)
            return
        stream = self._streams[stream_id]
        self._drop(stream, states.RESET_RECEIVED)
        if stream.announced:
            events.append(CallCancelled(stream_id))
        if stream.trailers is None and self._flood.stream_reset():
            raise ConnectionBroken(h2.ENHANCE_YOUR_CALM, f"{self._flood.resets} streams reset before their "
                                   f"answer, {self._flood.answered} answered")

    # ------------------------------------------------------------------ connection settings and windows

    def _settings(self, flags: int, payload: bytes) -> None:
        if self.preface_received:
            self._control()
        if flags & h2.ACK:
            return
        self.preface_received = True
        problem = self._answers.peer_settings(h2.parse_settings(payload))
        if problem is not None:
            raise ConnectionBroken(rules.error_code(problem[0]), problem[1])
        self._out.append(h2.frame(h2.SETTINGS, h2.ACK, 0))
        self._answers.flush_blocked()

    def _window_update(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        self._control()
        increment = int.from_bytes(payload, "big") & 0x7FFF_FFFF
        if stream_id == 0:
            if not increment:
                raise ConnectionBroken(h2.PROTOCOL_ERROR, "a WINDOW_UPDATE of 0 for the connection")
            if not self._answers.connection_window(increment):
                raise ConnectionBroken(h2.FLOW_CONTROL_ERROR, "the connection's window past 2^31-1")
            return
        state = self._state(stream_id)
        outcome = rules.state_outcome(h2.WINDOW_UPDATE, state)
        if not increment and state in (states.CLOSED, states.ENDED):  # §6.9: an increment of 0 is an error
            outcome = rules.stream(h2.PROTOCOL_ERROR)
        if outcome != rules.ACCEPT:
            self._apply(outcome, stream_id, f"WINDOW_UPDATE on stream {stream_id}, {states.STATE_NAMES[state]}", events)
            return
        stream = self._streams[stream_id]
        stream.send_window += increment
        if not increment or stream.send_window > h2.WINDOW_MAX:
            self._reset(stream_id, h2.PROTOCOL_ERROR if not increment else h2.FLOW_CONTROL_ERROR, events)
            return
        self._answers.flush(stream)

    # ------------------------------------------------------------------ answering (answers.py)

    def send_message(self, stream_id: int, message: bytes) -> bool:
        """Queue one response message; False when the call is gone (reset, or answered)."""
        return self._answers.send_message(stream_id, message)

    def finish(self, stream_id: int, code: int, message: str = "") -> None:
        """End the call with its status (after its queued messages)."""
        self._answers.finish(stream_id, code, message)

    def queued(self, stream_id: int) -> int:
        """Messages of the stream's answer not yet sent (waiting for the client's window)."""
        return self._answers.queued(stream_id)

    def data_to_send(self) -> bytes:
        """Every frame made since the last call, to write to the socket."""
        return self._answers.data_to_send()
