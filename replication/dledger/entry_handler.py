"""The follower's EntryHandler: applies a leader's pushes to the local log in index order.

APPEND requests wait in a map keyed by their first index until the log reaches them (pushes
may arrive out of order); COMPARE, TRUNCATE and COMMIT requests queue apart and are served
first. A gap that stays open longer than ``gap_timeout_s`` (the entries before it were lost on
the way) is answered INCONSISTENT_STATE, which sends the leader back to COMPARE: DLedger's
fast-forward check for a stuck write-request map.

COMPARE and TRUNCATE carry the leader's sequence number; one not newer than the last served (a
duplicate, or an old one overtaken on the way) is dropped unanswered: a stale TRUNCATE would
cut entries this follower has since appended and acknowledged, entries the leader may already
count as committed (the leader ignores answers to old sequence numbers anyway).

An INSTALL (the leader no longer holds what this log would continue from) resets the log to
continue from the leader's first retained entry and appends the run it carries, unless this
follower holds a committed entry at or after it: then it agrees with the leader there, and the
answer sends the leader back to COMPARE.

APPEND and COMMIT answers echo the request's sequence number too (the leader's latest
COMPARE/TRUNCATE/INSTALL when it pushed): an answer computed before a later TRUNCATE cut the
entries it names, but sent after, must not move the leader's watermark past what this log holds.

The follower only commits entries it knows match the current leader's log (``matched_index``,
established by a TRUNCATE in this term and extended by APPENDs): a stale tail from an older
term is never marked committed because the leader's commit index has passed its length.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from replication.dledger.messages import Code, PushEntry, PushKind, PushResponse
from replication.dledger.raft_log import RaftLog, term_of

NOT_MATCHED = -2


@dataclass(slots=True)
class _Waiting:
    request: PushEntry
    arrived: float


class EntryHandler:
    """Pushes from the leader of one term."""

    def __init__(self, self_id: str, term: int, max_pending: int, gap_timeout_s: float) -> None:
        self.self_id = self_id
        self.term = term
        self.max_pending = max_pending
        self.gap_timeout_s = gap_timeout_s
        self.matched_index = NOT_MATCHED
        self.leader_commit = -1
        self._writes: dict[int, _Waiting] = {}
        self._control: collections.deque[PushEntry] = collections.deque(maxlen=max_pending)
        self._control_seq = 0  # the latest COMPARE/TRUNCATE served in this term

    def offer(self, req: PushEntry, now: float) -> None:
        """Queue a push of this term's leader (the node checked term and leader)."""
        self.leader_commit = max(self.leader_commit, req.commit_index)
        if req.kind is PushKind.APPEND:
            if req.index in self._writes or len(self._writes) < self.max_pending:
                self._writes[req.index] = _Waiting(req, now)
        else:
            self._control.append(req)

    def process(self, log: RaftLog, commit_index: int, now: float) -> list[PushResponse]:
        """Serve what can be served now; returns the answers (sent once the log is synced)."""
        out: list[PushResponse] = []
        while self._control:
            req = self._control.popleft()
            if req.kind is not PushKind.COMMIT:
                if req.seq <= self._control_seq:
                    continue  # a duplicate or an overtaken request: acting on it could cut acked entries
                self._control_seq = req.seq
            out.append(self._control_request(req, log, commit_index))
        writes = self._writes
        while writes:
            nxt = log.last_index + 1
            stale = [i for i in writes if i < nxt]
            for i in stale:
                out.append(self._append(writes.pop(i).request, log))
            waiting = writes.pop(nxt, None)
            if waiting is not None:
                out.append(self._append(waiting.request, log))
                continue
            if writes and now >= min(w.arrived for w in writes.values()) + self.gap_timeout_s:
                first = min(writes)  # a gap before it has been open too long: start over
                stuck_seq = writes[first].request.seq
                writes.clear()
                out.append(self._answer(PushKind.APPEND, Code.INCONSISTENT_STATE, first, log, seq=stuck_seq))
            break
        return out

    def next_wakeup(self) -> float | None:
        if not self._writes:
            return None
        return min(w.arrived for w in self._writes.values()) + self.gap_timeout_s

    def commit_limit(self) -> int:
        """The highest index this follower may call committed."""
        return min(self.leader_commit, self.matched_index) if self.matched_index != NOT_MATCHED else -1

    def _answer(self, kind: PushKind, code: Code, index: int, log: RaftLog, count: int = 0,
                seq: int = 0) -> PushResponse:
        return PushResponse(self.term, self.self_id, kind, code, index, log.last_index, count, seq)

    def _control_request(self, req: PushEntry, log: RaftLog, commit_index: int) -> PushResponse:
        if req.kind is PushKind.COMPARE:
            self._writes.clear()  # the leader starts over from what this answer tells it
            if req.index < 0:
                same = True
            else:
                same = bool(req.entries) and log.term_at(req.index) == term_of(req.entries, 0)
            return self._answer(req.kind, Code.SUCCESS if same else Code.INCONSISTENT_STATE, req.index, log, seq=req.seq)
        if req.kind is PushKind.TRUNCATE:
            if req.index >= 0 and log.term_at(req.index) is None:
                return self._answer(req.kind, Code.INCONSISTENT_STATE, req.index, log, seq=req.seq)
            # entries up to the commit index are the leader's too (every leader holds every
            # committed entry): keep them, and say so, rather than cut and fetch them again;
            # so are entries of the leader's own term (one leader a term, log matching): cutting
            # them would unsay an acknowledgement the leader has counted towards a commit
            keep = max(req.index, min(commit_index, log.last_index))
            while keep < log.last_index and log.term_at(keep + 1) == req.term:
                keep += 1
            log.truncate_after(keep)
            self._writes.clear()
            self.matched_index = keep
            return self._answer(req.kind, Code.SUCCESS, req.index, log, seq=req.seq)
        if req.kind is PushKind.INSTALL:
            return self._install(req, log, commit_index)
        if self.matched_index == NOT_MATCHED:
            # restarted (or wiped) since the leader matched this log: have it compare again, or
            # an idle leader would only ever send COMMITs it cannot apply here
            return self._answer(req.kind, Code.INCONSISTENT_STATE, req.index, log, seq=req.seq)
        return self._answer(req.kind, Code.SUCCESS, req.index, log, seq=req.seq)  # COMMIT: noted in offer

    def _install(self, req: PushEntry, log: RaftLog, commit_index: int) -> PushResponse:
        if min(commit_index, log.last_index) >= req.index:
            return self._answer(req.kind, Code.INCONSISTENT_STATE, req.index, log, seq=req.seq)
        log.reset(req.index, req.prev_term, req.install_end)
        log.append(req.entries)
        self._writes.clear()
        self.matched_index = log.last_index
        return self._answer(req.kind, Code.SUCCESS, req.index, log, len(req.entries), seq=req.seq)

    def _append(self, req: PushEntry, log: RaftLog) -> PushResponse:
        if self.matched_index == NOT_MATCHED:
            return self._answer(req.kind, Code.INCONSISTENT_STATE, req.index, log, seq=req.seq)
        entries = req.entries  # indexes req.index, req.index + 1, ...
        held = max(0, min(len(entries), log.last_index + 1 - req.index))  # those the log has already
        if req.index > log.last_index + 1:
            return self._answer(req.kind, Code.INCONSISTENT_STATE, req.index, log, seq=req.seq)
        for i in range(max(0, log.first_index - req.index), held):  # those before first_index: committed
            if log.term_at(req.index + i) != term_of(entries, i):  # not after this term's TRUNCATE
                return self._answer(req.kind, Code.INCONSISTENT_STATE, req.index, log, seq=req.seq)
        if held < len(entries):
            log.append(entries[held:])
        end = req.index + len(entries) - 1
        self.matched_index = max(self.matched_index, end)
        return self._answer(req.kind, Code.SUCCESS, req.index, log, len(req.entries), seq=req.seq)
