"""The master-slave HA socket: raw TCP on the master's HA port, no remoting framing.

Slave -> master, whenever it has appended a chunk and at least every 5 s::

    +----------------------+
    | max offset  int64 BE |   the slave's CommitLog end: its ack, and (first report) where
    +----------------------+   the master starts streaming

Master -> slave, repeated::

    +----------------------+------------------+----------------------------------+
    | phys offset int64 BE | size   int32 BE  | size bytes of raw CommitLog       |
    +----------------------+------------------+----------------------------------+
      where the bytes sit     0..32768; 0 is a heartbeat (offset = next byte to send)

A batch never spans a CommitLog segment. Both sides are sans-IO here: encoders and
incremental parsers fed whatever the socket returned.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from replication.errors import ProtocolError

REPORT_SIZE = 8
HEADER_SIZE = 12
TRANSFER_BATCH_BYTES_MAX = 32 * 1024
HEARTBEAT_INTERVAL_S = 5.0
LINK_SILENCE_MAX_S = 20.0  # RocketMQ's haHousekeepingInterval
RECONNECT_INTERVAL_S = 5.0

_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")


def encode_report(offset: int) -> bytes:
    return _REPORT.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    return _HEADER.pack(offset, size)


class ReportParser:
    """The master's side: keeps only the newest complete report (RocketMQ reads the last
    8-byte value available and ignores older ones)."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> int | None:
        """The newest complete report in what arrived so far, or ``None``."""
        buf = self._partial + data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._partial = buf[whole:]
        if whole == 0:
            return None
        offset: int = _REPORT.unpack_from(buf, whole - REPORT_SIZE)[0]
        if offset < 0:
            raise ProtocolError(f"slave reported a negative offset {offset}")
        return offset


@dataclass(frozen=True, slots=True)
class Transfer:
    """One batch from the master; ``data`` empty for a heartbeat."""

    offset: int
    data: bytes

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


class TransferParser:
    """The slave's side: batches out of a byte stream, at most one batch buffered."""

    def __init__(self, batch_bytes_max: int = TRANSFER_BATCH_BYTES_MAX) -> None:
        self._buf = bytearray()
        self._batch_max = batch_bytes_max

    def feed(self, data: bytes) -> list[Transfer]:
        self._buf += data
        out = []
        buf = self._buf
        pos = 0
        with memoryview(buf) as view:  # a batch copied once (a bytearray slice is copied twice)
            while len(buf) - pos >= HEADER_SIZE:
                offset, size = _HEADER.unpack_from(buf, pos)
                if offset < 0 or not 0 <= size <= self._batch_max:
                    raise ProtocolError(f"bad transfer header: offset {offset}, size {size}")
                if len(buf) - pos - HEADER_SIZE < size:
                    break
                start = pos + HEADER_SIZE
                out.append(Transfer(offset, view[start : start + size].tobytes()))
                pos = start + size
        del buf[:pos]
        return out
