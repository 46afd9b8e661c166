"""Retention and disk space: which segments have outlived their time, and how full the disk
is. :class:`AgeRetention` is the classic CommitLog's :class:`core.store.interfaces.Retention`."""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.config import StoreConfig
from core.store.commitlog import CommitLog
from core.store.mapped_file import MappedFile


def disk_used_ratio(path: Path) -> float:
    """Used fraction of the filesystem holding ``path`` (as RocketMQ counts it)."""
    st = os.statvfs(path)
    if st.f_blocks == 0:
        return 0.0
    return (st.f_blocks - st.f_bfree) / st.f_blocks


def expired_segments(
    segments: list[MappedFile], flushed_offset: int, retention_hours: float, now: float | None = None
) -> list[MappedFile]:
    """The leading segments older than the retention time. The last segment and any segment
    holding unflushed bytes are never expired; the oldest go first and the run stops at the
    first segment that is still young."""
    now = time.time() if now is None else now
    cutoff = now - retention_hours * 3600
    out: list[MappedFile] = []
    for seg in segments[:-1]:
        if seg.end > flushed_offset or seg.path.stat().st_mtime > cutoff:
            break
        out.append(seg)
    return out


class AgeRetention:
    """The CommitLog's segments past ``store.retention_hours`` (:func:`expired_segments`)."""

    def __init__(self, commitlog: CommitLog, config: StoreConfig) -> None:
        self.commitlog = commitlog
        self.config = config

    def take(self, now: float | None) -> list[MappedFile]:
        return expired_segments(self.commitlog.files.files, self.commitlog.flushed_offset, self.config.retention_hours,
                                now)
