"""A second, deliberately simple encoder of the RocketMQ record and DLedger entry layouts, written
from the byte tables in the spec rather than from formats/, so tests can cross-check the codec."""

from __future__ import annotations

import socket
import struct
import zlib


def record_bytes(
    *, topic: str, body: bytes, props: str, queue_id: int = 0, flag: int = 0, queue_offset: int = 0,
    phys_offset: int = 0, sysflag: int = 0, born_ts: int = 0, born: tuple[str, int] = ("127.0.0.1", 0),
    store_ts: int = 0, store: tuple[str, int] = ("127.0.0.1", 0), reconsume: int = 0,
) -> bytes:
    """A v1 record with IPv4 hosts, field by field."""
    topic_b = topic.encode()
    props_b = props.encode()
    parts = [
        struct.pack(">i", -626843481),                      # MAGICCODE
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),   # BODYCRC
        struct.pack(">i", queue_id),
        struct.pack(">i", flag),
        struct.pack(">q", queue_offset),
        struct.pack(">q", phys_offset),
        struct.pack(">i", sysflag),
        struct.pack(">q", born_ts),
        socket.inet_aton(born[0]) + struct.pack(">i", born[1]),
        struct.pack(">q", store_ts),
        socket.inet_aton(store[0]) + struct.pack(">i", store[1]),
        struct.pack(">i", reconsume),
        struct.pack(">q", 0),                               # prepared transaction offset
        struct.pack(">i", len(body)) + body,
        struct.pack(">b", len(topic_b)) + topic_b,
        struct.pack(">h", len(props_b)) + props_b,
    ]
    payload = b"".join(parts)
    return struct.pack(">i", 4 + len(payload)) + payload


def dledger_entry(index: int, term: int, pos: int, body: bytes) -> bytes:
    """A DLedger NORMAL entry: 48-byte header then the body."""
    return struct.pack(">iiqqqiiii", 1, 48 + len(body), index, term, pos, 0, 0, 0, len(body)) + body


def blank(remaining: int) -> bytes:
    return struct.pack(">iI", remaining, 0xCBD43194)


def dledger_padding(remaining: int) -> bytes:
    return struct.pack(">ii", -1, remaining)
