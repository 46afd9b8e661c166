"""A gRPC call as the door's HTTP/2 connection sees it: the events a client's frames make, the
record of one stream, the status codes and the ``grpc-timeout`` header (gRPC over HTTP/2:
``[compressed:8][length:32][message]`` in DATA, the status in trailers)."""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType

from formats import http2 as h2
from formats.hpack import encode_literal

GRPC_OK, GRPC_CANCELLED, GRPC_UNKNOWN, GRPC_DEADLINE_EXCEEDED, GRPC_PERMISSION_DENIED = 0, 1, 2, 4, 7
GRPC_RESOURCE_EXHAUSTED, GRPC_UNIMPLEMENTED, GRPC_INTERNAL, GRPC_UNAVAILABLE, GRPC_UNAUTHENTICATED = 8, 12, 13, 14, 16
MESSAGE_TEXT_MAX = 1000  # of a grpc-message
_TIMEOUT_UNITS = MappingProxyType({"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9})


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


@dataclass(slots=True)
class CallStream:
    """One open stream: what it received and what its answer still has to send."""

    id: int
    send_window: int
    encoding: str = "identity"
    announced: bool = True  # the driver knows the call (a CallOpened went out)
    refusal: bytes | None = None  # a request that is not gRPC: its answer, sent once it has ended
    content_length: int = -1  # what the request declared (-1: nothing) ...
    received: int = 0  # ... and what its DATA carried (padding aside)
    inbox: bytearray = field(default_factory=bytearray)
    outstanding: int = 0  # DATA octets received and not granted again (the stream's window)
    credit: int = 0  # of those, octets taken (consumed): granted again in a batch
    untaken: int = 0  # DATA octets received and not given back yet (the connection gets them at the end)
    advanced: int = 0  # octets of a large message granted before they were taken
    reserved: int = 0  # a large message's length, held in the door's budget while it arrives
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


def status_block(code: int, message: str) -> bytes:
    """The trailers' fields: grpc-status, and grpc-message when there is one."""
    block = encode_literal(b"grpc-status", str(code).encode())
    if message:
        block += encode_literal(b"grpc-message", h2.percent_encode(message[:MESSAGE_TEXT_MAX]))
    return block


def take_messages(stream_id: int, inbox: bytearray, message_max: int,
                  encoding: str) -> tuple[list[CallMessage], tuple[int, str] | None]:
    """The complete gRPC messages at the head of a stream's ``inbox``, taken out of it (each
    decompressed when flagged, with the octets it took); and, when one breaks a bound, the
    status to refuse the call with (None otherwise). Sizes are checked before memory is
    committed: the length prefix against ``message_max``, inflation bounded as it goes."""
    out: list[CallMessage] = []
    while len(inbox) >= h2.GRPC_PREFIX_SIZE:
        compressed, length = h2.GRPC_PREFIX.unpack_from(inbox)
        if length > message_max:
            return out, (GRPC_RESOURCE_EXHAUSTED, f"a message of {length} bytes, over {message_max}")
        if len(inbox) < h2.GRPC_PREFIX_SIZE + length:
            break
        message = bytes(inbox[h2.GRPC_PREFIX_SIZE:h2.GRPC_PREFIX_SIZE + length])
        del inbox[:h2.GRPC_PREFIX_SIZE + length]
        if compressed:
            wbits = {"gzip": 31, "deflate": 15}.get(encoding)
            if wbits is None:
                return out, (GRPC_UNIMPLEMENTED, f"message encoding {encoding!r} is not served")
            inflater = zlib.decompressobj(wbits)
            try:
                message = inflater.decompress(message, message_max + 1)
            except zlib.error as exc:
                return out, (GRPC_INTERNAL, f"a compressed message does not inflate: {exc}")
            if len(message) > message_max or inflater.unconsumed_tail:
                return out, (GRPC_RESOURCE_EXHAUSTED, f"a message inflating past {message_max} bytes")
        out.append(CallMessage(stream_id, message, h2.GRPC_PREFIX_SIZE + length))
    return out, None
