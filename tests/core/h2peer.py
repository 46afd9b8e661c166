"""h2spec's client, in process: frames built as h2spec builds them, sent to the gRPC door's sans-IO
HTTP/2 connection, and its answers read back frame by frame. The test plays the service too:
where h2spec needs a response body, the request is a gRPC call and the test answers it.

h2spec's default request ("REQ") is ``GET /`` with ``:scheme http`` and ``:authority``, no other
field; the door answers a request that is not gRPC once it has ended (405 or 415), so h2spec's
"a HEADERS on stream 1" holds without a service.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import hpack

from core.proxy.grpc.connection import GrpcConnection
from formats import http2 as h2

ZEROS = b"\0" * 8
H2SPEC = b"h2spec\0\0"
DUMMY = ("x-dummy0", "x" * 4000)  # h2spec's --max-header-length default
REQ = [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "127.0.0.1:8181")]
GRPC_REQ = [(":method", "POST"), (":scheme", "http"), (":path", "/apache.rocketmq.v2.MessagingService/Heartbeat"),
            (":authority", "127.0.0.1:8181"), ("content-type", "application/grpc"), ("te", "trailers")]


def post(*extra: tuple[str, str]) -> list[tuple[str, str]]:
    """h2spec's REQ[POST], with ``extra`` fields after it."""
    return [(":method", "POST"), *REQ[1:], *extra]


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes

    @property
    def code(self) -> int:
        """A RST_STREAM's or GOAWAY's error code."""
        return struct.unpack_from(">I", self.payload, 4 if self.kind == h2.GOAWAY else 0)[0]


def parse(data: bytes) -> list[Frame]:
    out, pos = [], 0
    while pos < len(data):
        length, kind, flags, sid = h2.parse_header(data, pos)
        out.append(Frame(kind, flags, sid, data[pos + 9:pos + 9 + length]))
        pos += 9 + length
    return out


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return h2.frame(kind, flags, stream, payload)


def settings(*pairs: tuple[int, int], ack: bool = False) -> bytes:
    return frame(h2.SETTINGS, h2.ACK if ack else 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def ping(data: bytes = ZEROS, ack: bool = False) -> bytes:
    return frame(h2.PING, h2.ACK if ack else 0, 0, data)


def priority(stream: int, depends: int = 0, weight: int = 255, exclusive: bool = False) -> bytes:
    return frame(h2.PRIORITY, 0, stream, struct.pack(">IB", depends | (exclusive << 31), weight))


def rst(stream: int, code: int = h2.CANCEL) -> bytes:
    return frame(h2.RST_STREAM, 0, stream, struct.pack(">I", code))


def window_update(stream: int, increment: int) -> bytes:
    return frame(h2.WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))


def goaway(last: int = 0, code: int = h2.NO_ERROR, debug: bytes = b"") -> bytes:
    return frame(h2.GOAWAY, 0, 0, struct.pack(">II", last, code) + debug)


def data(stream: int, payload: bytes = b"test", *, end: bool = True) -> bytes:
    return frame(h2.DATA, h2.END_STREAM if end else 0, stream, payload)


class Peer:
    """One connection from h2spec's side (each case opens its own, as h2spec does)."""

    def __init__(self, *, handshake: bool = True, message_max: int = 1 << 20) -> None:
        self.conn = GrpcConnection(message_max=message_max)
        self.encoder = hpack.Encoder()
        self.received: list[Frame] = []  # what the server sent since the handshake
        self.events: list[object] = []
        if handshake:  # h2spec's: preface, SETTINGS(INITIAL_WINDOW_SIZE=65535), ACK the server's
            self.send(h2.PREFACE + settings((h2.SETTINGS_INITIAL_WINDOW_SIZE, 65535)))
            assert [f.kind for f in self.received][:1] == [h2.SETTINGS]
            assert any(f.kind == h2.SETTINGS and f.flags & h2.ACK for f in self.received)
            self.send(settings(ack=True))
            self.received.clear()

    def block(self, fields: list[tuple[str, str]]) -> bytes:
        """``fields`` HPACK-coded by this connection's encoder (indexed as Go's hpack does)."""
        return self.encoder.encode([(k.encode(), v.encode()) for k, v in fields], huffman=True)

    def headers(self, stream: int, fields: list[tuple[str, str]] | bytes = REQ, *, end_stream: bool = True,
                end_headers: bool = True, flags: int = 0) -> bytes:
        block = fields if isinstance(fields, bytes) else self.block(fields)
        flags |= (h2.END_STREAM if end_stream else 0) | (h2.END_HEADERS if end_headers else 0)
        return frame(h2.HEADERS, flags, stream, block)

    def continuation(self, stream: int, fields: list[tuple[str, str]] | bytes, *, end_headers: bool = True) -> bytes:
        block = fields if isinstance(fields, bytes) else self.block(fields)
        return frame(h2.CONTINUATION, h2.END_HEADERS if end_headers else 0, stream, block)

    def send(self, *frames: bytes) -> None:
        self.events += self.conn.receive(b"".join(frames))
        self.received += parse(self.conn.data_to_send())

    def answer(self, stream: int, body: bytes) -> None:
        """The service answers a gRPC call with one message of ``body`` and status OK."""
        assert self.conn.send_message(stream, body)
        self.conn.finish(stream, 0)
        self.received += parse(self.conn.data_to_send())

    # ------------------------------------------------------------------ h2spec's verdicts, held to the RFC's exact codes

    def of(self, kind: int) -> list[Frame]:
        return [f for f in self.received if f.kind == kind]

    def connection_error(self, code: int) -> None:
        """GOAWAY with ``code``, and the connection closed (the driver closes the socket)."""
        goaways = self.of(h2.GOAWAY)
        assert goaways and goaways[0].code == code, (code, self.received)
        assert self.conn.closed

    def stream_error(self, stream: int, code: int) -> None:
        """RST_STREAM on ``stream`` with ``code``; the connection goes on."""
        resets = [f for f in self.of(h2.RST_STREAM) if f.stream == stream and f.code != h2.NO_ERROR]
        assert resets and resets[0].code == code, (stream, code, self.received)
        assert not self.conn.closed, self.received
        self.still_serves()

    def responds(self, stream: int = 1) -> None:
        """The first HEADERS the server sent is on ``stream``."""
        headers = self.of(h2.HEADERS)
        assert headers and headers[0].stream == stream, self.received
        assert not self.conn.closed

    def stream_closed(self) -> None:
        """h2spec's VerifyStreamClose: a HEADERS or DATA with END_STREAM."""
        assert any(f.kind in (h2.HEADERS, h2.DATA) and f.flags & h2.END_STREAM for f in self.received)

    def ping_ack(self, payload: bytes = ZEROS) -> None:
        """The first PING the server sent is the ACK of ``payload``."""
        pings = self.of(h2.PING)
        assert pings and pings[0].flags & h2.ACK and pings[0].payload == payload, self.received
        assert not self.conn.closed

    def settings_ack(self) -> None:
        settings_frames = self.of(h2.SETTINGS)
        assert settings_frames and settings_frames[0].flags & h2.ACK and not settings_frames[0].payload

    def first_data_length(self, length: int) -> None:
        frames = self.of(h2.DATA)
        assert frames and len(frames[0].payload) == length, self.received

    def still_serves(self) -> None:
        """A PING on the same connection is still answered."""
        self.received.clear()
        self.send(ping(b"serving!"))
        assert [f.payload for f in self.of(h2.PING) if f.flags & h2.ACK] == [b"serving!"], self.received
