"""Every case of h2spec's generic, http2 and hpack sections (summerwind/h2spec 2.0.0), by its id,
against the gRPC door's HTTP/2 connection: the frames h2spec sends, and the answer RFC 9113
requires (the exact error code, where h2spec would also take a closed connection). docs/grpc.md
lists them ("HTTP/2 conformance"); a test holds the two lists equal.

Where h2spec needs a body in the response (generic/2/2-3, http2/6.5.3/1, 6.9.1/1, 6.9.2/1-2),
the request is a gRPC call and the test answers it with a message; where it needs a stream to
stay half-closed (remote) or open while more frames come, the request is a gRPC call the test
leaves unanswered. Otherwise the request is h2spec's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from core.proxy.grpc.calls import CallOpened
from core.proxy.grpc.connection import STREAMS_MAX
from formats import http2 as h2
from tests.core.h2peer import (
    DUMMY,
    GRPC_REQ,
    H2SPEC,
    REQ,
    ZEROS,
    Peer,
    data,
    frame,
    goaway,
    ping,
    post,
    priority,
    rst,
    settings,
    window_update,
)

CASES: dict[str, Callable[[], None]] = {}
NOT_APPLICABLE: dict[str, str] = {}


def case(case_id: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(check: Callable[[], None]) -> Callable[[], None]:
        assert case_id not in CASES
        CASES[case_id] = check
        return check
    return register


IWS, MFS, PUSH = h2.SETTINGS_INITIAL_WINDOW_SIZE, h2.SETTINGS_MAX_FRAME_SIZE, h2.SETTINGS_ENABLE_PUSH
P, SC, FS, FC, COMP = h2.PROTOCOL_ERROR, h2.STREAM_CLOSED, h2.FRAME_SIZE_ERROR, h2.FLOW_CONTROL_ERROR, h2.COMPRESSION_ERROR


def preface_answered_with_settings() -> None:
    p = Peer(handshake=False)
    p.send(h2.PREFACE + settings((IWS, 65535)))
    assert p.received[0].kind == h2.SETTINGS and not p.received[0].flags & h2.ACK


# ====================================================================== generic

case("generic/1/1")(preface_answered_with_settings)


@case("generic/2/1")
def _() -> None:
    p = Peer()
    p.send(priority(1), ping())
    p.ping_ack()


def _window_update_opens_a_half_closed_stream(with_priority: bool) -> None:
    p = Peer()
    p.send(settings((IWS, 0)), p.headers(1, GRPC_REQ))
    p.answer(1, b"answer")
    assert not p.of(h2.DATA)  # the window is 0
    p.send(*([priority(1)] if with_priority else []), window_update(1, 1))
    p.first_data_length(1)


case("generic/2/2")(lambda: _window_update_opens_a_half_closed_stream(False))
case("generic/2/3")(lambda: _window_update_opens_a_half_closed_stream(True))


@case("generic/2/4")
def _() -> None:
    p = Peer()
    p.send(p.headers(1), rst(1), ping())
    p.ping_ack()


@case("generic/2/5")
def _() -> None:
    p = Peer()
    p.send(p.headers(1))
    p.stream_closed()
    p.received.clear()
    p.send(priority(1), ping())
    p.ping_ack()


@case("generic/3.1/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), data(1))
    p.responds()


@case("generic/3.1/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), data(1, end=False), data(1))
    p.responds()


@case("generic/3.1/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), frame(h2.DATA, h2.END_STREAM | h2.PADDED, 1, b"\x05test" + b"\0" * 5))
    p.responds()


@case("generic/3.2/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1))
    p.responds()


@case("generic/3.2/2")
def _() -> None:
    p = Peer()
    p.send(frame(h2.HEADERS, h2.END_STREAM | h2.END_HEADERS | h2.PADDED, 1, b"\x08" + p.block(REQ) + b"\0" * 8))
    p.responds()


@case("generic/3.2/3")
def _() -> None:
    p = Peer()
    p.send(frame(h2.HEADERS, h2.END_STREAM | h2.END_HEADERS | h2.PRIORITY_FLAG, 1, b"\0\0\0\0\xff" + p.block(REQ)))
    p.responds()


for _id, _priority in (("generic/3.3/1", priority(1, weight=0)), ("generic/3.3/2", priority(1)),
                       ("generic/3.3/3", priority(3, depends=1, weight=0)),
                       ("generic/3.3/4", priority(1, weight=0, exclusive=True)), ("generic/3.3/5", priority(3))):
    def _check(first: bytes = _priority) -> None:
        p = Peer()
        p.send(first, p.headers(1))  # a PRIORITY does not open its stream: stream 1 is still new
        p.responds()
    case(_id)(_check)


@case("generic/3.4/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_stream=False), rst(1), ping())
    p.ping_ack()


@case("generic/3.5/1")
def _() -> None:
    p = Peer()
    p.send(settings((h2.SETTINGS_HEADER_TABLE_SIZE, 4096), (PUSH, 1), (h2.SETTINGS_MAX_CONCURRENT_STREAMS, 100),
                    (IWS, 65535), (MFS, 16384), (h2.SETTINGS_MAX_HEADER_LIST_SIZE, 100)))
    p.settings_ack()


@case("generic/3.7/1")
def _() -> None:
    p = Peer()
    p.send(ping(H2SPEC))
    p.ping_ack(H2SPEC)


@case("generic/3.8/1")
def _() -> None:
    p = Peer()
    p.send(goaway(debug=b"h2spec"), ping(H2SPEC))
    p.ping_ack(H2SPEC)


@case("generic/3.9/1")
def _() -> None:
    p = Peer()
    p.send(window_update(0, 1), ping())
    p.ping_ack()


@case("generic/3.9/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1), window_update(1, 1))
    p.responds()


@case("generic/3.10/1")
def _() -> None:
    p = Peer()
    block = p.block(REQ)
    p.send(p.headers(1, block[:5], end_headers=False), p.continuation(1, block[5:]))
    p.responds()


@case("generic/3.10/2")
def _() -> None:
    p = Peer()
    block = p.block(REQ)
    p.send(p.headers(1, block[:5], end_headers=False), p.continuation(1, block[5:10], end_headers=False),
           p.continuation(1, block[10:]))
    p.responds()


@case("generic/4/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1))
    p.responds()


@case("generic/4/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, [(":method", "HEAD"), *REQ[1:]]))
    p.responds()


@case("generic/4/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), data(1))
    p.responds()


@case("generic/4/4")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(("trailer", "x-test")), end_stream=False), data(1, end=False),
           p.headers(1, [("x-test", "ok")]))
    p.responds()


_HPACK_FIELDS = {  # the octets h2spec puts after the REQ's block
    "generic/5/1": "ba", "generic/5/2": "4087b505b161cc5a93849c48aca4", "generic/5/3": "400a" + b"user-agent".hex()
    + "06" + b"h2spec".hex(), "generic/5/4": "4006" + b"x-test".hex() + "06" + b"h2spec".hex(),
    "generic/5/5": "4085f2b24a84ff849c48aca4", "generic/5/6": "000a" + b"user-agent".hex() + "06" + b"h2spec".hex(),
    "generic/5/7": "0087b505b161cc5a93849c48aca4", "generic/5/8": "0006" + b"x-test".hex() + "06" + b"h2spec".hex(),
    "generic/5/9": "0085f2b24a84ff849c48aca4", "generic/5/10": "100a" + b"user-agent".hex() + "06" + b"h2spec".hex(),
    "generic/5/11": "1087b505b161cc5a93849c48aca4", "generic/5/12": "1085f2b24a84ff849c48aca4",
    "generic/5/13": "1085f2b24a84ff849c48aca4",
}
for _id, _hex in _HPACK_FIELDS.items():
    def _check(extra: bytes = bytes.fromhex(_hex)) -> None:
        p = Peer()
        p.send(p.headers(1, p.block(REQ) + extra))
        p.responds()
    case(_id)(_check)


@case("generic/5/14")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, bytes.fromhex("3f61") + p.block(REQ)))
    p.responds()


@case("generic/5/15")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, bytes.fromhex("3f613fe11f") + p.block(REQ)))
    p.responds()


# ====================================================================== http2/3-5

case("http2/3.5/1")(preface_answered_with_settings)


@case("http2/3.5/2")
def _() -> None:
    p = Peer(handshake=False)
    p.send(b"INVALID CONNECTION PREFACE\r\n\r\n")
    p.connection_error(P)


@case("http2/4.1/1")
def _() -> None:
    p = Peer()
    p.send(frame(0x16, 0, 0, ZEROS), ping())
    p.ping_ack()


@case("http2/4.1/2")
def _() -> None:
    p = Peer()
    p.send(frame(h2.PING, 0x16, 0, ZEROS))
    p.ping_ack()


@case("http2/4.1/3")
def _() -> None:
    p = Peer()
    p.send(frame(h2.PING, 0x16, 0, ZEROS)[:5] + b"\x80\0\0\0" + ZEROS)  # the reserved bit of the stream id set
    p.ping_ack()


@case("http2/4.2/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), data(1, b"x" * 16384))
    p.responds()


@case("http2/4.2/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), data(1, b"x" * 16385))
    p.connection_error(FS)  # h2spec takes a stream error too; every frame past our size is one here


@case("http2/4.2/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, [*REQ, *[(f"x-dummy{i}", "x" * 4000) for i in range(5)]]))
    p.connection_error(FS)


@case("http2/4.3/1")
def _() -> None:
    p = Peer()
    p.send(frame(h2.HEADERS, h2.END_STREAM | h2.END_HEADERS, 1, b"\x40"))
    p.connection_error(COMP)


for _id in ("http2/4.3/2", "http2/6.2/1"):
    def _check() -> None:
        p = Peer()
        p.send(p.headers(1, end_stream=False, end_headers=False), priority(1), p.continuation(1, [DUMMY]))
        p.connection_error(P)
    case(_id)(_check)

for _id in ("http2/4.3/3", "http2/6.2/2"):
    def _check() -> None:
        p = Peer()
        p.send(p.headers(1, end_stream=False, end_headers=False), p.headers(3), p.continuation(1, [DUMMY]))
        p.connection_error(P)
    case(_id)(_check)


@case("http2/5.1/1")
def _() -> None:
    p = Peer()
    p.send(data(1))
    p.connection_error(P)


for _id in ("http2/5.1/2", "http2/6.4/2"):
    def _check() -> None:
        p = Peer()
        p.send(rst(1))
        p.connection_error(P)
    case(_id)(_check)


@case("http2/5.1/3")
def _() -> None:
    p = Peer()
    p.send(window_update(1, 100))
    p.connection_error(P)


@case("http2/5.1/4")
def _() -> None:
    p = Peer()
    p.send(p.continuation(1, REQ))
    p.connection_error(P)


@case("http2/5.1/5")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, GRPC_REQ), data(1))  # half-closed (remote): the call is not answered yet
    p.stream_error(1, SC)


@case("http2/5.1/6")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, GRPC_REQ), p.headers(1, GRPC_REQ))
    p.stream_error(1, SC)


@case("http2/5.1/7")
def _() -> None:
    p = Peer()
    block = p.block(GRPC_REQ)
    p.send(p.headers(1, block), p.continuation(1, block))
    p.connection_error(P)  # no header block is open: h2spec takes STREAM_CLOSED or PROTOCOL_ERROR


@case("http2/5.1/8")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_stream=False), rst(1), data(1))
    p.stream_error(1, SC)


@case("http2/5.1/9")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_stream=False), rst(1), p.headers(1))
    p.stream_error(1, SC)


@case("http2/5.1/10")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_stream=False), rst(1), p.continuation(1, [DUMMY]))
    p.connection_error(P)


@case("http2/5.1/11")
def _() -> None:
    p = Peer()
    p.send(p.headers(1))
    p.stream_closed()
    p.send(data(1))
    p.connection_error(SC)


@case("http2/5.1/12")
def _() -> None:
    p = Peer()
    again = p.headers(1)
    p.send(again)
    p.stream_closed()
    p.send(again)
    p.connection_error(SC)


@case("http2/5.1/13")
def _() -> None:
    p = Peer()
    p.send(p.headers(1))
    p.stream_closed()
    p.send(p.continuation(1, [DUMMY]))
    p.connection_error(P)


@case("http2/5.1.1/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(2))
    p.connection_error(P)


@case("http2/5.1.1/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(5), p.headers(3))
    p.connection_error(P)


@case("http2/5.1.2/1")
def _() -> None:
    p = Peer()
    block = p.block(GRPC_REQ)  # calls the test leaves unanswered: each stream stays half-closed (remote)
    p.send(settings((IWS, 0)), *[p.headers(2 * i + 1, block) for i in range(STREAMS_MAX + 1)])
    assert sum(isinstance(e, CallOpened) for e in p.events) == STREAMS_MAX
    p.stream_error(2 * STREAMS_MAX + 1, h2.REFUSED_STREAM)


@case("http2/5.3.1/1")
def _() -> None:
    p = Peer()
    p.send(frame(h2.HEADERS, h2.END_STREAM | h2.END_HEADERS | h2.PRIORITY_FLAG, 1, b"\0\0\0\x01\xff" + p.block(REQ)))
    p.stream_error(1, P)


@case("http2/5.3.1/2")
def _() -> None:
    p = Peer()
    p.send(priority(1, depends=1))
    p.connection_error(P)  # an idle stream cannot be reset (§6.4), so the connection: h2spec takes either


@case("http2/5.4.1/1")
def _() -> None:
    p = Peer()
    p.send(frame(h2.PING, 0, 3, ZEROS))
    p.connection_error(P)  # and closed: the driver closes the socket once the GOAWAY is sent


@case("http2/5.4.1/2")
def _() -> None:
    p = Peer()
    p.send(frame(h2.PING, 0, 3, ZEROS))
    assert p.of(h2.GOAWAY) and p.conn.closed


@case("http2/5.5/1")
def _() -> None:
    p = Peer()
    p.send(frame(0x16, 0, 0, ZEROS), ping())
    p.ping_ack()


@case("http2/5.5/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_headers=False), frame(0x16, 0, 0, ZEROS))
    p.connection_error(P)


# ====================================================================== http2/6

@case("http2/6.1/1")
def _() -> None:
    p = Peer()
    p.send(data(0))
    p.connection_error(P)


@case("http2/6.1/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post()), data(1))  # answered (415) once it ended: the stream is closed
    p.connection_error(SC)


@case("http2/6.1/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(("content-length", "4")), end_stream=False),
           frame(h2.DATA, h2.END_STREAM | h2.PADDED, 1, b"\x06Test"))
    p.connection_error(P)


@case("http2/6.2/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(0))
    p.connection_error(P)


@case("http2/6.2/4")
def _() -> None:
    p = Peer()
    block = p.block(REQ)
    p.send(frame(h2.HEADERS, h2.END_STREAM | h2.END_HEADERS | h2.PADDED, 1, bytes((len(block) + 2,)) + block))
    p.connection_error(P)


@case("http2/6.3/1")
def _() -> None:
    p = Peer()
    p.send(priority(0))
    p.connection_error(P)


@case("http2/6.3/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1), frame(h2.PRIORITY, 0, 1, b"\x80\0\0\x01"))
    p.stream_error(1, FS)


@case("http2/6.4/1")
def _() -> None:
    p = Peer()
    p.send(rst(0))
    p.connection_error(P)


@case("http2/6.4/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1), frame(h2.RST_STREAM, 0, 1, b"\0\0\0"))
    p.connection_error(FS)


@case("http2/6.5/1")
def _() -> None:
    p = Peer()
    p.send(frame(h2.SETTINGS, h2.ACK, 0, b"\0"))
    p.connection_error(FS)


@case("http2/6.5/2")
def _() -> None:
    p = Peer()
    p.send(frame(h2.SETTINGS, 0, 1, bytes.fromhex("000300000064")))
    p.connection_error(P)


@case("http2/6.5/3")
def _() -> None:
    p = Peer()
    p.send(frame(h2.SETTINGS, 0, 0, b"\0\x03\0"))
    p.connection_error(FS)


for _id, _pair, _code in (("http2/6.5.2/1", (PUSH, 2), P), ("http2/6.5.2/2", (IWS, 1 << 31), FC),
                          ("http2/6.5.2/3", (MFS, 16383), P), ("http2/6.5.2/4", (MFS, 1 << 24), P),
                          ("http2/6.9.2/3", (IWS, 1 << 31), FC)):
    def _check(pair: tuple[int, int] = _pair, code: int = _code) -> None:
        p = Peer()
        p.send(settings(pair))
        p.connection_error(code)
    case(_id)(_check)


@case("http2/6.5.2/5")
def _() -> None:
    p = Peer()
    p.send(settings((0xFF, 1)), ping())
    p.ping_ack()


@case("http2/6.5.3/1")
def _() -> None:
    p = Peer()
    p.send(settings((IWS, 100), (IWS, 1)))  # applied in order: 1 is the last word
    p.settings_ack()
    p.send(p.headers(1, GRPC_REQ))
    p.answer(1, b"answer")
    p.first_data_length(1)


@case("http2/6.5.3/2")
def _() -> None:
    p = Peer()
    p.send(settings((PUSH, 0)))
    p.settings_ack()


@case("http2/6.7/1")
def _() -> None:
    p = Peer()
    p.send(ping(H2SPEC))
    p.ping_ack(H2SPEC)


@case("http2/6.7/2")
def _() -> None:
    p = Peer()
    p.send(ping(b"invalid\0", ack=True), ping(H2SPEC))
    p.ping_ack(H2SPEC)


@case("http2/6.7/3")
def _() -> None:
    p = Peer()
    p.send(frame(h2.PING, 0, 1, ZEROS))
    p.connection_error(P)


@case("http2/6.7/4")
def _() -> None:
    p = Peer()
    p.send(frame(h2.PING, 0, 0, b"\0" * 6))
    p.connection_error(FS)


@case("http2/6.8/1")
def _() -> None:
    p = Peer()
    p.send(frame(h2.GOAWAY, 0, 1, b"\0" * 8))
    p.connection_error(P)


@case("http2/6.9/1")
def _() -> None:
    p = Peer()
    p.send(window_update(0, 0))
    p.connection_error(P)


@case("http2/6.9/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_stream=False), window_update(1, 0))
    p.stream_error(1, P)


@case("http2/6.9/3")
def _() -> None:
    p = Peer()
    p.send(frame(h2.WINDOW_UPDATE, 0, 0, b"\0\0\x01"))
    p.connection_error(FS)


@case("http2/6.9.1/1")
def _() -> None:
    p = Peer()
    p.send(settings((IWS, 1)))
    p.settings_ack()
    p.send(p.headers(1, GRPC_REQ))
    p.answer(1, b"answer")
    p.first_data_length(1)


@case("http2/6.9.1/2")
def _() -> None:
    p = Peer()
    p.send(window_update(0, (1 << 31) - 1), window_update(0, (1 << 31) - 1))
    p.connection_error(FC)


@case("http2/6.9.1/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_stream=False), window_update(1, (1 << 31) - 1), window_update(1, (1 << 31) - 1))
    first = p.of(h2.RST_STREAM)[0]
    assert (first.stream, first.code) == (1, FC)
    p.stream_error(1, FC)


@case("http2/6.9.2/1")
def _() -> None:
    p = Peer()
    p.send(settings((IWS, 0)))
    p.settings_ack()
    p.send(p.headers(1, GRPC_REQ))
    p.answer(1, b"answer")
    assert not p.of(h2.DATA)
    p.send(settings((IWS, 1)))  # every open stream's window moves by the change
    p.first_data_length(1)


@case("http2/6.9.2/2")
def _() -> None:
    p = Peer()
    p.send(settings((IWS, 3)))
    p.settings_ack()
    p.send(p.headers(1, GRPC_REQ))
    p.answer(1, b"answer")
    p.first_data_length(3)
    p.received.clear()
    p.send(settings((IWS, 2)))  # the window is now -1 ...
    assert not p.of(h2.DATA)
    p.send(window_update(1, 2))  # ... and 1
    p.first_data_length(1)


@case("http2/6.10/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_headers=False), p.continuation(1, [DUMMY], end_headers=False), p.continuation(1, [DUMMY]))
    p.responds()


@case("http2/6.10/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False, end_headers=False), p.continuation(1, [DUMMY], end_headers=False),
           data(1))
    p.connection_error(P)


@case("http2/6.10/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_headers=False), p.continuation(0, [DUMMY]))
    p.connection_error(P)


@case("http2/6.10/4")
def _() -> None:
    p = Peer()
    p.send(p.headers(1), p.continuation(1, [DUMMY]))
    p.connection_error(P)


@case("http2/6.10/5")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, end_headers=False), p.continuation(1, [DUMMY]), p.continuation(1, [DUMMY]))
    p.connection_error(P)


@case("http2/6.10/6")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False, end_headers=False), data(1),
           p.continuation(1, [DUMMY], end_headers=False), p.continuation(0, [DUMMY]))
    p.connection_error(P)


# ====================================================================== http2/7-8

@case("http2/7/1")
def _() -> None:
    p = Peer()
    p.send(goaway(code=0xFF), ping(H2SPEC))
    p.ping_ack(H2SPEC)


@case("http2/7/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), rst(1, 0xFF), ping())
    p.ping_ack()


@case("http2/8.1/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), data(1, end=False), p.headers(1, [("x-test", "ok")], end_stream=False))
    p.stream_error(1, P)


_MALFORMED = {  # h2spec's request fields for each malformed-request case
    "http2/8.1.2/1": [*REQ, ("X-TEST", "ok")],
    "http2/8.1.2.1/1": [*REQ, (":test", "ok")],
    "http2/8.1.2.1/2": [*REQ, (":status", "200")],
    "http2/8.1.2.1/4": [("x-test", "ok"), *REQ],
    "http2/8.1.2.2/1": [*REQ, ("connection", "keep-alive")],
    "http2/8.1.2.2/2": [*REQ, ("trailers", "test"), ("te", "trailers, deflate")],
    "http2/8.1.2.3/1": [REQ[0], REQ[1], (":path", ""), REQ[3]],
    "http2/8.1.2.3/2": [REQ[2], REQ[3]],
    "http2/8.1.2.3/3": [REQ[0], REQ[2], REQ[3]],
    "http2/8.1.2.3/4": [REQ[0], REQ[1], REQ[3]],
    "http2/8.1.2.3/5": [*REQ, (":method", "GET")],
    "http2/8.1.2.3/6": [*REQ, (":scheme", "http")],
    "http2/8.1.2.3/7": [*REQ, (":path", "/")],
}
for _id, _fields in _MALFORMED.items():
    def _check(fields: list[tuple[str, str]] = _fields) -> None:
        p = Peer()
        p.send(p.headers(1, fields))
        p.stream_error(1, P)
        assert not p.events  # no call was made of it
    case(_id)(_check)


@case("http2/8.1.2.1/3")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(), end_stream=False), data(1, end=False), p.headers(1, [(":method", "POST")], end_stream=False))
    p.stream_error(1, P)


@case("http2/8.1.2.6/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(("content-length", "1")), end_stream=False), data(1))
    p.stream_error(1, P)


@case("http2/8.1.2.6/2")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, post(("content-length", "1")), end_stream=False), data(1, end=False), data(1))
    p.stream_error(1, P)


@case("http2/8.2/1")
def _() -> None:
    p = Peer()
    p.send(frame(h2.PUSH_PROMISE, h2.END_HEADERS, 1, b"\0\0\0\x03" + p.block(REQ)))
    p.connection_error(P)


# ====================================================================== hpack

_BAD_BLOCKS = {"hpack/2.3.3/1": "c6", "hpack/2.3.3/2": "7f0700", "hpack/4.2/1": "21",
               "hpack/5.2/1": "0085f2b24a84ff84 49509fff", "hpack/5.2/2": "0085f2b24a84ff83 495090",
               "hpack/5.2/3": "0085f2b24a84ff87 4951fffffffa7f", "hpack/6.1/1": "80"}
for _id, _hex in _BAD_BLOCKS.items():
    def _check(extra: bytes = bytes.fromhex(_hex.replace(" ", ""))) -> None:
        p = Peer()
        p.send(p.headers(1, p.block(REQ) + extra))
        p.connection_error(COMP)
    case(_id)(_check)


@case("hpack/6.3/1")
def _() -> None:
    p = Peer()
    p.send(p.headers(1, bytes.fromhex("3fe21f") + p.block(REQ)))  # a table size of 4097, past ours
    p.connection_error(COMP)


# ====================================================================== the table

@pytest.mark.parametrize("case_id", sorted(CASES, key=lambda c: [int(x) if x.isdigit() else x
                                                                  for x in re.split(r"[/.]", c)]))
def test_h2spec(case_id: str) -> None:
    CASES[case_id]()


H2SPEC_GROUPS = {  # every group of h2spec 2.0.0's generic, http2 and hpack sections, and its cases
    "generic/1": 1, "generic/2": 5, "generic/3.1": 3, "generic/3.2": 3, "generic/3.3": 5, "generic/3.4": 1,
    "generic/3.5": 1, "generic/3.7": 1, "generic/3.8": 1, "generic/3.9": 2, "generic/3.10": 2, "generic/4": 4,
    "generic/5": 15, "http2/3.5": 2, "http2/4.1": 3, "http2/4.2": 3, "http2/4.3": 3, "http2/5.1": 13,
    "http2/5.1.1": 2, "http2/5.1.2": 1, "http2/5.3.1": 2, "http2/5.4.1": 2, "http2/5.5": 2, "http2/6.1": 3,
    "http2/6.2": 4, "http2/6.3": 2, "http2/6.4": 3, "http2/6.5": 3, "http2/6.5.2": 5, "http2/6.5.3": 2,
    "http2/6.7": 4, "http2/6.8": 1, "http2/6.9": 3, "http2/6.9.1": 3, "http2/6.9.2": 3, "http2/6.10": 6,
    "http2/7": 2, "http2/8.1": 1, "http2/8.1.2": 1, "http2/8.1.2.1": 4, "http2/8.1.2.2": 2, "http2/8.1.2.3": 7,
    "http2/8.1.2.6": 2, "http2/8.2": 1, "hpack/2.3.3": 2, "hpack/4.2": 1, "hpack/5.2": 3, "hpack/6.1": 1,
    "hpack/6.3": 1,
}


def test_every_h2spec_case_has_a_test_and_docs_list_them() -> None:
    wanted = {f"{group}/{n}" for group, count in H2SPEC_GROUPS.items() for n in range(1, count + 1)}
    assert sum(H2SPEC_GROUPS.values()) == 147
    assert set(CASES) | set(NOT_APPLICABLE) == wanted
    doc = (Path(__file__).resolve().parents[2] / "docs" / "grpc.md").read_text()
    listed = set(re.findall(r"^\| `((?:generic|http2|hpack)/[\d.]+/\d+)` \|", doc, re.MULTILINE))
    assert listed == wanted
