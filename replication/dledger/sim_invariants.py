"""The simulator's record of each node and the invariants it checks after every step
(:mod:`replication.dledger.simulation`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replication.dledger.messages import Code, Message, PushKind, PushResponse
from replication.dledger.raft_log import Entry, MemoryLog
from replication.dledger.raft_node import HardState, RaftNode, Role
from replication.dledger.sim_disk import DiskModelLog


class InvariantViolation(AssertionError):
    """A safety or liveness property did not hold."""

@dataclass
class SimSync:
    done_at: float
    snapshot: Any  # what the node's log's snapshot() gave: _LogImage (MemoryLog) or DiskSnapshot
    hard: HardState
    commit_index: int
    messages: list[tuple[str, Message]]


@dataclass
class SimNode:
    id: str
    log: MemoryLog | DiskModelLog = field(default_factory=MemoryLog)
    durable_hard: HardState = field(default_factory=lambda: HardState(0, None))
    checkpoint_commit: int = -1
    raft: RaftNode | None = None
    incarnation: int = 0
    outbox: list[tuple[str, Message]] = field(default_factory=list)
    unsaved_hard: HardState | None = None
    sync: SimSync | None = None
    proposals: dict[int, bytes] = field(default_factory=dict)
    checked_commit: int = -1
    role: Role = Role.FOLLOWER
    term: int = 0

class Invariants:
    """Safety checks over the whole group, updated step by step."""

    def __init__(self, peers: int) -> None:
        self.majority = peers // 2 + 1
        self.leaders: dict[int, str] = {}  # term -> its leader
        self.committed: dict[int, Entry] = {}  # index -> the entry committed there
        self.entry_facts: dict[tuple[int, int], tuple[bytes, int, int]] = {}  # (index, term) -> body, magic, prev term
        self.acked: dict[int, bytes] = {}  # index -> body of an acknowledged append

    def fail(self, what: str) -> None:
        raise InvariantViolation(what)

    def check_node(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        log = node.log
        # log matching: an (index, term) pair pins the body and the term before it
        start = log.changed_from
        for i in range(max(start, log.first_index), log.last_index + 1):
            e = log.entry(i)
            assert e is not None
            prev = log.term_at(i - 1) if i > 0 else -1
            fact = (e.body, e.magic, -1 if prev is None else prev)
            known = self.entry_facts.setdefault((i, e.term), fact)
            if known != fact:
                self.fail(f"log matching: {node.id} holds a different entry {i} of term {e.term} "
                          f"(or a different one before it)")
        log.changed_from = log.last_index + 1
        # one leader per term
        if raft.role is Role.LEADER:
            other = self.leaders.setdefault(raft.term, node.id)
            if other != node.id:
                self.fail(f"two leaders in term {raft.term}: {other} and {node.id}")
            if node.role is not Role.LEADER or node.term != raft.term:
                self._check_leader_complete(node)
        node.role, node.term = raft.role, raft.term
        # committed entries never change; a node's commit index never goes back while it runs
        if raft.commit_index < node.checked_commit:
            self.fail(f"{node.id}'s commit index went back from {node.checked_commit} to {raft.commit_index}")
        for i in range(node.checked_commit + 1, raft.commit_index + 1):
            if i < log.first_index:  # installed past it: the leader had committed and deleted it
                if i not in self.committed:
                    self.fail(f"{node.id} calls entry {i} committed, below its first entry, but no node committed it")
                continue
            held = log.entry(i)
            if held is None:
                self.fail(f"{node.id} calls entry {i} committed but does not hold it")
            assert held is not None
            first = self.committed.setdefault(i, held)
            if first != held:
                self.fail(f"committed entry {i} changed: {first} on one node, {held} on {node.id}")
        node.checked_commit = raft.commit_index

    def _check_leader_complete(self, node: SimNode) -> None:
        for i, e in self.committed.items():
            if i >= node.log.first_index and node.log.entry(i) != e:
                self.fail(f"leader completeness: new leader {node.id} of term {node.term} lacks committed entry {i}")

    def check_ack(self, node: SimNode, index: int, body: bytes) -> None:
        e = self.committed.get(index)
        if e is None or e.body != body:
            self.fail(f"{node.id} acknowledged entry {index} that is not committed there ({e})")
        self.acked[index] = body

    def check_durable(self, nodes: list[SimNode]) -> None:
        """Every committed entry is on the disks of a majority (or deleted by retention, which
        deletes only what is committed: :meth:`check_retained`)."""
        for i, e in self.committed.items():
            held = sum(1 for n in nodes if n.log.durable.start > i or n.log.durable.entry(i) == e)
            if held < self.majority:
                self.fail(f"committed entry {i} is durable on {held} nodes only")

    def check_retained(self, node: SimNode, upto: int) -> None:
        """Retention on ``node`` is about to delete its entries through ``upto``: each must be
        committed (the entry every node commits there) and synced."""
        raft = node.raft
        assert raft is not None
        if upto > raft.commit_index:
            self.fail(f"{node.id} deletes entries through {upto}, past its commit index {raft.commit_index}")
        if upto > node.log.durable.last_index:
            self.fail(f"{node.id} deletes entries through {upto}, past what its disk holds")
        for i in range(node.log.first_index, upto + 1):
            if self.committed.get(i) != node.log.entry(i):
                self.fail(f"{node.id} deletes entry {i}, which is not the committed entry {i}")

    def check_answer(self, node: SimNode, msg: Message) -> None:
        """An answer that tells the leader this node holds entries up to ``end_index`` leaves
        only once its disk holds them (the leader counts them towards a commit)."""
        if not isinstance(msg, PushResponse) or msg.code is not Code.SUCCESS or msg.kind is PushKind.COMMIT \
                or msg.kind is PushKind.COMPARE:
            return
        durable = node.log.durable
        if msg.end_index >= durable.start and durable.entry(msg.end_index) is None:
            self.fail(f"{node.id} answers {msg.kind.value} holding entries to {msg.end_index}, but its disk "
                      f"holds them to {durable.last_index}")
