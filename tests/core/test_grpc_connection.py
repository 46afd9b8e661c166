"""The gRPC door's HTTP/2 connection, sans-IO: frames in, call events and frames out."""

from __future__ import annotations

import gzip
import struct

from core.proxy.grpc.calls import GRPC_RESOURCE_EXHAUSTED
from core.proxy.grpc.connection import (
    STREAM_WINDOW,
    STREAMS_MAX,
    CallCancelled,
    CallHalfClosed,
    CallMessage,
    CallOpened,
    GrpcConnection,
    grpc_timeout,
)
from core.remoting.limits import ByteBudget
from formats import http2 as h2
from formats.hpack import HpackDecoder, encode_literal

PATH = "/apache.rocketmq.v2.MessagingService/SendMessage"


def request_headers(path: str = PATH, **extra: str) -> bytes:
    fields = {":method": "POST", ":scheme": "http", ":path": path, ":authority": "proxy",
              "content-type": "application/grpc", "te": "trailers", "x-mq-client-id": "c1", **extra}
    return b"".join(encode_literal(k.encode(), v.encode()) for k, v in fields.items())


def frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        length, kind, flags, sid = h2.parse_header(data, pos)
        out.append((kind, flags, sid, data[pos + 9:pos + 9 + length]))
        pos += 9 + length
    return out


def opened(conn: GrpcConnection, sid: int = 1, *, ends: bool = False, **extra: str) -> list:
    flags = h2.END_HEADERS | (h2.END_STREAM if ends else 0)
    return conn.receive(h2.frame(h2.HEADERS, flags, sid, request_headers(**extra)))


def started() -> GrpcConnection:
    conn = GrpcConnection(message_max=1 << 20)
    assert conn.receive(h2.PREFACE + h2.settings({})) == []
    kinds = [f[0] for f in frames(conn.data_to_send())]
    assert kinds == [h2.SETTINGS, h2.WINDOW_UPDATE, h2.SETTINGS]  # ours, the connection's window, the ACK
    return conn


def trailers_of(conn: GrpcConnection) -> dict[bytes, bytes]:
    decoder = HpackDecoder()
    headers = [f for f in frames(conn.data_to_send()) if f[0] == h2.HEADERS]
    return dict(decoder.decode(headers[-1][3]))


def test_a_unary_call_opens_carries_one_message_and_half_closes() -> None:
    conn = started()
    events = opened(conn, **{"grpc-timeout": "10S"})
    assert events == [CallOpened(1, PATH, {k: v for k, v in [
        ("content-type", "application/grpc"), ("te", "trailers"), ("x-mq-client-id", "c1"),
        ("grpc-timeout", "10S")]}, 10.0)]
    body = h2.grpc_message(b"hello")
    events = conn.receive(h2.frame(h2.DATA, 0, 1, body[:3]) + h2.frame(h2.DATA, h2.END_STREAM, 1, body[3:]))
    assert events == [CallMessage(1, b"hello", 10), CallHalfClosed(1)]
    assert conn.send_message(1, b"answer")
    conn.finish(1, 0)
    out = frames(conn.data_to_send())
    assert [(k, f) for k, f, _, _ in out] == [(h2.HEADERS, h2.END_HEADERS), (h2.DATA, 0),
                                               (h2.HEADERS, h2.END_HEADERS | h2.END_STREAM)]
    assert out[1][3] == h2.grpc_message(b"answer")
    assert dict(HpackDecoder().decode(out[0][3] + out[2][3]))[b"grpc-status"] == b"0"
    assert not conn.send_message(1, b"late")  # the call is over


def test_an_answer_waits_for_the_clients_window() -> None:
    conn = started()
    conn.receive(h2.settings({h2.SETTINGS_INITIAL_WINDOW_SIZE: 10}))
    opened(conn, ends=True)
    conn.data_to_send()
    conn.send_message(1, b"x" * 30)
    conn.finish(1, 0)
    sent = [f for f in frames(conn.data_to_send()) if f[0] == h2.DATA]
    assert sum(len(f[3]) for f in sent) == 10 and conn.queued(1) == 1  # the trailers wait too
    conn.receive(h2.window_update(1, 100))
    out = frames(conn.data_to_send())
    assert sum(len(f[3]) for f in out if f[0] == h2.DATA) == 25
    assert out[-1][0] == h2.HEADERS and out[-1][1] & h2.END_STREAM


def test_a_message_over_the_limit_is_refused_and_the_call_dropped() -> None:
    conn = started()
    conn.data_to_send()
    opened(conn)
    events = conn.receive(h2.frame(h2.DATA, 0, 1, struct.pack(">BI", 0, (1 << 20) + 1)))
    assert events == [CallCancelled(1)]
    assert trailers_of(conn)[b"grpc-status"] == str(GRPC_RESOURCE_EXHAUSTED).encode()


def test_a_gzip_message_is_inflated_and_a_bomb_is_refused() -> None:
    conn = started()
    opened(conn, **{"grpc-encoding": "gzip"})
    packed = gzip.compress(b"payload")
    events = conn.receive(h2.frame(h2.DATA, h2.END_STREAM, 1, struct.pack(">BI", 1, len(packed)) + packed))
    assert events == [CallMessage(1, b"payload", 5 + len(packed)), CallHalfClosed(1)]
    conn.data_to_send()
    opened(conn, 3, **{"grpc-encoding": "gzip"})
    bomb = gzip.compress(b"\0" * (4 << 20))  # 4 MiB from a few KiB
    events = conn.receive(h2.frame(h2.DATA, h2.END_STREAM, 3, struct.pack(">BI", 1, len(bomb)) + bomb))
    assert events == [CallCancelled(3)]
    assert trailers_of(conn)[b"grpc-status"] == str(GRPC_RESOURCE_EXHAUSTED).encode()


def test_streams_past_the_limit_are_refused() -> None:
    conn = started()
    conn.data_to_send()
    for i in range(STREAMS_MAX):
        opened(conn, 2 * i + 1)
    assert opened(conn, 2 * STREAMS_MAX + 1) == []
    kind, _, sid, payload = frames(conn.data_to_send())[-1]
    assert (kind, sid, int.from_bytes(payload, "big")) == (h2.RST_STREAM, 2 * STREAMS_MAX + 1, h2.REFUSED_STREAM)


def test_a_reset_cancels_the_call() -> None:
    conn = started()
    opened(conn)
    assert conn.receive(h2.rst_stream(1, h2.CANCEL)) == [CallCancelled(1)]
    assert not conn.send_message(1, b"x")


def test_a_header_block_split_into_continuations_is_read_whole() -> None:
    conn = started()
    block = request_headers()
    events = conn.receive(h2.frame(h2.HEADERS, 0, 1, block[:10]) + h2.frame(h2.CONTINUATION, 0, 1, block[10:20])
                          + h2.frame(h2.CONTINUATION, h2.END_HEADERS, 1, block[20:]))
    assert isinstance(events[0], CallOpened) and events[0].path == PATH


def test_a_broken_connection_is_answered_goaway_and_cancels_its_calls() -> None:
    conn = started()
    opened(conn)
    conn.data_to_send()
    events = conn.receive(h2.frame(h2.DATA, 0, 1, b"x" * (h2.DEFAULT_FRAME_SIZE + 1)))
    assert events == [CallCancelled(1)] and conn.closed
    assert frames(conn.data_to_send())[-1][0] == h2.GOAWAY
    bad = GrpcConnection(message_max=100)
    bad.receive(b"GET / HTTP/1.1\r\n\r\n" + b"x" * 10)
    assert bad.closed and frames(bad.data_to_send())[-1][0] == h2.GOAWAY


def test_windows_are_granted_again_as_messages_are_taken_and_a_client_past_them_is_cut_off() -> None:
    conn = started()
    opened(conn)
    conn.data_to_send()
    message = h2.grpc_message(b"m" * (h2.DEFAULT_FRAME_SIZE - 5))
    taken = []
    for _ in range(STREAM_WINDOW // h2.DEFAULT_FRAME_SIZE):
        taken += conn.receive(h2.frame(h2.DATA, 0, 1, message))
    assert not [f for f in frames(conn.data_to_send()) if f[0] == h2.WINDOW_UPDATE]  # nothing taken: no grant
    for event in taken[:len(taken) // 2]:
        conn.consumed(1, event.wire_size)
    grants = {sid: int.from_bytes(p, "big") for kind, _, sid, p in frames(conn.data_to_send()) if kind == h2.WINDOW_UPDATE}
    assert grants == {1: STREAM_WINDOW // 2}
    for _ in range(STREAM_WINDOW // h2.DEFAULT_FRAME_SIZE // 2):  # the granted half is sent again
        conn.receive(h2.frame(h2.DATA, 0, 1, message))
    assert not conn.closed
    conn.receive(h2.frame(h2.DATA, 0, 1, message))  # one frame past the window
    assert conn.closed and frames(conn.data_to_send())[-1][0] == h2.GOAWAY


def test_pings_are_answered_and_grpc_timeouts_parse() -> None:
    conn = started()
    conn.data_to_send()
    conn.receive(h2.frame(h2.PING, 0, 0, b"12345678"))
    assert frames(conn.data_to_send()) == [(h2.PING, h2.ACK, 0, b"12345678")]
    assert grpc_timeout("100m") == 0.1 and grpc_timeout("8760H") == 8760 * 3600
    assert grpc_timeout("") is None and grpc_timeout("123456789S") is None and grpc_timeout("5x") is None


def test_a_message_larger_than_the_stream_window_arrives_as_its_octets_are_granted() -> None:
    """A 4 MiB message (a SendMessage at the body limit) is four stream windows: its length is
    reserved when its prefix arrives and its octets are granted as they come, so the client
    never waits for a window that only a whole message would open."""
    budget = ByteBudget(8 << 20)
    conn = GrpcConnection(message_max=16 << 20, large_messages=budget)
    conn.receive(h2.PREFACE + h2.settings({}))
    opened(conn)
    conn.data_to_send()
    wire = h2.grpc_message(b"m" * (4 << 20))
    window, sent, events = STREAM_WINDOW, 0, []
    while sent < len(wire):  # the client keeps to the window it was granted, as grpcio does
        chunk = wire[sent:sent + min(window, h2.DEFAULT_FRAME_SIZE)]
        assert chunk, "the client ran out of window: the message can never arrive"
        last = sent + len(chunk) == len(wire)
        events += conn.receive(h2.frame(h2.DATA, h2.END_STREAM if last else 0, 1, chunk))
        sent, window = sent + len(chunk), window - len(chunk)
        window += sum(int.from_bytes(p, "big") for k, _, sid, p in frames(conn.data_to_send())
                      if k == h2.WINDOW_UPDATE and sid == 1)
        if budget.reserved:
            assert budget.reserved == len(wire)
    assert [type(e) for e in events] == [CallMessage, CallHalfClosed] and len(events[0].message) == 4 << 20
    assert budget.reserved == 0  # the reservation ended with the message
    conn.consumed(1, events[0].wire_size)  # taking it grants nothing twice: the window stays within 1 MiB
    assert not conn.closed


def test_large_messages_past_the_budget_are_refused_and_the_budget_comes_back() -> None:
    budget = ByteBudget(3 << 20)
    conn = GrpcConnection(message_max=16 << 20, large_messages=budget)
    conn.receive(h2.PREFACE + h2.settings({}))
    opened(conn, 1)
    opened(conn, 3)
    conn.data_to_send()
    assert conn.receive(h2.frame(h2.DATA, 0, 1, struct.pack(">BI", 0, 2 << 20) + b"x" * 1000)) == []
    assert budget.reserved == (2 << 20) + 5
    assert conn.receive(h2.frame(h2.DATA, 0, 3, struct.pack(">BI", 0, 2 << 20) + b"x" * 1000)) == [CallCancelled(3)]
    assert trailers_of(conn)[b"grpc-status"] == str(GRPC_RESOURCE_EXHAUSTED).encode()
    conn.receive(h2.rst_stream(1, h2.CANCEL))  # the first one's client gives up: its share comes back
    assert budget.reserved == 0
