"""The leader's EntryDispatcher: one per follower, bringing the follower's log to the leader's.

```
        +--- INCONSISTENT_STATE (the follower lacks, or differs at, compare_index)
        v   |
  --> COMPARE --same entry--> TRUNCATE --ok--> APPEND (+ COMMIT pushes when idle)
        ^   |                                    ^ |
        |   +-- below our first entry --> INSTALL -+ +-- behind our first entry --> INSTALL
        +------------ INCONSISTENT_STATE --------+
```
COMPARE walks back from the leader's last entry (jumping to the follower's end when that is
lower) until both hold the same entry; TRUNCATE tells the follower to drop what it has after
it (it keeps its committed prefix and says where it ended); APPEND then streams batches, at
most ``max_pending`` entries past the follower's watermark, and pushes again from the
watermark when a batch stays unanswered for ``push_timeout_s``. While the follower lags more
than ``throttle_point_bytes`` behind, pushes to it are held to ``quota_bytes_per_s``. Every
push carries the commit index; with nothing to append, a COMMIT push goes out when the commit
index moved or ``commit_interval_s`` passed. COMPARE, TRUNCATE and INSTALL carry a sequence
number the answer echoes, so a late answer to an earlier one cannot move the walk; APPEND and
COMMIT pushes carry the latest one, so an answer to a push from before it cannot either.

When the follower needs entries retention deleted here (the walk goes below our first entry,
or the follower falls behind it while we append), an INSTALL tells it to drop its log and
continue from our first retained entry, carrying the first run; APPEND goes on from there. So
a lagging follower receives the retained data files as they lie, entry runs byte for byte.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from replication.dledger.messages import Code, PushEntry, PushKind, PushResponse
from replication.dledger.raft_log import RaftLog, body_bytes


class DispatchState(enum.Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    INSTALL = "INSTALL"
    APPEND = "APPEND"


@dataclass(frozen=True, slots=True)
class PushLimits:
    """DLedger's push limits (maxPendingSize, maxPushTimeOutMs, peerPushQuota, ...)."""

    max_pending: int = 1000
    push_timeout_s: float = 1.0
    batch_bytes: int = 256 * 1024
    batch_count: int = 512
    commit_interval_s: float = 1.0
    quota_bytes_per_s: int = 20 * 1024 * 1024
    throttle_point_bytes: int = 300 * 1024 * 1024


class EntryDispatcher:
    """Pushes for one follower during one leader term."""

    def __init__(self, leader: str, peer: str, term: int, limits: PushLimits, log: RaftLog) -> None:
        self.leader = leader
        self.peer = peer
        self.term = term
        self.limits = limits
        self.state = DispatchState.COMPARE
        self.compare_index = log.last_index
        self.watermark = -1  # the follower holds our entries up to here (acked)
        self.write_index = 0  # next entry to push in APPEND
        self.follower_end = -1
        # APPEND batches in flight, oldest first: first index -> (count, sent at, bytes)
        self.pending: dict[int, tuple[int, float, int]] = {}
        self._request_out_at: float | None = None  # a COMPARE/TRUNCATE awaiting its answer
        self._seq = 0  # of the latest COMPARE/TRUNCATE: a late answer to an older one is ignored
        self._commit_sent = -2
        self._commit_sent_at = -1e18
        self._quota_window = 0.0
        self._quota_used = 0

    # ------------------------------------------------------------------ output

    def pushes(self, log: RaftLog, commit_index: int, now: float) -> list[PushEntry]:
        """What to send to the follower now."""
        if self.state is DispatchState.APPEND and self.write_index < log.first_index:
            self._to_install()  # it needs entries retention deleted here
        if self.state is not DispatchState.APPEND:
            if self._request_out_at is not None and now < self._request_out_at + self.limits.push_timeout_s:
                return []
            self._request_out_at = now
            return [self._compare_or_truncate(log, commit_index)]
        out: list[PushEntry] = []
        self._resend_timed_out(now)
        while self.write_index <= log.last_index and self._quota_allows(log, now):
            room = self.limits.max_pending - (self.write_index - self.watermark - 1)  # entries in flight
            if room <= 0:
                break
            first = self.write_index
            batch = log.entries(first, min(room, self.limits.batch_count), self.limits.batch_bytes)
            if not batch:
                break
            size = body_bytes(batch)
            self.pending[first] = (len(batch), now, size)
            self._quota_used += size
            out.append(PushEntry(self.term, self.leader, PushKind.APPEND, first, batch, commit_index, self._seq))
            self.write_index = first + len(batch)
        if out:
            self._commit_sent, self._commit_sent_at = commit_index, now
        elif commit_index != self._commit_sent or now >= self._commit_sent_at + self.limits.commit_interval_s:
            self._commit_sent, self._commit_sent_at = commit_index, now
            out.append(PushEntry(self.term, self.leader, PushKind.COMMIT, -1, (), commit_index, self._seq))
        return out

    def _to_install(self) -> None:
        self.state = DispatchState.INSTALL
        self.pending.clear()
        self._request_out_at = None

    def _compare_or_truncate(self, log: RaftLog, commit_index: int) -> PushEntry:
        self._seq += 1
        if self.state is DispatchState.COMPARE and self.compare_index < log.first_index and log.first_index > 0:
            self.state = DispatchState.INSTALL  # what we would compare at is gone
        if self.state is DispatchState.INSTALL:
            first = log.first_index
            prev_term = log.term_at(first - 1)
            run = log.entries(first, self.limits.batch_count, self.limits.batch_bytes)
            return PushEntry(self.term, self.leader, PushKind.INSTALL, first, run, commit_index, self._seq,
                             -1 if prev_term is None else prev_term, commit_index)
        if self.state is DispatchState.TRUNCATE:
            return PushEntry(self.term, self.leader, PushKind.TRUNCATE, self.compare_index, (), commit_index,
                             self._seq)
        entry = log.entry(self.compare_index)
        return PushEntry(self.term, self.leader, PushKind.COMPARE, self.compare_index,
                         (entry,) if entry is not None else (), commit_index, self._seq)

    def _resend_timed_out(self, now: float) -> None:
        """DLedger's doCheckAppendResponse: when a batch waits too long for its answer, push
        again from the entry after the watermark (the follower drops what it already has)."""
        if self.pending and now >= next(iter(self.pending.values()))[1] + self.limits.push_timeout_s:
            self.pending.clear()
            self.write_index = self.watermark + 1

    def _quota_allows(self, log: RaftLog, now: float) -> bool:
        """The per-follower quota, applied only while the follower is far behind."""
        if now >= self._quota_window + 1.0:
            self._quota_window, self._quota_used = now, 0
        if self._quota_used < self.limits.quota_bytes_per_s:
            return True
        behind = (log.last_index - self.write_index) * body_bytes(log.entries(self.write_index, 1, 1))
        return behind <= self.limits.throttle_point_bytes

    def next_wakeup(self, now: float) -> float:
        """When :meth:`pushes` may have something new to say without any input (deadlines
        are compared as ``now >= start + period`` everywhere, so a wake-up at one never
        finds it a rounding error short)."""
        if self.state is not DispatchState.APPEND:
            return (now if self._request_out_at is None else self._request_out_at) + self.limits.push_timeout_s
        times = [self._commit_sent_at + self.limits.commit_interval_s]
        if self.pending:
            times.append(next(iter(self.pending.values()))[1] + self.limits.push_timeout_s)
        if self._quota_used >= self.limits.quota_bytes_per_s:
            times.append(self._quota_window + 1.0)
        return min(times)

    # ------------------------------------------------------------------ input

    def on_response(self, resp: PushResponse, log: RaftLog) -> int | None:
        """Apply the follower's answer; returns its new watermark when it moved."""
        self.follower_end = resp.end_index
        if resp.seq != self._seq and (resp.seq or (resp.kind is not PushKind.APPEND and resp.kind is not PushKind.COMMIT)):
            # a late answer to an earlier COMPARE or TRUNCATE, or to a push from before the latest
            # one: the follower moved on since (an APPEND answer may name entries a later
            # TRUNCATE cut). Sequence 0 is a peer that does not echo it on pushes (older mqctl).
            return None
        if resp.kind is PushKind.COMPARE and self.state is DispatchState.COMPARE and resp.index == self.compare_index:
            self._request_out_at = None
            if resp.code is Code.SUCCESS:
                self.state = DispatchState.TRUNCATE
            elif self.compare_index < 0:
                self.state = DispatchState.TRUNCATE  # nothing in common: truncate everything
            else:
                self.compare_index = min(self.compare_index - 1, resp.end_index)
            return None
        if resp.kind is PushKind.TRUNCATE and self.state is DispatchState.TRUNCATE and resp.index == self.compare_index:
            self._request_out_at = None
            if resp.code is Code.SUCCESS:  # the follower kept up to its end (at least compare_index)
                return self._to_append(max(self.compare_index, resp.end_index))
            self._back_to_compare(log)
            return None
        if resp.kind is PushKind.INSTALL and self.state is DispatchState.INSTALL:
            self._request_out_at = None
            if resp.code is Code.SUCCESS:  # the follower holds our entries from our first to its end
                return self._to_append(resp.end_index)
            self._back_to_compare(log)  # it holds committed entries after all: find them
            return None
        if self.state is not DispatchState.APPEND:
            return None
        if resp.kind is PushKind.APPEND or resp.kind is PushKind.COMMIT:
            if resp.code is Code.SUCCESS:
                self.pending.pop(resp.index, None)
                if resp.kind is PushKind.APPEND and resp.end_index > self.watermark:
                    self.watermark = resp.end_index
                    for first in [i for i, (n, _sent, _size) in self.pending.items() if i + n - 1 <= self.watermark]:
                        del self.pending[first]
                    return self.watermark
                return None
            if resp.code is Code.INCONSISTENT_STATE:
                self._back_to_compare(log)
        return None

    def _to_append(self, watermark: int) -> int:
        self.state = DispatchState.APPEND
        self.watermark = watermark
        self.write_index = watermark + 1
        self.pending.clear()
        return watermark

    def _back_to_compare(self, log: RaftLog) -> None:
        self.state = DispatchState.COMPARE
        self.compare_index = log.last_index  # from the top again: the follower's end may have moved
        self.pending.clear()
        self._request_out_at = None
