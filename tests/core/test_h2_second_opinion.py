"""A second opinion on the gRPC door's HTTP/2: python-hyper's ``h2`` (4.x) as a server, fed the
very bytes the door is fed. Hypothesis draws client frame sequences (requests well-formed and
not, trailers, DATA, resets, priorities, window updates, settings, pings, unknown and forbidden
frames, on streams new, open, closed and never used); after each frame both sides must agree on
whether the connection goes on (and the GOAWAY code when it ends), which streams were reset
(and with which code), and which requests were taken.

Where RFC 9113 is the reference and h2 departs from it, or where a frame breaks two rules and
each side names a different one, the difference is listed in :data:`KNOWN_DIFFERENCES` with the
reason, and the sequence ends there (the two connections are no longer in the same state). Any
other difference fails the test.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import hpack
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import RequestReceived
from h2.exceptions import ProtocolError
from h2.settings import Settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.proxy.grpc.calls import CallOpened
from core.proxy.grpc.connection import (
    CONNECTION_WINDOW,
    HEADER_LIST_MAX,
    STREAM_WINDOW,
    STREAMS_MAX,
    GrpcConnection,
)
from core.proxy.grpc.http2.stream_states import RESET_SENT
from formats import http2 as h2
from tests.core.h2peer import parse

GRPC = [(":method", "POST"), (":scheme", "http"), (":path", "/s/M"), (":authority", "a"),
        ("content-type", "application/grpc"), ("te", "trailers")]
REQUESTS = {  # a request's fields: well-formed, or malformed one way (§8.2-§8.3)
    "grpc": GRPC,
    "upper-case name": [*GRPC, ("X-Up", "1")],
    "pseudo after regular": [*GRPC[1:], GRPC[0]],
    "pseudo twice": [*GRPC, (":path", "/x")],
    "no :method": GRPC[1:],
    "connection field": [*GRPC, ("connection", "close")],
    "te not trailers": [*GRPC[:-1], ("te", "gzip")],
    "empty :path": [GRPC[0], GRPC[1], (":path", ""), *GRPC[3:]],
    "response pseudo": [*GRPC, (":status", "200")],
    "unknown pseudo": [*GRPC, (":foo", "x")],
    "padded value": [*GRPC, ("x-a", " padded")],
    "content-length": [*GRPC, ("content-length", "5")],
    "trailers": [("x-t", "1")],
    "pseudo trailers": [(":method", "POST")],
}
MALFORMED = set(REQUESTS) - {"grpc", "trailers", "content-length"}


@dataclass(frozen=True)
class Step:
    """One frame of the client's, and what it is (for KNOWN_DIFFERENCES and the report)."""

    kind: int
    stream: int
    data: bytes
    what: str = ""
    flags: int = 0


@dataclass
class Outcome:
    goaway: int | None = None
    resets: set[tuple[int, int]] = field(default_factory=set)
    taken: set[int] = field(default_factory=set)


def h2_server() -> H2Connection:
    """h2 as a server that announced what the door announces (taken into force at the ACK)."""
    server = H2Connection(H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=True))
    server.local_settings = Settings(client=False, initial_values={
        h2.SETTINGS_INITIAL_WINDOW_SIZE: STREAM_WINDOW, h2.SETTINGS_MAX_CONCURRENT_STREAMS: STREAMS_MAX,
        h2.SETTINGS_MAX_HEADER_LIST_SIZE: HEADER_LIST_MAX, h2.SETTINGS_ENABLE_PUSH: 0})
    server.initiate_connection()
    server.increment_flow_control_window(CONNECTION_WINDOW - h2.DEFAULT_WINDOW)
    server.data_to_send()
    return server


def ours_step(conn: GrpcConnection, data: bytes) -> Outcome:
    events = conn.receive(data)
    frames = parse(conn.data_to_send())
    return Outcome(next((f.code for f in frames if f.kind == h2.GOAWAY), None),
                   {(f.stream, f.code) for f in frames if f.kind == h2.RST_STREAM and f.code != h2.NO_ERROR},
                   {e.stream_id for e in events if isinstance(e, CallOpened)})


def h2_step(server: H2Connection, data: bytes) -> Outcome:
    try:
        events = server.receive_data(data)
        error = None
    except ProtocolError as exc:
        events, error = [], int(exc.error_code)
    frames = parse(server.data_to_send())
    goaway = error if error is not None else next((f.code for f in frames if f.kind == h2.GOAWAY), None)
    return Outcome(goaway, {(f.stream, f.code) for f in frames if f.kind == h2.RST_STREAM and f.code != h2.NO_ERROR},
                   {e.stream_id for e in events if isinstance(e, RequestReceived)})


# ---------------------------------------------------------------------------------------- known differences

@dataclass(frozen=True)
class Context:
    h2_mid_block: bool  # h2 holds an open header block, waiting for its CONTINUATIONs
    idle: bool  # the step's stream was idle for the door (above every id used, or even)
    reset_by_us: bool  # the door had reset the step's stream
    declared_length: bool  # the step's stream (or its own HEADERS) declared a content-length


Judge = Callable[[Step, Outcome, Outcome, Context], bool]


def _malformed_request(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # §8.1.1: "Malformed requests ... MUST be treated as a stream error of type PROTOCOL_ERROR";
    # h2 ends the whole connection instead
    return (step.kind in (h2.HEADERS, h2.CONTINUATION) and "depends on itself" not in step.what
            and ours.goaway is None and (step.stream, h2.PROTOCOL_ERROR) in ours.resets
            and theirs.goaway == h2.PROTOCOL_ERROR)


def _content_length_unmet(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # DATA that does not add up to the request's content-length: malformed, a stream error
    # (§8.1.1); h2 ends the connection when DATA passes it, and takes a request that declares a
    # length and ends with its HEADERS
    if ours.goaway is not None or (step.stream, h2.PROTOCOL_ERROR) not in ours.resets:
        return False
    if step.kind == h2.DATA:
        return theirs.goaway == h2.PROTOCOL_ERROR
    return step.kind == h2.HEADERS and context.declared_length and not theirs.resets and theirs.goaway is None


def _late_frames_ignored(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # frames on a stream this side reset are ignored (§5.1: the client may have sent them before
    # it saw the reset); h2 resets the stream again, or judges the frame (a malformed HEADERS, an
    # increment of 0)
    return (step.kind in (h2.HEADERS, h2.CONTINUATION, h2.DATA, h2.WINDOW_UPDATE) and context.reset_by_us
            and ours == Outcome()
            and (theirs.goaway is not None or (step.stream, h2.STREAM_CLOSED) in theirs.resets))


def _self_dependency(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # RFC 7540 §5.3.1 (h2spec http2/5.3.1): a stream depending on itself is a stream error; h2
    # ends the connection (so do we for an idle stream, which RST_STREAM may not name)
    return ("depends on itself" in step.what and theirs.goaway == h2.PROTOCOL_ERROR
            and (ours.goaway == h2.PROTOCOL_ERROR or (step.stream, h2.PROTOCOL_ERROR) in ours.resets))


def _priority_length(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # §6.3: a PRIORITY of another length than 5 is a stream error FRAME_SIZE_ERROR; h2's frame
    # parser ends the connection (and when the frame breaks a stream rule too, each names one)
    return (step.kind == h2.PRIORITY and len(step.data) != 14 and theirs.goaway == h2.FRAME_SIZE_ERROR
            and ((step.stream, h2.FRAME_SIZE_ERROR) in ours.resets or ours.goaway is not None))


def _settings_ack_with_payload(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # §6.5: "a SETTINGS frame with the ACK flag set and a length field value other than 0 MUST be
    # treated as a connection error of type FRAME_SIZE_ERROR"; h2 answers PROTOCOL_ERROR
    return (step.kind == h2.SETTINGS and step.flags & h2.ACK and len(step.data) > 9
            and ours.goaway == h2.FRAME_SIZE_ERROR and theirs.goaway == h2.PROTOCOL_ERROR)


def _idle_stream(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # a RST_STREAM or WINDOW_UPDATE on an idle stream is a connection PROTOCOL_ERROR (§5.1): an
    # even one (only the server opens those, and the door opens none), or an odd one above every
    # id the client used; h2 ignores both once the client has opened a stream
    return (step.kind in (h2.RST_STREAM, h2.WINDOW_UPDATE) and step.stream != 0 and context.idle
            and ours.goaway == h2.PROTOCOL_ERROR and theirs.goaway is None)


def _refused_at_the_headers_frame(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # a HEADERS on a stream id that cannot open a stream, whose block goes on in CONTINUATIONs:
    # refused at once here, by h2 when the block is complete (a connection error either way)
    return (step.kind == h2.HEADERS and not step.flags & h2.END_HEADERS and ours.goaway is not None
            and theirs.goaway is None and context.h2_mid_block)


def _continuation_without_block(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # §6.10: a CONTINUATION that follows no open header block is a connection PROTOCOL_ERROR; h2
    # looks at its stream first and may answer STREAM_CLOSED (h2spec http2/5.1/13 takes either)
    return (step.kind == h2.CONTINUATION and ours.goaway == h2.PROTOCOL_ERROR
            and theirs.goaway == h2.STREAM_CLOSED)


def _zero_window_update_on_a_closed_stream(step: Step, ours: Outcome, theirs: Outcome, context: Context) -> bool:
    # §6.9: a WINDOW_UPDATE of 0 is a stream error PROTOCOL_ERROR; on a stream that is closed
    # (skipped, or ended) h2 ends the connection
    return (step.kind == h2.WINDOW_UPDATE and step.data[9:] == b"\0\0\0\0" and ours.goaway is None
            and (step.stream, h2.PROTOCOL_ERROR) in ours.resets and theirs.goaway == h2.PROTOCOL_ERROR)


def headers_n(name: str, *, end_stream: bool = True, depends_on_itself: bool = False, end_headers: bool = True) -> int:
    """The number :func:`build` turns into a HEADERS of request ``name`` with those flags."""
    n = sorted(REQUESTS).index(name) + 14 * end_stream
    n += (28 * 3 + 196) * depends_on_itself
    return n + (0 if end_headers else 392 * 4)


CALL = ("headers", 3, 17)  # stream 3 opened by a well-formed gRPC call (see headers_n)

# name: (the judge, a sequence that meets the difference)
KNOWN_DIFFERENCES: dict[str, tuple[Judge, list[tuple[str, int, int]]]] = {
    "a malformed request: a stream error here (§8.1.1), a connection error in h2":
        (_malformed_request, [("headers", 1, headers_n("upper-case name"))]),
    "DATA not adding up to content-length: a stream error here (§8.1.1); h2 ends the connection when DATA "
    "passes it, and does not count when the request ends with a HEADERS": (_content_length_unmet, [("headers", 1, headers_n("content-length"))]),
    "late frames on a stream this side reset: ignored here (§5.1); h2 resets it again, or ends the "
    "connection for a malformed HEADERS":
        (_late_frames_ignored, [CALL, ("data", 1, 2), ("headers", 1, headers_n("pseudo twice"))]),
    "a stream depending on itself: a stream error here (RFC 7540 §5.3.1), a connection error in h2":
        (_self_dependency, [("headers", 1, headers_n("grpc", depends_on_itself=True))]),
    "PRIORITY of the wrong length: a stream error here (§6.3), a connection error in h2":
        (_priority_length, [CALL, ("priority", 3, 3)]),
    "a SETTINGS ACK with a payload: FRAME_SIZE_ERROR here (§6.5), PROTOCOL_ERROR in h2":
        (_settings_ack_with_payload, [("settings", 0, 15)]),
    "RST_STREAM or WINDOW_UPDATE on an idle stream: an error here (§5.1), ignored by h2":
        (_idle_stream, [CALL, ("rst", 5, 0)]),
    "a HEADERS on an unusable stream id: refused at its frame here, at its block's end by h2":
        (_refused_at_the_headers_frame, [("headers", 2, headers_n("grpc", end_headers=False))]),
    "a CONTINUATION with no header block: PROTOCOL_ERROR here (§6.10), STREAM_CLOSED in h2":
        (_continuation_without_block, [CALL, ("continuation", 1, 0)]),
    "a WINDOW_UPDATE of 0 on a closed stream: a stream error here (§6.9), a connection error in h2":
        (_zero_window_update_on_a_closed_stream, [CALL, ("window", 1, 0)]),
}


# ---------------------------------------------------------------------------------------- the client's frames

KINDS = ["headers"] * 5 + ["continuation", "data", "data", "data", "rst", "rst", "priority", "window", "window",
                           "settings", "ping", "unknown", "push"]
STREAMS = [0, 1, 1, 3, 3, 5, 2, 7]
PAIRS = [[(4, 100)], [(4, 1 << 31)], [(2, 2)], [(5, 100)], [(5, 16384)], [(1, 100)], [(0xFF, 1)], [(4, 0)],
         [(4, (1 << 31) - 1)]]


def build(actions: list[tuple[str, int, int]]) -> list[Step]:
    """The frames ``actions`` describe (each: a kind, a stream, and a number choosing details),
    header blocks coded by one encoder, as a client's would be."""
    encoder = hpack.Encoder()
    pending: bytes | None = None  # the rest of a header block a HEADERS left open
    steps = []
    for kind, stream, n in actions:
        if kind == "headers":  # n: the request, then END_STREAM, a priority, its dependency, END_HEADERS
            name = sorted(REQUESTS)[n % len(REQUESTS)]
            block = encoder.encode([(k.encode(), v.encode()) for k, v in REQUESTS[name]])
            flags = h2.END_STREAM if n // 14 % 2 else 0
            prefix, what = b"", name
            if n // 28 % 7 == 3:
                flags |= h2.PRIORITY_FLAG
                itself = n // 196 % 2 == 1
                prefix = struct.pack(">IB", stream if itself else 0, 16)
                what += ", depends on itself" if itself and stream else ""
            if n // 392 % 5 != 4:
                flags |= h2.END_HEADERS
            else:
                pending, block = block[len(block) // 2:], block[:len(block) // 2]
            steps.append(Step(h2.HEADERS, stream, h2.frame(h2.HEADERS, flags, stream, prefix + block), what, flags))
        elif kind == "continuation":
            block = pending if pending is not None else encoder.encode([(b"x-c", b"1")])
            pending = None
            steps.append(Step(h2.CONTINUATION, stream, h2.frame(h2.CONTINUATION, h2.END_HEADERS, stream, block)))
        elif kind == "data":
            flags = h2.END_STREAM if n & 1 else 0
            payload = b"\0" * (5 * (n % 3))  # whole empty gRPC messages
            if n % 7 == 5:
                flags |= h2.PADDED
                payload = bytes([(0, 2, 200)[n % 3]]) + payload + b"\0\0"
            steps.append(Step(h2.DATA, stream, h2.frame(h2.DATA, flags, stream, payload), flags=flags))
        elif kind == "rst":
            steps.append(Step(h2.RST_STREAM, stream, h2.frame(h2.RST_STREAM, 0, stream, struct.pack(">I", 8)[:4 - (n % 4 == 3)])))
        elif kind == "priority":
            depends = (0, stream, 1)[n % 3]
            payload = struct.pack(">IB", depends, 3)[:5 - (n % 4 == 3)]
            what = "depends on itself" if depends == stream and stream else ""
            steps.append(Step(h2.PRIORITY, stream, h2.frame(h2.PRIORITY, 0, stream, payload), what))
        elif kind == "window":
            increment = (0, 1, 1000, (1 << 31) - 1)[n % 4]
            payload = struct.pack(">I", increment)[:4 - (n % 5 == 4)]
            steps.append(Step(h2.WINDOW_UPDATE, stream, h2.frame(h2.WINDOW_UPDATE, 0, stream, payload)))
        elif kind == "settings":
            ack = n % 5 == 0
            payload = b"".join(struct.pack(">HI", k, v) for k, v in PAIRS[n % len(PAIRS)])
            payload = b"" if ack and n % 3 else payload[:4] if n % 11 == 1 else payload
            flags = h2.ACK if ack else 0
            steps.append(Step(h2.SETTINGS, 0, h2.frame(h2.SETTINGS, flags, 0, payload), flags=flags))
        elif kind == "ping":
            at = 0 if n % 5 else stream
            steps.append(Step(h2.PING, at, h2.frame(h2.PING, 0, at, b"\0" * (8 if n % 4 else 6))))
        elif kind == "unknown":
            steps.append(Step(0x16, stream, h2.frame(0x16, 0, stream, b"\0" * 4)))
        else:
            block = encoder.encode([(b":method", b"GET")])
            steps.append(Step(h2.PUSH_PROMISE, stream, h2.frame(h2.PUSH_PROMISE, h2.END_HEADERS, stream,
                                                               struct.pack(">I", 2) + block)))
    return steps


ACTIONS = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(STREAMS), st.integers(0, 10_000)),
                   min_size=1, max_size=25)
OPENING = h2.PREFACE + h2.settings({}) + h2.frame(h2.SETTINGS, h2.ACK, 0)


def compare(actions: list[tuple[str, int, int]], differences_seen: dict[str, int] | None = None) -> None:
    ours, theirs = GrpcConnection(message_max=1 << 20), h2_server()
    ours.data_to_send()
    assert ours_step(ours, OPENING).goaway is None and h2_step(theirs, OPENING).goaway is None
    for step in build(actions):
        idle = step.stream > ours._last_id or step.stream % 2 == 0
        reset_by_us = not idle and step.stream not in ours._streams and ours._closed_streams.state(step.stream) == RESET_SENT
        open_stream = ours._streams.get(step.stream)
        declared = "content-length" in step.what or (open_stream is not None and open_stream.content_length >= 0)
        a, b = ours_step(ours, step.data), h2_step(theirs, step.data)
        if (a.goaway, a.resets, a.taken) == (b.goaway, b.resets, b.taken):
            if a.goaway is not None:
                return
            continue
        context = Context(theirs.incoming_buffer._headers_buffer != [], idle, reset_by_us, declared)
        known = [name for name, (judge, _) in KNOWN_DIFFERENCES.items() if judge(step, a, b, context)]
        assert known, f"{step.what or step.kind} on stream {step.stream}: ours {a}, h2 {b} (frames {actions})"
        if differences_seen is not None:
            differences_seen[known[0]] = differences_seen.get(known[0], 0) + 1
        return  # the two connections are no longer in the same state


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_the_door_and_h2_agree_on_every_frame_but_the_listed_differences(actions):
    compare(actions)


@pytest.mark.parametrize("name", sorted(KNOWN_DIFFERENCES))
def test_each_listed_difference_happens(name):
    """Each known difference is met by its example (none is listed in vain), and by no other
    judge: the list names each difference once."""
    seen: dict[str, int] = {}
    compare(KNOWN_DIFFERENCES[name][1], seen)
    assert seen == {name: 1}


def test_a_client_keeping_to_the_rfc_meets_no_difference():
    """Well-formed calls, window updates and pings: the door and h2 agree throughout."""
    well_behaved = [("headers", 1, headers_n("grpc")), ("window", 0, 2), ("ping", 0, 1), CALL, ("window", 3, 1)]
    assert build(well_behaved)[0].flags == h2.END_STREAM | h2.END_HEADERS
    seen: dict[str, int] = {}
    compare(well_behaved, seen)
    assert seen == {}
