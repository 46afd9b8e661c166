"""The epoch file of a broker in controller mode (RocketMQ's ``epochFileCheckpoint``, kept
beside the CommitLog with a ``.bak`` copy): at which CommitLog offset each master epoch began.

```
 2\n              entries
 773307083\n      CRC32 of the entry lines below (with their newlines), & 0x7FFFFFFF; 0: unchecked
 7-7000\n         <epoch>-<start offset>, oldest first
 8-8000\n
```

Text, UTF-8, "\\n" line ends (Java's line separator on Linux). Epochs rise and start offsets
never fall from one entry to the next.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from formats.errors import FormatError

ENTRIES_MAX = 1_000_000  # far past any group's elections: a bigger count is a damaged file


class EpochFileError(FormatError):
    """An epoch file that is damaged: bad counts, lines, CRC or order."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def encode_epoch_file(entries: list[EpochEntry]) -> bytes:
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode()
    return f"{len(entries)}\n{zlib.crc32(lines) & 0x7FFFFFFF}\n".encode() + lines


def decode_epoch_file(data: bytes) -> list[EpochEntry]:
    """The entries of an epoch file; raises :class:`EpochFileError` when it is damaged."""
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise EpochFileError("an epoch file is not UTF-8 text") from exc
    head, _, rest = text.partition("\n")
    crc_text, _, body = rest.partition("\n")
    try:
        count, crc = int(head), int(crc_text)
    except ValueError as exc:
        raise EpochFileError("an epoch file starts with its entry count and CRC") from exc
    if not 0 <= count <= ENTRIES_MAX:
        raise EpochFileError(f"an epoch file cannot hold {count} entries")
    if crc and zlib.crc32(body.encode()) & 0x7FFFFFFF != crc:
        raise EpochFileError("the epoch file's entries do not match its CRC")
    entries: list[EpochEntry] = []
    for line in body.splitlines():
        epoch_text, sep, start_text = line.partition("-")
        try:
            entry = EpochEntry(int(epoch_text), int(start_text))
        except ValueError as exc:
            raise EpochFileError(f"bad epoch entry {line[:40]!r}") from exc
        if not sep or entry.epoch < 0 or entry.start_offset < 0:
            raise EpochFileError(f"bad epoch entry {line[:40]!r}")
        if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset < entries[-1].start_offset):
            raise EpochFileError(f"epoch entry {line[:40]!r} does not follow {entries[-1]}")
        entries.append(entry)
    if len(entries) != count:
        raise EpochFileError(f"the epoch file says {count} entries and holds {len(entries)}")
    return entries
