"""Recovery of a raft member's store (its :class:`core.store.interfaces.Recovery`): where the
raft data begins, the raft log opened from disk, the ConsumeQueues and key index loaded, and
every committed entry not dispatched yet dispatched. Also what a log installed anew from the
leader costs the store (:meth:`RaftRecovery.log_reset`).

A store that held a classic CommitLog (an earlier master-slave era) is recovered as one first,
by the classic recovery it is given; the raft data then begins at the next segment start
(``dledger/base``), so every old physical offset, queue offset and consumer offset stays valid.
"""

from __future__ import annotations

import logging
from pathlib import Path

from core.store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from core.store.interfaces import DispatchCursor, LogHost, Recovery
from core.store.layout import ABORT_FILE, CHECKPOINT_FILE, LOG_FLOOR_FILE, RAFT_BASE_FILE, RAFT_STATE_DIR
from core.store.store_types import LogRecovery, RecoveryReport
from formats.segments import parse_segment_name
from replication.dledger.commits import RaftCommits
from replication.dledger.disk_log import DiskRaftLog, sync_files
from replication.dledger.proposals import RaftProposals
from replication.dledger.state_files import load_commit_checkpoint, read_properties, write_properties

log = logging.getLogger("replication.dledger.store")


class RaftRecovery:
    """Opens ``raft_log`` over the store under ``host`` and applies what is committed."""

    def __init__(self, host: LogHost, dispatch: DispatchCursor, classic: Recovery, raft_log: DiskRaftLog,
                 proposals: RaftProposals, commits: RaftCommits) -> None:
        self.host = host
        self.dispatch = dispatch
        self.classic = classic
        self.raft_log = raft_log
        self.proposals = proposals
        self.commits = commits
        self.state_dir = host.root / RAFT_STATE_DIR

    def recover(self) -> RecoveryReport:
        host, root, raft_log = self.host, self.host.root, self.raft_log
        root.mkdir(parents=True, exist_ok=True)
        clean = not (root / ABORT_FILE).exists()
        base = self._data_base()
        raft_log.place_at(base)
        raft_log.on_reset = self.log_reset
        committed = load_commit_checkpoint(self.state_dir / "checkpoint")
        raft_log.open(committed)
        end = max(raft_log.write_pos, 0)
        host.recover_derived(end)
        checkpoint = read_checkpoint(root / CHECKPOINT_FILE)
        low = max(base, raft_log.start_pos)
        reput = low
        host.set_readable_end(low)
        if checkpoint is not None:
            reput = max(low, min(checkpoint.dispatched_offset, end))
        self.dispatch.reput_offset = reput
        redispatched = self.commits.dispatch_committed(min(committed, raft_log.last_index))
        return RecoveryReport(clean, LogRecovery(reput, end, redispatched, 0, None), redispatched)

    def _data_base(self) -> int:
        """Where the raft data begins: read from ``dledger/base``, or fixed on the first start.
        A store that held a classic CommitLog is recovered and dispatched as one first; the
        raft data then begins at the next segment start. A store whose earlier raft era was
        sealed (it ran master-slave since) keeps that era's state aside as history."""
        root = self.host.root
        recorded = read_data_base(root)
        floor = self.host.log_floor()
        if recorded is not None and floor is None:
            return recorded
        if floor is not None and self.state_dir.exists():
            self.state_dir.rename(self.state_dir.with_name(f"{RAFT_STATE_DIR}-sealed-{floor}"))
        seg = self.host.config.segment_size_bytes
        base = 0
        if _classic_segments(root / "commitlog"):
            # the master-slave era: recover, dispatch, then it is read-only history
            classic_end = self.classic.recover().log.end
            base = -(-classic_end // seg) * seg
            sync_files(self.host.derived_dirty_files())
            d = self.dispatch
            write_checkpoint(root / CHECKPOINT_FILE, Checkpoint(
                d.last_store_ts, d.last_dispatch_ts, d.last_dispatch_ts, base, base))
            log.info("store %s: classic CommitLog kept below %d; raft entries follow from there", root, base)
        write_properties(self.state_dir / RAFT_BASE_FILE, {"dataBeginOffset": str(base)})
        (root / LOG_FLOOR_FILE).unlink(missing_ok=True)  # the sealed era is classic history now
        return base

    def log_reset(self) -> None:
        """The raft log was installed anew (it continues at the leader's first retained
        entry): what was derived from the old one goes, and dispatching starts over at the
        first data file that arrives."""
        self.host.clear_derived()
        self.proposals.kept.clear()
        self.dispatch.reput_offset = 0
        stamp = self.host.clock()
        write_checkpoint(self.host.root / CHECKPOINT_FILE, Checkpoint(stamp, stamp, stamp, 0, 0))
        log.info("store %s: raft log installed from the leader; ConsumeQueues and key index start over", self.host.root)


def read_data_base(root: Path) -> int | None:
    """Where the raft data of the store under ``root`` begins (``dledger/base``), if fixed."""
    props = read_properties(root / RAFT_STATE_DIR / RAFT_BASE_FILE)
    return int(props["dataBeginOffset"]) if "dataBeginOffset" in props else None


def _classic_segments(directory: Path) -> bool:
    """Whether ``directory`` holds CommitLog segments written before raft (any data file)."""
    if not directory.is_dir():
        return False
    return any(parse_segment_name(p.name) is not None and p.stat().st_size > 0 for p in directory.iterdir())
