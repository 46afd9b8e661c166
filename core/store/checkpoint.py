"""The checkpoint file: how far the CommitLog and the queues were durable at the last flush.

```
 off  size  field
   0     8  physicMsgTimestamp     store time of the last flushed CommitLog record (RocketMQ)
   8     8  logicsMsgTimestamp     store time of the last dispatched record        (RocketMQ)
  16     8  indexMsgTimestamp      same, for the key index                          (RocketMQ)
  24     8  commitlogFlushedOffset every CommitLog byte below it was fsynced
  32     8  dispatchedOffset       ConsumeQueues and index were fsynced up to here
  40     4  crc32 of bytes 0..40
```
Padded to 4 KiB, written to a temporary file and renamed, so it is whole or absent.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_SIZE = 4096
_BODY = struct.Struct(">qqqqq")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    commitlog_flushed_offset: int = 0
    dispatched_offset: int = 0

    def encode(self) -> bytes:
        body = _BODY.pack(
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
            self.commitlog_flushed_offset, self.dispatched_offset,
        )
        crc = struct.pack(">I", zlib.crc32(body))
        return (body + crc).ljust(CHECKPOINT_SIZE, b"\0")


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint at ``path``, or ``None`` when absent or damaged."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) < _BODY.size + 4:
        return None
    body = raw[: _BODY.size]
    if struct.unpack_from(">I", raw, _BODY.size)[0] != zlib.crc32(body):
        return None
    return Checkpoint(*_BODY.unpack(body))


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint durably (blocking: call from a worker thread)."""
    replace_durably(path, checkpoint.encode())


def replace_durably(path: Path, data: bytes, backup: Path | None = None) -> None:
    """Replace ``path``'s content with ``data`` so a crash leaves the old file or the new one:
    written to a temporary file beside it and synced, the old file moved to ``backup`` when one
    is named, renamed over it, the folder synced (blocking)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if backup is not None and path.exists():
        os.replace(path, backup)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
