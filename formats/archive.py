"""zstd archives of closed CommitLog segments: ``<20-digit start offset>.zst``.

An archive is one zstd frame of the whole segment file (its zero tail compresses to almost
nothing). Archives are written to a temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import zstandard

ARCHIVE_SUFFIX = ".zst"
ARCHIVE_LEVEL = 3
_COPY_CHUNK = 1 << 20


def archive_segment(src: Path, dst_dir: Path) -> Path:
    """Compress segment ``src`` into ``dst_dir`` and return the archive path (src is kept)."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / (src.name + ARCHIVE_SUFFIX)
    tmp = dst.with_name(dst.name + ".tmp")
    cctx = zstandard.ZstdCompressor(level=ARCHIVE_LEVEL)
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        cctx.copy_stream(fin, fout, size=os.fstat(fin.fileno()).st_size)
        fout.flush()
        os.fsync(fout.fileno())
    os.replace(tmp, dst)
    fd = os.open(dst_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return dst


@contextlib.contextmanager
def open_archive(path: Path) -> Iterator[mmap.mmap | bytes]:
    """The decompressed segment, spooled to an anonymous temporary file and mapped, so memory
    stays bounded whatever the segment size."""
    dctx = zstandard.ZstdDecompressor()
    with open(path, "rb") as fin, tempfile.TemporaryFile() as spool:
        dctx.copy_stream(fin, spool, read_size=_COPY_CHUNK, write_size=_COPY_CHUNK)
        spool.flush()
        size = spool.tell()
        if size == 0:
            yield b""
            return
        with mmap.mmap(spool.fileno(), size, access=mmap.ACCESS_READ) as view:
            yield view
