"""HTTP/2 frames (RFC 9113) and gRPC's message framing on top of them.

A connection opens with the client's preface (``PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n``) and
then carries frames:

```
 0               1               2               3
 +---------------+---------------+---------------+---------------+
 |                 length (24)                   |   type (8)    |
 +---------------+---------------+---------------+---------------+
 |   flags (8)   |R|                stream id (31)               |
 +---------------+-----------------------------------------------+
 |                    payload (length octets)                    |
```

DATA and HEADERS may be padded (flag 0x8: a pad-length octet first, that many zeros last);
HEADERS may carry priority (flag 0x20: 5 octets first). A header block too big for one frame
continues in CONTINUATION frames until one has END_HEADERS. SETTINGS is 6-octet pairs
``[id:16][value:32]``; WINDOW_UPDATE ``[R|increment:31]``; RST_STREAM ``[error:32]``; GOAWAY
``[R|last stream:31][error:32][debug...]``; PING 8 opaque octets.

A gRPC message inside a stream's DATA: ``[compressed:8][length:32][message]``; the call's
status travels in trailers (a last HEADERS with END_STREAM): ``grpc-status``, ``grpc-message``
(percent-encoded).
"""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER = struct.Struct(">HBBBI")  # length split as 16+8 bits, type, flags, stream id
FRAME_HEADER_SIZE = 9
GRPC_PREFIX = struct.Struct(">BI")
GRPC_PREFIX_SIZE = 5

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)

END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

# error codes (RST_STREAM, GOAWAY)
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB

DEFAULT_WINDOW = 65_535
DEFAULT_FRAME_SIZE = 16_384
FRAME_SIZE_LIMIT = (1 << 24) - 1
WINDOW_MAX = (1 << 31) - 1


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: the 9-octet header and ``payload``."""
    n = len(payload)
    return FRAME_HEADER.pack(n >> 8, n & 0xFF, kind, flags, stream_id) + payload


def parse_header(buffer: bytes | bytearray, pos: int = 0) -> tuple[int, int, int, int]:
    """(length, type, flags, stream id) of the frame header at ``pos``."""
    high, low, kind, flags, stream_id = FRAME_HEADER.unpack_from(buffer, pos)
    return (high << 8) | low, kind, flags, stream_id & 0x7FFF_FFFF


def settings(pairs: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs.items()))


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    return [struct.unpack_from(">HI", payload, i) for i in range(0, len(payload) - len(payload) % 6, 6)]


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment))


def rst_stream(stream_id: int, error: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, struct.pack(">I", error))


def goaway(last_stream_id: int, error: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream_id, error) + debug)


def unpad(flags: int, payload: bytes) -> bytes | None:
    """A DATA or HEADERS payload without its padding; None when the padding does not fit."""
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        return None
    return payload[1:len(payload) - payload[0]]


def grpc_message(message: bytes) -> bytes:
    """``message`` as one uncompressed gRPC length-prefixed message."""
    return GRPC_PREFIX.pack(0, len(message)) + message


def percent_encode(text: str) -> bytes:
    """grpc-message's encoding: printable ASCII but '%' as is, every other octet as %XX."""
    out = bytearray()
    for octet in text.encode():
        out += bytes((octet,)) if 0x20 <= octet <= 0x7E and octet != 0x25 else b"%%%02X" % octet
    return bytes(out)
