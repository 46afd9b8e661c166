"""Applying a raft member's committed entries to its store: every entry up to the commit index
is dispatched to the ConsumeQueues and the key index, and the store's readable end follows
(RocketMQ's DLedgerCommitLog reput). What this member proposed as leader is dispatched from the
fields it kept (:class:`replication.dledger.proposals.RaftProposals`), the rest is read back."""

from __future__ import annotations

import struct

from core.errors import StoreCorruptError
from core.store.dispatch import BatchAppended
from core.store.interfaces import DispatchCursor, LogHost
from formats import dledger
from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.proposals import RaftProposals

_ENTRY_HEAD = struct.Struct(">iiqq")  # magic, size, raft index, term


class RaftCommits:
    """How far the raft log is committed and applied to the store under ``host``."""

    def __init__(self, host: LogHost, dispatch: DispatchCursor, raft_log: DiskRaftLog,
                 proposals: RaftProposals) -> None:
        self.host = host
        self.dispatch = dispatch
        self.raft_log = raft_log
        self.proposals = proposals
        self.committed_index = -1

    def dispatch_committed(self, commit_index: int) -> int:
        """Dispatch every entry up to ``commit_index`` not dispatched yet (normal entries;
        no-ops only move the cursor); returns how many records."""
        self.committed_index = max(self.committed_index, commit_index)
        files = self.raft_log.data
        reput = self.dispatch.reput_offset
        if files.files and reput < files.files[0].start:
            reput = files.files[0].start  # installed: the log begins at the leader's first retained file
        batch = self.dispatch.batch()
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
        self.dispatch.reput_offset = reput
        self.host.set_readable_end(reput)
        return batch.finish()

    def entry_at_record(self, phys_offset: int) -> tuple[int, int]:
        """The raft index and term of the entry holding the record at ``phys_offset``."""
        mf = self.raft_log.data.find(phys_offset)
        if mf is None:
            raise KeyError(phys_offset)
        head = dledger.decode_header(mf.view, phys_offset - dledger.HEADER_SIZE - mf.start)
        return head.raft_index, head.term
