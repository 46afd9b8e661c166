"""ConsumeQueue entries: 20 bytes each, logical offset n at byte n * 20 of the queue.

```
 off  size  field
   0     8  commitLogOffset   physical offset of the record
   8     4  size              record size
  12     8  tagsCode          formats.tags.tags_code, or a delivery time for the schedule topic
```
A queue whose first file starts above 0 pads the unused prefix with (0, 0x7FFFFFFF, 0); an
all-zero entry is unwritten space.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import NamedTuple

from formats.buffers import ReadableBytes, WritableBytes

CQ_ENTRY_SIZE = 20
CQ_ENTRIES_PER_FILE = 300_000
PAD_SIZE = 0x7FFFFFFF
_ENTRY = struct.Struct(">qiq")


class CQEntry(NamedTuple):
    """One ConsumeQueue entry."""

    phys_offset: int
    size: int
    tags_code: int

    @property
    def is_padding(self) -> bool:
        return self.phys_offset == 0 and self.size == PAD_SIZE

    @property
    def is_written(self) -> bool:
        return self.size > 0


def encode_cq_entry(phys_offset: int, size: int, tags_code: int) -> bytes:
    return _ENTRY.pack(phys_offset, size, tags_code)


def decode_cq_entry(buf: bytes | WritableBytes, pos: int = 0) -> CQEntry:
    return CQEntry(*_ENTRY.unpack_from(buf, pos))


def decode_cq_entries(buf: ReadableBytes, first_index: int) -> Iterator[tuple[int, CQEntry]]:
    """``(logical offset, entry)`` for every entry of ``buf`` (a whole number of entries), in one
    C-level unpacking pass."""
    return zip(range(first_index, first_index + len(buf) // CQ_ENTRY_SIZE),
               map(CQEntry._make, _ENTRY.iter_unpack(buf)), strict=True)


def pack_cq_entry_into(buf: WritableBytes, pos: int, phys: int, size: int, tags: int) -> None:
    _ENTRY.pack_into(buf, pos, phys, size, tags)


def pack_cq_entries_into(buf: WritableBytes, pos: int, offsets: Iterable[int], sizes: Iterable[int],
                         tags: Iterable[int]) -> None:
    """Entries back to back from ``pos``, one per (offset, size, tags), in one packing."""
    columns = list(chain.from_iterable(zip(offsets, sizes, tags)))
    _entries_struct(len(columns) // 3).pack_into(buf, pos, *columns)


@functools.lru_cache(maxsize=256)
def _entries_struct(count: int) -> struct.Struct:
    return struct.Struct(">" + "qiq" * count)


def iter_cq_entries(buf: ReadableBytes, first_index: int = 0) -> Iterator[tuple[int, CQEntry]]:
    """``(logical offset, entry)`` for each written entry, stopping at the first unwritten one."""
    for i in range(len(buf) // CQ_ENTRY_SIZE):
        entry = decode_cq_entry(buf, i * CQ_ENTRY_SIZE)
        if not entry.is_written:
            return
        yield first_index + i, entry
