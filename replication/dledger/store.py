"""The message store of a raft member: the raft log is the CommitLog (RocketMQ's
DLedgerCommitLog), and only committed entries reach the ConsumeQueues and the key index.

```
 commitlog/  [classic segments of an earlier master-slave era][raft data files from `base`]
                                                              ^ entries [48-byte header][record]
 a record's physical offset = its entry's position + 48 (ConsumeQueue entries, offset msgIds)
 readable end (commitlog.write_offset) = the end of the last committed entry dispatched
```

The leader puts a record by encoding it (queue offset and store time assigned here) and
proposing it to the raft node, which appends it to the log; the send waits for the commit
(:class:`replication.dledger.strategy.DLedgerReplication`). Every member dispatches entries as
its commit index grows, so followers serve committed messages too.

Switching a master-slave store to raft keeps its classic segments: they are recovered and
dispatched as before, then the raft data begins at the next segment start (``dledger/base``),
so every old physical offset, queue offset and consumer offset stays valid.

Retention deletes whole data files, oldest first, once their last record was stored more than
``retention_hours`` ago and every entry in them is committed, on this member's disk and dispatched
(:func:`replication.dledger.retention.deletable_through`); the raft log then begins at the next
file's first entry (``dledger/start``, written first). A member installed from its leader (it
needed entries the leader had deleted) drops its data files, ConsumeQueues and key index and
receives the leader's retained files from their first entry: queues begin again at the first
retained message, as after retention.
"""

from __future__ import annotations

import logging
import struct
import time
from pathlib import Path

from core.config import StoreConfig
from core.errors import StoreCorruptError
from core.store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from core.store.commitlog import LogRecovery
from core.store.dispatch import BatchAppended
from core.store.mapped_file import MappedFile
from core.store.message_store import (
    ABORT_FILE,
    CHECKPOINT_FILE,
    LOG_FLOOR_FILE,
    RAFT_BASE_FILE,
    RAFT_STATE_DIR,
    MessageStore,
)
from core.store.store_types import RecoveryReport, StoreHooks
from formats import dledger
from formats.record import read_store_timestamp
from formats.segments import parse_segment_name
from replication.dledger.disk_log import DiskRaftLog, sync_files
from replication.dledger.proposals import Proposer, RaftProposals
from replication.dledger.retention import deletable_through
from replication.dledger.state_files import load_commit_checkpoint, read_properties, write_properties

log = logging.getLogger(__name__)

_ENTRY_HEAD = struct.Struct(">iiqq")  # magic, size, raft index, term


class DLedgerMessageStore(MessageStore):
    """The store under ``root`` of one raft member (``replication.mode = "dledger"``)."""

    def __init__(self, root: Path, config: StoreConfig, plugins: StoreHooks | None = None, **kwargs: object) -> None:
        super().__init__(root, config, plugins, **kwargs)  # type: ignore[arg-type]
        self.state_dir = root / RAFT_STATE_DIR
        self.raft_log = DiskRaftLog(root, config.segment_size_bytes, data=self.commitlog.files)
        self.committed_index = -1
        # puts are proposed to the raft node, and what this member proposed as leader is
        # dispatched at commit from the fields kept (instead of decoding the records again)
        self.proposals = RaftProposals(self.raft_log)
        self.log = self.proposals
        self.set_read_only("no raft leader elected yet")

    def attach_proposer(self, propose: Proposer) -> None:
        """Appends go through ``propose`` (the raft member's: entries to its log and its
        followers, or a Code when it is not the leader). Until one is attached, appends are
        refused NOT_LEADER; the replication attaches its driver's once, at start."""
        if self.proposals.proposer is not None:
            raise RuntimeError("a proposer is attached already")
        self.proposals.proposer = propose

    # ---------------------------------------------------------------- opening

    def open(self) -> RecoveryReport:
        self.root.mkdir(parents=True, exist_ok=True)
        clean = not (self.root / ABORT_FILE).exists()
        base = self._data_base()
        self.raft_log = DiskRaftLog(self.root, self.config.segment_size_bytes, data=self.commitlog.files, base=base)
        self.raft_log.on_reset = self._log_reset
        self.proposals.raft_log = self.raft_log
        committed = load_commit_checkpoint(self.state_dir / "checkpoint")
        self.raft_log.open(committed)
        end = max(self.raft_log.write_pos, 0)
        self.queues.recover(end, self.commitlog.min_offset)
        if self._index_enabled:
            self.index.recover(end)
        checkpoint = read_checkpoint(self.root / CHECKPOINT_FILE)
        low = max(base, self.raft_log.start_pos)
        self.reput_offset = self.commitlog.write_offset = self.commitlog.flushed_offset = low
        if checkpoint is not None:
            self.reput_offset = max(low, min(checkpoint.dispatched_offset, end))
        scanned_from = self.reput_offset
        redispatched = self.dispatch_committed(min(committed, self.raft_log.last_index))
        self._opened()
        return RecoveryReport(clean, LogRecovery(scanned_from, end, redispatched, 0, None), redispatched)

    def _data_base(self) -> int:
        """Where the raft data begins: read from ``dledger/base``, or fixed on the first start.
        A store that held a classic CommitLog is recovered and dispatched as one first; the
        raft data then begins at the next segment start. A store whose earlier raft era was
        sealed (it ran master-slave since) keeps that era's state aside as history."""
        recorded = read_data_base(self.root)
        floor = self.log_floor()
        if recorded is not None and floor is None:
            return recorded
        if floor is not None and self.state_dir.exists():
            self.state_dir.rename(self.state_dir.with_name(f"{RAFT_STATE_DIR}-sealed-{floor}"))
        seg = self.config.segment_size_bytes
        base = 0
        if _classic_segments(self.root / "commitlog"):
            super().open()  # the master-slave era: recover, dispatch, then it is read-only history
            self._open = False
            base = -(-self.commitlog.write_offset // seg) * seg
            sync_files(self.queues.dirty_files() + self.index.dirty_files())
            write_checkpoint(self.root / CHECKPOINT_FILE, Checkpoint(
                self._last_store_ts, self._last_dispatch_ts, self._last_dispatch_ts, base, base))
            log.info("store %s: classic CommitLog kept below %d; raft entries follow from there", self.root, base)
        write_properties(self.state_dir / RAFT_BASE_FILE, {"dataBeginOffset": str(base)})
        (self.root / LOG_FLOOR_FILE).unlink(missing_ok=True)  # the sealed era is classic history now
        return base

    # ---------------------------------------------------------------- dispatching

    def dispatch_committed(self, commit_index: int) -> int:
        """Dispatch every entry up to ``commit_index`` not dispatched yet (normal entries;
        no-ops only move the cursor); returns how many records."""
        self.committed_index = max(self.committed_index, commit_index)
        files = self.raft_log.data
        reput = self.reput_offset
        if files.files and reput < files.files[0].start:
            reput = files.files[0].start  # installed: the log begins at the leader's first retained file
        batch = self.dispatch_batch()
        seg_size = self.raft_log.segment_size
        head, header_size, normal = _ENTRY_HEAD.unpack_from, dledger.HEADER_SIZE, dledger.MAGIC_NORMAL
        proposed = self.proposals.kept
        more = True
        while more:
            mf = files.find(reput)
            if mf is None:
                break
            view, start, limit = mf.view, mf.start, mf.size
            at = reput - start
            while True:  # the entries of this data file
                if limit - at < header_size or dledger.is_padding(view, at):
                    at = seg_size  # the next file
                    break
                magic, size, index, term = head(view, at)
                if magic not in dledger.ENTRY_MAGICS or index > commit_index:
                    more = False
                    break
                if size < header_size or at + size > limit:
                    raise StoreCorruptError(f"raft entry {index} claims {size} bytes", mf.path, start + at)
                if magic == normal and size > header_size:
                    while proposed and proposed[0][0] < index:
                        proposed.popleft()  # never committed here (another leader's entries won)
                    if proposed and proposed[0][0] == index and proposed[0][1] == term:
                        put = proposed[0][2]
                        if type(put) is BatchAppended:
                            last_index = index + len(put.offsets) - 1
                            if last_index > commit_index and self.raft_log.term_at(last_index) == term:
                                more = False  # dispatched whole once its last entry commits
                                break
                            proposed.popleft()  # committed, or cut short by a later leader
                            last_at = put.offsets[-1] - header_size - start
                            last_size = header_size + put.batch.sizes[-1]
                            if last_at + last_size <= limit and head(view, last_at) == (normal, last_size, last_index, term):
                                batch.add_batch_put(put)  # its entries lie in this file, as proposed
                                at = last_at + last_size
                                continue
                            batch.add(view, at + header_size, size - header_size, start + at + header_size)
                        else:
                            batch.add_put(proposed.popleft()[2])  # type: ignore[arg-type]
                    else:
                        batch.add(view, at + header_size, size - header_size, start + at + header_size)
                at += size
            reput = start + at
        self.reput_offset = self.commitlog.write_offset = self.commitlog.flushed_offset = reput
        return batch.finish()

    # ---------------------------------------------------------------- writing (the leader)

    def start_leading(self) -> None:
        """This member leads and everything in its log is committed and dispatched: queue
        offsets continue from the ConsumeQueues, and writes are taken."""
        for cq in self.queues.queues.values():
            cq.assigned = cq.max_offset
        self.proposals.kept.clear()
        self.index.reserved = 0  # what an earlier term's lost proposals reserved is not coming
        self.set_read_only(None)

    def entry_at_record(self, phys_offset: int) -> tuple[int, int]:
        """The raft index and term of the entry holding the record at ``phys_offset``."""
        mf = self.raft_log.data.find(phys_offset)
        if mf is None:
            raise KeyError(phys_offset)
        head = dledger.decode_header(mf.view, phys_offset - dledger.HEADER_SIZE - mf.start)
        return head.raft_index, head.term

    # ---------------------------------------------------------------- housekeeping

    async def apply_retention(self, now: float | None = None) -> list[Path]:
        """Delete (or archive) the data files retention may take (module docstring), classic
        segments of an earlier master-slave era first; the raft log's new start is recorded
        before any file goes."""
        files = self._retirable_files(time.time() if now is None else now)
        if not files:
            return []
        kept = self.raft_log.data.files[len(files)]  # never the last file: it follows every retired one
        if kept.start > self.raft_log.base:
            self.raft_log.begin_at(kept.start)
        return await self.retire_segments(files)

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
        for f, last in raft_log.closed_files():
            applied = last if self.reput_offset >= f.end else -1
            if last > deletable_through(self.committed_index, raft_log.durable_index, applied) \
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

    def _log_reset(self) -> None:
        """The raft log was installed anew (it continues at the leader's first retained
        entry): what was derived from the old one goes, and dispatching starts over at the
        first data file that arrives."""
        self.queues.clear()
        self.index.clear()
        self.proposals.kept.clear()
        self.reput_offset = 0
        stamp = self.clock()
        write_checkpoint(self.root / CHECKPOINT_FILE, Checkpoint(stamp, stamp, stamp, 0, 0))
        log.info("store %s: raft log installed from the leader; ConsumeQueues and key index start over", self.root)

    def _close_files(self) -> None:
        super()._close_files()
        self.raft_log.close()


def read_data_base(root: Path) -> int | None:
    """Where the raft data of the store under ``root`` begins (``dledger/base``), if fixed."""
    props = read_properties(root / RAFT_STATE_DIR / RAFT_BASE_FILE)
    return int(props["dataBeginOffset"]) if "dataBeginOffset" in props else None


def _classic_segments(directory: Path) -> bool:
    """Whether ``directory`` holds CommitLog segments written before raft (any data file)."""
    if not directory.is_dir():
        return False
    return any(parse_segment_name(p.name) is not None and p.stat().st_size > 0 for p in directory.iterdir())
