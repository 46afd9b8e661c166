"""Message SYSFLAG bits (RocketMQ ``MessageSysFlag``), including the 5.x compression type.

```
 bit  value   name
 0    0x001   COMPRESSED
 1    0x002   MULTI_TAGS
 2-3  0x00C   TRANSACTION type: 0 none, 0x4 PREPARED, 0x8 COMMIT, 0xC ROLLBACK
 4    0x010   BORNHOST_V6        born host is 16-byte IP + port
 5    0x020   STOREHOST_V6       store host is 16-byte IP + port
 6    0x040   NEED_UNWRAP        (5.x)
 7    0x080   INNER_BATCH        (5.x)
 8-10 0x700   COMPRESSION_TYPE   (flag & 0x700) >> 8: 1 LZ4, 2 ZSTD, 3 ZLIB, 0 legacy = ZLIB
```
"""

from __future__ import annotations

import enum

COMPRESSED = 0x1
MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
NEED_UNWRAP = 0x40
INNER_BATCH = 0x80
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_TYPE_SHIFT = 8


class CompressionType(enum.IntEnum):
    """Body compression codec named by the 5.x COMPRESSION_TYPE bits."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3


def compression_type(sysflag: int) -> CompressionType | None:
    """The codec of a record's body, or ``None`` when the body is not compressed.

    A compressed record with no type bits is a 4.x record: zlib.
    """
    if not sysflag & COMPRESSED:
        return None
    bits = (sysflag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT
    if bits == 0:
        return CompressionType.ZLIB
    try:
        return CompressionType(bits)
    except ValueError:
        from formats.errors import CompressionError

        raise CompressionError(f"unknown compression type bits {bits}") from None


def with_compression(sysflag: int, kind: CompressionType) -> int:
    """``sysflag`` marked compressed with ``kind``."""
    cleared = sysflag & ~COMPRESSION_TYPE_MASK
    return cleared | COMPRESSED | (int(kind) << COMPRESSION_TYPE_SHIFT)


def transaction_type(sysflag: int) -> int:
    """The transaction bits of ``sysflag`` (one of the ``TRANSACTION_*`` values)."""
    return sysflag & TRANSACTION_MASK


def is_dispatched(sysflag: int) -> bool:
    """Whether a record goes to a ConsumeQueue: prepared and rolled-back halves do not."""
    kind = sysflag & TRANSACTION_MASK
    return kind in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT)
