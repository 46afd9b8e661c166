"""Body codecs: every kind round-trips, stops at its output cap, refuses truncated input, and a
size a frame declares in its header is never allocated unchecked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import zstandard

from formats.compression import compress, decompress
from formats.errors import CompressionError, DecompressedTooLargeError
from formats.sysflag import CompressionType

BODY = b"order 1234 shipped to the warehouse; " * 3000
KINDS = pytest.mark.parametrize("kind", list(CompressionType), ids=lambda k: k.name)


@KINDS
def test_round_trip_and_the_cap(kind):
    data = compress(BODY, kind)
    assert decompress(data, kind) == BODY
    assert decompress(data, kind, size_max=len(BODY)) == BODY  # exactly at the cap is fine
    with pytest.raises(DecompressedTooLargeError, match=f"past the {len(BODY) - 1}-byte limit"):
        decompress(data, kind, size_max=len(BODY) - 1)
    assert decompress(compress(b"", kind), kind) == b""


@KINDS
def test_truncated_and_garbage_input_is_refused(kind):
    data = compress(BODY, kind)
    for broken in (data[: len(data) // 2], data[:5], b"\x00" * 40):
        with pytest.raises(CompressionError) as refused:
            decompress(broken, kind)
        assert not isinstance(refused.value, DecompressedTooLargeError)


def test_a_zstd_frame_without_a_declared_size_is_cut_at_the_cap():
    data = zstandard.ZstdCompressor(write_content_size=False).compress(BODY)
    assert zstandard.frame_content_size(data) == -1
    assert decompress(data, CompressionType.ZSTD) == BODY
    with pytest.raises(DecompressedTooLargeError):
        decompress(data, CompressionType.ZSTD, size_max=1000)


PEAK_PROBE = textwrap.dedent("""
    import resource, sys, zstandard, lz4.frame
    from formats.compression import decompress
    from formats.errors import DecompressedTooLargeError
    from formats.sysflag import CompressionType
    kind, declared = CompressionType[sys.argv[1]], sys.argv[2] == "declared"
    size, chunk = 256 << 20, bytes(1 << 20)
    if kind is CompressionType.ZSTD:
        stream = zstandard.ZstdCompressor(write_content_size=declared).compressobj(size=size if declared else -1)
        bomb = b"".join(stream.compress(chunk) for _ in range(size // len(chunk))) + stream.flush()
    else:
        stream = lz4.frame.LZ4FrameCompressor()
        bomb = stream.begin(size if declared else 0) + b"".join(stream.compress(chunk) for _ in range(size // len(chunk))) + stream.flush()
    if kind is CompressionType.LZ4:
        assert (lz4.frame.get_frame_info(bomb)["content_size"] == size) == declared
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        decompress(bomb, kind, 4 << 20)
    except DecompressedTooLargeError:
        pass
    else:
        raise SystemExit("not refused")
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
""")


@pytest.mark.parametrize("kind", [CompressionType.ZSTD, CompressionType.LZ4], ids=lambda k: k.name)
@pytest.mark.parametrize("declared", ["declared", "undeclared"])
def test_a_256_mib_bomb_costs_a_few_mib_whatever_its_header_declares(kind, declared, subprocess_env):
    # a fresh process, so its peak memory is this decompression's alone
    done = subprocess.run([sys.executable, "-c", PEAK_PROBE, kind.name, declared], capture_output=True, text=True,
                          env=subprocess_env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) < 24, f"peak memory grew by {done.stdout.strip()} MiB"
