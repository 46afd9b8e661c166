"""The store of a raft member: a :class:`core.store.message_store.MessageStore` made with the
raft parts (:class:`RaftParts`, its ``log_parts``), so the raft log is the CommitLog (RocketMQ's
DLedgerCommitLog) and only committed entries reach the ConsumeQueues and the key index.

```
 commitlog/  [classic segments of an earlier master-slave era][raft data files from `base`]
                                                              ^ entries [48-byte header][record]
 a record's physical offset = its entry's position + 48 (ConsumeQueue entries, offset msgIds)
 readable end (commitlog.write_offset) = the end of the last committed entry dispatched
```

```
 RaftParts          the LogParts a member's store is made with (core.store.interfaces)
  |- raft_log       DiskRaftLog over the store's data files                (disk_log.py)
  |- log            RaftProposals: puts proposed to the raft node          (proposals.py)
  |- commits        RaftCommits: committed entries dispatched              (commits.py)
  |- recovery       RaftRecovery: the raft log opened, commits re-applied  (recovery.py)
  '- retention      RaftRetention: which data files may go                 (retention.py)
```
The leader puts a record by encoding it (queue offset and store time assigned here) and
proposing it to the raft node, which appends it to the log; the send waits for the commit
(:class:`replication.dledger.strategy.DLedgerReplication`). Every member dispatches entries as
its commit index grows, so followers serve committed messages too. A member takes writes
while it leads (the store's role is WRITER) and refuses them otherwise (REPLICA).

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

from core.store.interfaces import DispatchCursor, LogHost, Recovery
from replication.dledger.commits import RaftCommits
from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.proposals import Proposer, RaftProposals, record_at
from replication.dledger.recovery import RaftRecovery
from replication.dledger.retention import RaftRetention

NO_LEADER_YET = "no raft leader elected yet"


class RaftParts:
    """The raft parts of one member's store (``replication.mode = "dledger"``), made on the
    store's files: a :data:`core.store.interfaces.LogPartsFactory`. The store holds them as
    ``store.parts``; the raft replication drives them."""

    def __init__(self, host: LogHost, dispatch: DispatchCursor, classic: Recovery) -> None:
        self.raft_log = DiskRaftLog(host.root, host.config.segment_size_bytes, data=host.data, place_body=record_at)
        # puts are proposed to the raft node, and what this member proposed as leader is
        # dispatched at commit from the fields kept (instead of decoding the records again)
        self.proposals = RaftProposals(self.raft_log)
        self.commits = RaftCommits(host, dispatch, self.raft_log, self.proposals)
        self.recovery = RaftRecovery(host, dispatch, classic, self.raft_log, self.proposals, self.commits)
        self.retention = RaftRetention(host.config, dispatch, self.raft_log, self.commits)
        self.dispatch_committed = self.commits.dispatch_committed
        self.entry_at_record = self.commits.entry_at_record

    @property
    def log(self) -> RaftProposals:
        return self.proposals

    @property
    def committed_index(self) -> int:
        return self.commits.committed_index

    def attach_proposer(self, propose: Proposer) -> None:
        """Appends go through ``propose`` (the raft member's: entries to its log and its
        followers, or a Code when it is not the leader). Until one is attached, appends are
        refused NOT_LEADER; the replication attaches its driver's once, at start."""
        if self.proposals.proposer is not None:
            raise RuntimeError("a proposer is attached already")
        self.proposals.proposer = propose

    def close(self) -> None:
        self.raft_log.close()
