"""The leader's QuorumAckChecker: per-term peer watermarks -> the commit index, and the
appends waiting for it.

Unlike DLedger 0.2.x, the commit index only moves to an entry of the leader's own term (Raft
section 5.4.2): an older entry that a majority holds may still be overwritten by a later leader
that never saw it, so it is committed only together with an entry of the current term after it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass, field

from replication.dledger.messages import Code
from replication.dledger.raft_log import RaftLog


@dataclass(frozen=True, slots=True)
class Completion:
    """The outcome of ``count`` consecutive proposed appends (proposals ``proposal``, ...,
    entries ``index``, ...): SUCCESS once committed, or why not (then the entries may still
    commit later: a client retry can duplicate them)."""

    proposal: int
    code: Code
    index: int
    term: int
    count: int = 1

    def each(self) -> Iterator[Completion]:
        """One completion per proposal."""
        if self.count == 1:
            yield self
            return
        for i in range(self.count):
            yield Completion(self.proposal + i, self.code, self.index + i, self.term)


@dataclass(slots=True)
class _Pending:
    """Proposals ``proposal`` .. ``proposal + count - 1``, entries ``index`` .. on."""

    proposal: int
    index: int
    count: int
    deadline: float


@dataclass
class QuorumAckChecker:
    """Commit bookkeeping of one leader term."""

    self_id: str
    peers: tuple[str, ...]  # every member, self included
    term: int
    wait_ack_timeout_s: float
    commit_index: int = -1
    watermarks: dict[int, dict[str, int]] = field(default_factory=dict)  # term -> peer -> acked index
    # waiting appends in index order (so also in deadline order: one timeout for all), a
    # proposal's run of entries as one
    _pending: collections.deque[_Pending] = field(default_factory=collections.deque)
    _pending_entries: int = 0

    @property
    def pending_count(self) -> int:
        """Entries waiting for the quorum."""
        return self._pending_entries

    def start_term(self, term: int, commit_index: int) -> list[Completion]:
        """This node leads ``term`` now: appends waiting from older terms end TERM_CHANGED and
        the watermarks of older terms are dropped."""
        ended = self.fail_all(Code.TERM_CHANGED)
        self.term = term
        self.commit_index = max(self.commit_index, commit_index)
        self.watermarks = {term: {p: -1 for p in self.peers}}
        return ended

    def fail_all(self, code: Code) -> list[Completion]:
        out = [Completion(p.proposal, code, p.index, self.term, p.count) for p in self._pending]
        self._pending.clear()
        self._pending_entries = 0
        return out

    def add(self, proposal: int, index: int, now: float, count: int = 1) -> None:
        """Proposals ``proposal``, ... appended as entries ``index``, ... now."""
        self._pending.append(_Pending(proposal, index, count, now + self.wait_ack_timeout_s))
        self._pending_entries += count

    def ack(self, peer: str, term: int, index: int) -> None:
        """``peer`` durably holds this term's leader's entries up to ``index``."""
        marks = self.watermarks.get(term)
        if marks is not None and index > marks.get(peer, -1):
            marks[peer] = index

    def quorum_index(self) -> int:
        """The highest index a majority of members hold, by this term's watermarks."""
        marks = sorted(self.watermarks.get(self.term, {}).values(), reverse=True)
        majority = len(self.peers) // 2 + 1
        return marks[majority - 1] if len(marks) >= majority else -1

    def advance(self, log: RaftLog, now: float) -> list[Completion]:
        """Move the commit index as far as this term's rule allows; complete what it covers and
        time out appends waiting too long."""
        out: list[Completion] = []
        q = self.quorum_index()
        if q > self.commit_index and log.term_at(q) == self.term:
            self.commit_index = q
        pending, commit = self._pending, self.commit_index
        while pending:
            p = pending[0]
            if p.index <= commit:
                done = min(p.count, commit - p.index + 1)
                out.append(Completion(p.proposal, Code.SUCCESS, p.index, self.term, done))
                self._pending_entries -= done
                if done < p.count:  # the rest of the run waits on
                    p.proposal, p.index, p.count = p.proposal + done, p.index + done, p.count - done
                    continue
            elif now >= p.deadline:
                out.append(Completion(p.proposal, Code.WAIT_QUORUM_ACK_TIMEOUT, p.index, self.term, p.count))
                self._pending_entries -= p.count
            else:
                break
            pending.popleft()
        return out

    def next_deadline(self) -> float | None:
        return self._pending[0].deadline if self._pending else None
