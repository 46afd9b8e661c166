"""Body compression codecs: zlib (4.x and 5.x default), zstd (5.x type 2), lz4 (5.x type 1).

RocketMQ 4.x producers deflate bodies of 4 KiB and more with zlib level 5 and set only the
COMPRESSED bit; 5.x producers also set the COMPRESSION_TYPE bits. Java's zstd-jni and lz4-java
write plain zstd frames and LZ4 frames.
"""

from __future__ import annotations

import zlib

import zstandard

from formats.errors import CompressionError
from formats.sysflag import CompressionType

ZLIB_LEVEL = 5
ZSTD_LEVEL = 3
# Bounds the memory a hostile compressed body can make us allocate (RocketMQ's max body is 4 MiB).
DECOMPRESSED_SIZE_MAX = 64 * 1024 * 1024


def compress(body: bytes, kind: CompressionType) -> bytes:
    """``body`` compressed with ``kind``."""
    if kind is CompressionType.ZLIB:
        return zlib.compress(body, ZLIB_LEVEL)
    if kind is CompressionType.ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(body)
    if kind is CompressionType.LZ4:
        return _lz4().compress(body)
    raise CompressionError(f"cannot compress with {kind!r}")


def decompress(data: bytes, kind: CompressionType) -> bytes:
    """``data`` decompressed with ``kind``; raises :class:`CompressionError` on bad bytes."""
    try:
        if kind is CompressionType.ZLIB:
            inflater = zlib.decompressobj()
            out = inflater.decompress(data, DECOMPRESSED_SIZE_MAX)
            if inflater.unconsumed_tail:
                raise CompressionError("zlib body inflates past the size limit")
            return out
        if kind is CompressionType.ZSTD:
            reader = zstandard.ZstdDecompressor().decompressobj()
            out = reader.decompress(data)
            if len(out) > DECOMPRESSED_SIZE_MAX:
                raise CompressionError("zstd body inflates past the size limit")
            return out
        if kind is CompressionType.LZ4:
            return _lz4().decompress(data)
    except (zlib.error, zstandard.ZstdError) as exc:
        raise CompressionError(f"{kind.name} body does not decompress: {exc}") from exc
    raise CompressionError(f"cannot decompress {kind!r}")


def _lz4():  # type: ignore[no-untyped-def]
    try:
        import lz4.frame
    except ImportError:  # optional: only RocketMQ 5 producers configured for LZ4 write it
        raise CompressionError("LZ4 body: install the 'lz4' package to read it") from None
    return lz4.frame
