"""Fixed-size, preallocated, memory-mapped files, and directories of them named by offset.

Space is reserved with ``posix_fallocate`` when a file is created, so a full disk shows up as a
clean :class:`DiskFullError` at creation and never as a SIGBUS on a later write through the map.
``sync`` and ``populate`` block and are meant for worker threads; everything else runs on the
event loop.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
from pathlib import Path

from core.errors import DiskFullError, StoreError
from formats.segments import parse_segment_name, segment_name

# madvise(2) advice that write-faults a range in advance (Linux 5.14+). CPython's mmap.madvise
# holds the GIL; calling libc through ctypes releases it, so a worker thread can take the page
# faults while the event loop keeps appending.
MADV_POPULATE_WRITE = 23
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.madvise.restype = ctypes.c_int
_PAGE = mmap.PAGESIZE


def preallocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes for ``fd``; raises :class:`DiskFullError` when there is no room."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no space left to create a {size}-byte file") from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)  # a filesystem without fallocate: best effort


class MappedFile:
    """One file of ``size`` bytes covering offsets ``[start, start + size)``."""

    def __init__(self, path: Path, size: int, start: int, *, create: bool) -> None:
        self.path = path
        self.start = start
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            if create:
                preallocate(self.fd, size)
            else:
                actual = os.fstat(self.fd).st_size
                if actual == 0:
                    raise StoreError(f"{path} is empty")
                size = actual  # a file keeps the size it was created with
            self.size = size
            self._map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            if create:
                path.unlink(missing_ok=True)
            raise
        self.dirty = False
        self._address: int | None = None
        self.closed = False

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def view(self) -> mmap.mmap:
        """The mapped bytes (read by scanners and readers on the loop)."""
        return self._map

    def write(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        self._map[pos : pos + len(data)] = data
        self.dirty = True

    def read(self, pos: int, size: int) -> bytes:
        return self._map[pos : pos + size]

    def pread(self, pos: int, size: int) -> bytes:
        """Read through the file descriptor: releases the GIL, for large reads in a thread."""
        return os.pread(self.fd, size, pos)

    def sync(self) -> None:
        """fdatasync: blocks; call from a worker thread."""
        os.fdatasync(self.fd)

    def populate(self, pos: int, length: int) -> bool:
        """Write-fault ``[pos, pos + length)`` ahead of the writer. Blocks without the GIL;
        returns False when the kernel does not support it."""
        if self.closed:
            return False
        if self._address is None:
            anchor = ctypes.c_char.from_buffer(self._map)
            self._address = ctypes.addressof(anchor)
            del anchor  # release the buffer export so the map can be closed later
        start = pos - pos % _PAGE
        length = min(length + (pos - start), self.size - start)
        if length <= 0:
            return True
        return _libc.madvise(self._address + start, length, MADV_POPULATE_WRITE) == 0

    def zero_from(self, pos: int) -> None:
        """Zero everything from ``pos`` to the end (used to cut a torn tail)."""
        chunk = 1 << 20
        zeros = bytes(chunk)
        cursor = pos
        while cursor < self.size:
            n = min(chunk, self.size - cursor)
            if self._map[cursor : cursor + n] != zeros[:n]:
                self._map[cursor : cursor + n] = zeros[:n]
                self.dirty = True
            cursor += n

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._map.close()
        os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class MappedFileQueue:
    """A directory of equal-size mapped files named by their 20-digit start offset."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []

    def load(self) -> None:
        """Map the files already in the directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        found = sorted(
            (start, child)
            for child in self.directory.iterdir()
            if (start := parse_segment_name(child.name)) is not None and child.is_file()
            and not child.name.endswith(".zst")
        )
        for start, child in found:
            if child.stat().st_size == 0:
                child.unlink()  # a file whose creation was interrupted
                continue
            self.files.append(MappedFile(child, self.file_size, start, create=False))

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    def create(self, start: int) -> MappedFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        mf = MappedFile(self.directory / segment_name(start), self.file_size, start, create=True)
        self.files.append(mf)
        return mf

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, or ``None``."""
        if not self.files or offset < self.files[0].start:
            return None
        # Files are contiguous in the usual case: index arithmetic, then verify.
        guess = (offset - self.files[0].start) // self.file_size
        if 0 <= guess < len(self.files) and self.files[guess].start <= offset < self.files[guess].end:
            return self.files[guess]
        for mf in self.files:
            if mf.start <= offset < mf.end:
                return mf
        return None

    def drop_after(self, offset: int) -> None:
        """Delete every file that starts at or after ``offset``."""
        keep = [mf for mf in self.files if mf.start < offset]
        for mf in self.files[len(keep):]:
            mf.destroy()
        self.files = keep

    def drop_first(self) -> MappedFile:
        mf = self.files.pop(0)
        mf.destroy()
        return mf

    def dirty_files(self) -> list[MappedFile]:
        """Files written since the last call; their dirty flags are cleared."""
        out = [mf for mf in self.files if mf.dirty]
        for mf in out:
            mf.dirty = False
        return out

    def close(self) -> None:
        for mf in self.files:
            mf.close()
