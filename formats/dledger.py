"""DLedger entries: in DLedger mode the CommitLog files hold raft entries wrapping records.

Big-endian, 48-byte header, then the body (one message record of formats.record):

```
 off  size  field
   0     4  magic       1 NORMAL (2 NOOP, 3 CONFIG_CHANGE in newer DLedger)
   4     4  size        whole entry, header included
   8     8  index       raft log index, dense from 0
  16     8  term
  24     8  pos         physical position of this entry in the data files
  32     4  channel
  36     4  chainCrc    (DLedger writes 0)
  40     4  bodyCrc     crc32 of the body (mqctl writes it, DLedger writes 0: 0 = unchecked)
  44     4  bodyLen
  48     n  body
```
The wrapped record's PHYSICALOFFSET is ``pos + 48``. The body CRC lets recovery tell an
entry whose body was torn by a power loss (its header written, a later sector not). A data file ends with padding
``[int32 -1][int32 remaining bytes]`` (magic first, unlike the CommitLog BLANK).
The index file holds 32-byte entries ``[magic:4][pos:8][size:4][index:8][term:8]``.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from formats.buffers import WritableBytes
from formats.errors import FormatError

MAGIC_NORMAL = 1
MAGIC_NOOP = 2
MAGIC_CONFIG_CHANGE = 3
ENTRY_MAGICS = (MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG_CHANGE)
PADDING_MAGIC = -1
HEADER_SIZE = 48
INDEX_ENTRY_SIZE = 32
_HEADER = struct.Struct(">iiqqqiiii")
_INDEX = struct.Struct(">iqiqq")
_PADDING = struct.Struct(">ii")
HEADER_STRUCT = _HEADER  # for a writer packing many headers (fields in the order drawn above)
INDEX_STRUCT = _INDEX  # for a writer packing many index entries


class DLedgerHeader(NamedTuple):
    """The fixed header of a DLedger entry."""

    magic: int
    size: int
    raft_index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_len: int


class DLedgerIndexEntry(NamedTuple):
    """One 32-byte entry of the DLedger index file."""

    magic: int
    pos: int
    size: int
    raft_index: int
    term: int


def encode_entry(index: int, term: int, pos: int, body: bytes, *, magic: int = MAGIC_NORMAL,
                 channel: int = 0) -> bytes:
    """A whole entry (header and body)."""
    return encode_header(index, term, pos, len(body), magic=magic, channel=channel, body_crc=body_crc(body)) + body


def encode_header(index: int, term: int, pos: int, body_len: int, *, magic: int = MAGIC_NORMAL,
                  channel: int = 0, body_crc: int = 0) -> bytes:
    """The 48-byte header of an entry whose body is ``body_len`` bytes."""
    return _HEADER.pack(magic, HEADER_SIZE + body_len, index, term, pos, channel, 0, body_crc, body_len)


def body_crc(body: bytes | memoryview) -> int:
    """The bodyCrc field of an entry with this body, as a signed int32."""
    crc = zlib.crc32(body)
    return crc - (1 << 32) if crc >= 1 << 31 else crc


def body_intact(buf: bytes | WritableBytes, pos: int, header: DLedgerHeader) -> bool:
    """Whether the body of the entry at ``pos`` matches its header's CRC (0: not recorded)."""
    if header.body_crc == 0:
        return True
    start = pos + HEADER_SIZE
    return body_crc(memoryview(buf)[start: start + header.body_len]) == header.body_crc


def decode_header(buf: bytes | WritableBytes, pos: int = 0) -> DLedgerHeader:
    """The header at ``pos``; raises :class:`FormatError` when it is not a consistent entry."""
    return DLedgerHeader(*header_fields(buf, pos))


def header_fields(buf: bytes | WritableBytes, pos: int = 0) -> tuple[int, int, int, int, int, int, int, int, int]:
    """:func:`decode_header` as a plain tuple (a reader walking many entries)."""
    if len(buf) - pos < HEADER_SIZE:
        raise FormatError(f"truncated DLedger header at {pos}")
    fields = _HEADER.unpack_from(buf, pos)
    magic, size, body_len = fields[0], fields[1], fields[8]
    if magic not in ENTRY_MAGICS:
        raise FormatError(f"bad DLedger magic {magic} at {pos}")
    if size != HEADER_SIZE + body_len or body_len < 0:
        raise FormatError(f"DLedger entry at {pos}: size {size} != 48 + {body_len}")
    return fields


def encode_padding(remaining: int) -> bytes:
    return _PADDING.pack(PADDING_MAGIC, remaining)


def is_padding(buf: bytes | WritableBytes, pos: int = 0) -> bool:
    return len(buf) - pos >= 8 and _PADDING.unpack_from(buf, pos)[0] == PADDING_MAGIC


def looks_like_entry(buf: bytes | WritableBytes, pos: int = 0) -> bool:
    """Cheap test used to tell a DLedger data file from a classic CommitLog segment."""
    if len(buf) - pos < HEADER_SIZE:
        return False
    magic, size = _PADDING.unpack_from(buf, pos)
    return magic in ENTRY_MAGICS and size >= HEADER_SIZE


def encode_index_entry(entry: DLedgerIndexEntry) -> bytes:
    return _INDEX.pack(*entry)


def decode_index_entry(buf: bytes | WritableBytes, pos: int = 0) -> DLedgerIndexEntry:
    return DLedgerIndexEntry(*_INDEX.unpack_from(buf, pos))


def index_fields(buf: bytes | WritableBytes, pos: int, count: int) -> list[tuple[int, int, int, int, int]]:
    """(magic, pos, size, index, term) of ``count`` consecutive index entries from ``pos``,
    as plain tuples (a reader walking many of them)."""
    return list(_INDEX.iter_unpack(buf[pos: pos + count * INDEX_ENTRY_SIZE]))  # type: ignore[arg-type]


def encode_index_fields(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """:func:`encode_index_entry` from the fields (a writer packing many of them)."""
    return _INDEX.pack(magic, pos, size, index, term)
