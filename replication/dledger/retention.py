"""What retention may delete from a raft member's log, the one rule the broker's store and the
simulator share: entries that are committed, on this member's disk, and applied (dispatched to
the ConsumeQueues), so nothing a later leader could still cut or a consumer could still need
from the log itself is deleted (:func:`deletable_through`). Age and file boundaries come on top:
:class:`RaftRetention`, a member's store's :class:`core.store.interfaces.Retention`."""

from __future__ import annotations

import time

from core.config import StoreConfig
from core.store.interfaces import DispatchCursor
from core.store.mapped_file import MappedFile
from formats import dledger
from formats.record import read_store_timestamp
from replication.dledger.commits import RaftCommits
from replication.dledger.disk_log import DiskRaftLog


def deletable_through(commit_index: int, durable_index: int, applied_index: int) -> int:
    """The last raft index retention may delete (-1: none)."""
    return min(commit_index, durable_index, applied_index)


class RaftRetention:
    """Data files whose entries are all deletable and whose last record was stored more than
    ``retention_hours`` ago, classic segments of an earlier master-slave era first; the raft
    log's new start is recorded before any file goes."""

    def __init__(self, config: StoreConfig, dispatch: DispatchCursor, raft_log: DiskRaftLog,
                 commits: RaftCommits) -> None:
        self.config = config
        self.dispatch = dispatch
        self.raft_log = raft_log
        self.commits = commits

    def take(self, now: float | None) -> list[MappedFile]:
        files = self._retirable_files(time.time() if now is None else now)
        if not files:
            return []
        kept = self.raft_log.data.files[len(files)]  # never the last file: it follows every retired one
        if kept.start > self.raft_log.base:
            self.raft_log.begin_at(kept.start)
        return files

    def _retirable_files(self, now: float) -> list[MappedFile]:
        cutoff = now - self.config.retention_hours * 3600
        raft_log = self.raft_log
        out: list[MappedFile] = []
        for f in raft_log.data.files[:-1]:  # classic segments of an earlier master-slave era first
            if f.end > raft_log.base:
                break
            if f.path.stat().st_mtime > cutoff:
                return out
            out.append(f)
        reput = self.dispatch.reput_offset
        for f, last in raft_log.closed_files():
            applied = last if reput >= f.end else -1
            if last > deletable_through(self.commits.committed_index, raft_log.durable_index, applied) \
                    or self._written_at(f, last) > cutoff:
                break
            out.append(f)
        return out

    def _written_at(self, f: MappedFile, last_index: int) -> float:
        """When the leader stored the last record in data file ``f`` (the file's mtime when its
        last entry is a no-op): the same on every member, so a member installed or caught up
        late deletes a file when its leader does, not a retention period after it arrived
        (RocketMQ ages a replica's files by their mtime)."""
        entry = self.raft_log.entry(last_index)
        stamp = read_store_timestamp(entry.body) if entry is not None and entry.magic == dledger.MAGIC_NORMAL else None
        return f.path.stat().st_mtime if stamp is None else stamp / 1000
