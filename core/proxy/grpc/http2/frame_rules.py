"""What RFC 9113 §4-§6 says of each frame a server receives, as one table: the stream identifier
it must carry, the lengths it may have, and what it means in each stream state.

An outcome is :data:`ACCEPT`, :data:`IGNORE`, or an error: ``conn(code)`` ends the connection
(GOAWAY with ``code``), ``stream(code)`` ends one stream (RST_STREAM with ``code``).

| type (id) | stream id | length | idle | open | half-closed (remote) | closed | ended | reset sent | reset received |
|---|---|---|---|---|---|---|---|---|---|
| DATA (0) | not 0 | pad < length | conn PROTOCOL | accept | stream STREAM_CLOSED | stream STREAM_CLOSED | conn STREAM_CLOSED | ignore | stream STREAM_CLOSED |
| HEADERS (1) | not 0, odd | pad (+5 priority) <= length | opens | trailers | stream STREAM_CLOSED | conn PROTOCOL | conn STREAM_CLOSED | ignore | stream STREAM_CLOSED |
| PRIORITY (2) | not 0 | 5, else stream FRAME_SIZE | accept | accept | accept | accept | accept | accept | accept |
| RST_STREAM (3) | not 0 | 4, else conn FRAME_SIZE | conn PROTOCOL | accept | accept | ignore | ignore | ignore | ignore |
| SETTINGS (4) | 0 | multiple of 6; 0 with ACK | - | | | | | | |
| PUSH_PROMISE (5) | - | - | conn PROTOCOL always (a client never pushes) | | | | | | |
| PING (6) | 0 | 8 | - | | | | | | |
| GOAWAY (7) | 0 | >= 8 | - | | | | | | |
| WINDOW_UPDATE (8) | any | 4 | conn PROTOCOL | accept | accept | ignore | ignore | ignore | stream STREAM_CLOSED |
| CONTINUATION (9) | the open header block's | any | only inside a header block: anything else is conn PROTOCOL | | | | | | |
| unknown | any | any | ignored (§5.5), but not inside a header block | | | | | | |

A stream identifier that breaks its type's rule is a connection PROTOCOL_ERROR; a length that
does, FRAME_SIZE_ERROR (a stream error only for PRIORITY, §6.3). "Ended" is a stream both sides
ended (DATA or HEADERS there is the connection error §5.1 allows); "reset sent" one this side
reset, whose late frames the RFC says to ignore; "reset received" one the client reset, after
which any frame but PRIORITY is a stream error; "closed" one skipped or forgotten, where a
HEADERS reuses an identifier (§5.1.1) and a DATA is answered as on a reset stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from formats import http2 as h2

ACCEPT = 0
IGNORE = 1
_CONN = 0x100
_STREAM = 0x200


def conn(code: int) -> int:
    """The outcome "connection error ``code``"."""
    return _CONN | code


def stream(code: int) -> int:
    """The outcome "stream error ``code``"."""
    return _STREAM | code


def is_connection_error(outcome: int) -> bool:
    return outcome & _CONN != 0


def is_stream_error(outcome: int) -> bool:
    return outcome & _STREAM != 0


def error_code(outcome: int) -> int:
    return outcome & 0xFF


ZERO, NONZERO, ANY = 0, 1, 2  # the stream identifier a type must carry

# per type: (stream id, exact length or -1, the outcome by state, indexed as stream_states
# numbers them: idle, open, half-closed (remote), closed, ended, reset sent, reset received);
# None for types whose stream is not looked up
_ROW = tuple[int, int, tuple[int, int, int, int, int, int, int] | None]
_P, _SC = h2.PROTOCOL_ERROR, h2.STREAM_CLOSED
FRAME_RULES: Mapping[int, _ROW] = MappingProxyType({
    h2.DATA: (NONZERO, -1, (conn(_P), ACCEPT, stream(_SC), stream(_SC), conn(_SC), IGNORE, stream(_SC))),
    h2.HEADERS: (NONZERO, -1, (ACCEPT, ACCEPT, stream(_SC), conn(_P), conn(_SC), IGNORE, stream(_SC))),
    h2.PRIORITY: (NONZERO, 5, (ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT)),
    h2.RST_STREAM: (NONZERO, 4, (conn(_P), ACCEPT, ACCEPT, IGNORE, IGNORE, IGNORE, IGNORE)),
    h2.SETTINGS: (ZERO, -1, None),
    h2.PUSH_PROMISE: (ANY, -1, None),
    h2.PING: (ZERO, 8, None),
    h2.GOAWAY: (ZERO, -1, None),
    h2.WINDOW_UPDATE: (ANY, 4, (conn(_P), ACCEPT, ACCEPT, IGNORE, IGNORE, IGNORE, stream(_SC))),
    h2.CONTINUATION: (NONZERO, -1, None),
})
FRAME_NAMES = ("DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING", "GOAWAY",
               "WINDOW_UPDATE", "CONTINUATION")


def frame_name(kind: int) -> str:
    return FRAME_NAMES[kind] if kind < len(FRAME_NAMES) else f"frame type {kind:#x}"


def header_problem(kind: int, flags: int, stream_id: int, length: int) -> tuple[int, str] | None:
    """The outcome of a frame whose identifier or length breaks its type's rule, and why;
    None when both are as the type wants (or the type is unknown: ignored)."""
    rule = FRAME_RULES.get(kind)
    if rule is None:
        return None
    wanted, exact, _ = rule
    name = FRAME_NAMES[kind]
    if kind == h2.PUSH_PROMISE:
        return conn(h2.PROTOCOL_ERROR), "PUSH_PROMISE from a client (§8.4)"
    if wanted == ZERO and stream_id:
        return conn(h2.PROTOCOL_ERROR), f"{name} on stream {stream_id}, not 0"
    if wanted == NONZERO and not stream_id:
        return conn(h2.PROTOCOL_ERROR), f"{name} on stream 0"
    if exact >= 0 and length != exact:
        scope = stream if kind == h2.PRIORITY else conn
        return scope(h2.FRAME_SIZE_ERROR), f"{name} of {length} octets, not {exact}"
    if kind == h2.SETTINGS:
        if flags & h2.ACK and length:
            return conn(h2.FRAME_SIZE_ERROR), f"a SETTINGS ACK with {length} octets of payload"
        if length % 6:
            return conn(h2.FRAME_SIZE_ERROR), f"SETTINGS of {length} octets, not a multiple of 6"
    if kind == h2.GOAWAY and length < 8:
        return conn(h2.FRAME_SIZE_ERROR), f"GOAWAY of {length} octets, under 8"
    return None


def state_outcome(kind: int, state: int) -> int:
    """What a frame of ``kind`` that names a stream means in ``state``."""
    rule = FRAME_RULES[kind][2]
    assert rule is not None, kind
    return rule[state]


def settings_problem(key: int, value: int) -> tuple[int, str] | None:
    """A SETTINGS value the RFC forbids (§6.5.2), as an outcome and why; unknown keys are
    ignored (§6.5.2: "MUST ignore")."""
    if key == h2.SETTINGS_ENABLE_PUSH and value > 1:
        return conn(h2.PROTOCOL_ERROR), f"SETTINGS_ENABLE_PUSH {value}, not 0 or 1"
    if key == h2.SETTINGS_INITIAL_WINDOW_SIZE and value > h2.WINDOW_MAX:
        return conn(h2.FLOW_CONTROL_ERROR), f"SETTINGS_INITIAL_WINDOW_SIZE {value}, past 2^31-1"
    if key == h2.SETTINGS_MAX_FRAME_SIZE and not h2.DEFAULT_FRAME_SIZE <= value <= h2.FRAME_SIZE_LIMIT:
        return conn(h2.PROTOCOL_ERROR), f"SETTINGS_MAX_FRAME_SIZE {value}, outside 2^14..2^24-1"
    return None
