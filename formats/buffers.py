"""The byte containers the codecs read from and write into."""

from __future__ import annotations

import mmap

# Anything indexable as bytes: read from files, maps of segments, network frames.
ReadableBytes = bytes | bytearray | memoryview | mmap.mmap
# Containers a record or entry can be packed into in place.
WritableBytes = bytearray | memoryview | mmap.mmap
