"""Body compression codecs: zlib (4.x and 5.x default), zstd (5.x type 2), lz4 (5.x type 1).

RocketMQ 4.x producers deflate bodies of 4 KiB and more with zlib level 5 and set only the
COMPRESSED bit; 5.x producers also set the COMPRESSION_TYPE bits. Java's zstd-jni and lz4-java
write plain zstd frames and LZ4 frames.

Decompression is streamed with a cap on its output: a body is refused once it inflates past
``size_max``, before more memory than that is committed (a 16 KB zstd frame of zeros would
otherwise inflate to gigabytes). Sizes a frame declares in its header are not trusted: the
zstd window is bounded, and LZ4's declared content size is never allocated up front.
"""

from __future__ import annotations

import zlib

import zstandard

from formats.errors import CompressionError, DecompressedTooLargeError
from formats.sysflag import CompressionType

ZLIB_LEVEL = 5
ZSTD_LEVEL = 3
# Bounds the memory a hostile compressed body can make a reader allocate when the caller names
# no tighter limit (RocketMQ's max body is 4 MiB; the broker passes its own message size limit).
DECOMPRESSED_SIZE_MAX = 64 * 1024 * 1024
CHUNK_BYTES = 256 * 1024  # output produced per step, so going past the cap costs one step at most
_ZSTD_WINDOW_LOG_MIN, _ZSTD_WINDOW_LOG_MAX = 20, 27  # 1 MiB .. zstd's own default limit (128 MiB)


def compress(body: bytes, kind: CompressionType) -> bytes:
    """``body`` compressed with ``kind``."""
    if kind is CompressionType.ZLIB:
        return zlib.compress(body, ZLIB_LEVEL)
    if kind is CompressionType.ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(body)
    if kind is CompressionType.LZ4:
        return _lz4().compress(body)
    raise CompressionError(f"cannot compress with {kind!r}")


def decompress(data: bytes, kind: CompressionType, size_max: int = DECOMPRESSED_SIZE_MAX) -> bytes:
    """``data`` decompressed with ``kind``; raises :class:`DecompressedTooLargeError` once the
    output would pass ``size_max`` bytes, :class:`CompressionError` on bad or truncated bytes."""
    try:
        if kind is CompressionType.ZLIB:
            return _inflate(data, size_max)
        if kind is CompressionType.ZSTD:
            return _unzstd(data, size_max)
        if kind is CompressionType.LZ4:
            return _unlz4(data, size_max)
    except (zlib.error, zstandard.ZstdError, RuntimeError) as exc:  # python-lz4 raises RuntimeError
        raise CompressionError(f"{kind.name} body does not decompress: {exc}") from exc
    raise CompressionError(f"cannot decompress {kind!r}")


def _too_large(kind: str, size_max: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"{kind} body inflates past the {size_max}-byte limit")


def _inflate(data: bytes, size_max: int) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, size_max + 1)
    if len(out) > size_max or inflater.unconsumed_tail:
        raise _too_large("zlib", size_max)
    if not inflater.eof:
        raise CompressionError("ZLIB body does not decompress: the stream is truncated")
    return out


def _unzstd(data: bytes, size_max: int) -> bytes:
    # A frame that declares its size gets exactly that allocated by the one-shot decoder, so the
    # declared size is checked first; one that does not gets at most ``size_max + 1``.
    declared = zstandard.frame_content_size(data)  # -1: not declared
    if declared > size_max:
        raise _too_large("zstd", size_max)
    window_log = min(_ZSTD_WINDOW_LOG_MAX, max(_ZSTD_WINDOW_LOG_MIN, (size_max - 1).bit_length()))
    decoder = zstandard.ZstdDecompressor(max_window_size=1 << window_log)
    try:
        return decoder.decompress(data, max_output_size=size_max + 1 if declared < 0 else 0)
    except zstandard.ZstdError:
        # the one-shot decoder says "did not decompress full frame" for both a truncated frame
        # and one past the cap: tell them apart by streaming, which stops at the cap
        if declared < 0 and _streamed_size(decoder, data, size_max) > size_max:
            raise _too_large("zstd", size_max) from None
        raise


def _streamed_size(decoder: zstandard.ZstdDecompressor, data: bytes, size_max: int) -> int:
    """How many bytes ``data`` inflates to, counting no further than just past ``size_max``."""
    size = 0
    reader = decoder.stream_reader(data)
    while size <= size_max and (chunk := reader.read(CHUNK_BYTES)):
        size += len(chunk)
    return size


def _unlz4(data: bytes, size_max: int) -> bytes:
    decompressor = _lz4().LZ4FrameDecompressor()
    parts: list[bytes] = []
    size = 0
    pending = data
    while True:
        chunk = decompressor.decompress(pending, max_length=CHUNK_BYTES)
        pending = b""
        size += len(chunk)
        if size > size_max:
            raise _too_large("lz4", size_max)
        parts.append(chunk)
        if decompressor.eof:
            return b"".join(parts)
        if decompressor.needs_input:
            raise CompressionError("LZ4 body does not decompress: the frame is truncated")


def _lz4():  # type: ignore[no-untyped-def]
    try:
        import lz4.frame
    except ImportError:  # optional: only RocketMQ 5 producers configured for LZ4 write it
        raise CompressionError("LZ4 body: install the 'lz4' package to read it") from None
    return lz4.frame
