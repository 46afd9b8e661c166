"""The sans-IO raft node: roles, terms and votes, heartbeats, leadership transfer, and the
entry pushing of :mod:`dispatcher`, :mod:`entry_handler` and :mod:`quorum` composed (together
DLedger's DLedgerEntryPusher: EntryDispatcher, EntryHandler, QuorumAckChecker).

A driver (trio tasks in a broker, the simulator in tests) feeds it messages, the time and
proposals, and after every input takes a :class:`Ready` and carries it out **in order**:

1. persist ``hard_state`` (term and vote) when present,
2. sync the log (it holds everything the node appended or truncated so far),
3. send ``messages``, then call :meth:`RaftNode.log_synced` with the synced last index,
4. hand ``completions`` to the waiting producers and make entries up to ``commit_index``
   readable.

So no vote or append answer leaves before the state it promises is on disk.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field

from formats.dledger import MAGIC_NOOP
from replication.dledger.dispatcher import EntryDispatcher, PushLimits
from replication.dledger.entry_handler import EntryHandler
from replication.dledger.messages import (
    Code,
    HeartBeat,
    HeartBeatResponse,
    Message,
    PushEntry,
    PushResponse,
    TakeLeadership,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from replication.dledger.quorum import Completion, QuorumAckChecker
from replication.dledger.raft_log import BodyRun, Entry, RaftLog


class Role(enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """Timings and limits (DLedgerConfig's, with shorter heartbeats for a faster failover)."""

    heartbeat_interval_s: float = 0.5
    heartbeat_leak: int = 3  # heartbeats a follower misses before it stands for election
    election_jitter_s: float = 0.5
    candidate_timeout_min_s: float = 0.3
    candidate_timeout_max_s: float = 0.6
    wait_ack_timeout_s: float = 2.5
    max_pending_appends: int = 10_000  # appends awaiting commit before LEADER_PENDING_FULL (maxPendingRequestsNum)
    transfer_wait_entries: int = 1000  # a transferee may lag this many entries at the start
    preferred_leader: str | None = None
    push: PushLimits = field(default_factory=PushLimits)
    # True: fdatasync the log before any append is answered or counted (store.flush = "sync",
    # and the simulator's model); False: answer from the page cache and fdatasync every
    # flush_interval_s, as DLedger's default and an async-flush master do
    sync_appends: bool = True
    flush_interval_s: float = 0.5

    @property
    def leader_lease_s(self) -> float:
        """How long a follower trusts a silent leader (and a leader a silent majority)."""
        return self.heartbeat_interval_s * self.heartbeat_leak


@dataclass(frozen=True, slots=True)
class HardState:
    term: int
    voted_for: str | None


@dataclass(slots=True)
class Ready:
    """What the driver carries out after an input (see the module docstring)."""

    hard_state: HardState | None
    messages: list[tuple[str, Message]]
    completions: list[Completion]
    commit_index: int
    role: Role
    leader: str | None
    term: int


def early_messages(ready: Ready, log_dirty: bool) -> tuple[list[tuple[str, Message]], list[tuple[str, Message]]]:
    """Split a Ready's messages into those that may leave before the log sync and those that
    wait for it: a leader's pushes and heartbeats claim nothing about its own disk (Raft
    section 10.2.1; the leader counts itself only once synced), so they go at once unless the
    term and vote must reach the disk first. The broker's driver and the simulator both use it."""
    if ready.hard_state is not None or not log_dirty:
        return [], ready.messages
    early: list[tuple[str, Message]] = []
    late: list[tuple[str, Message]] = []
    for dst, msg in ready.messages:
        (early if isinstance(msg, (PushEntry, HeartBeat)) else late).append((dst, msg))
    return early, late


class RaftNode:
    """One member of a raft group of ``peers`` (every member's id, this one's included).

    One concept, 30 methods: the sans-IO raft state machine of one member (etcd's ``raft`` is
    one type too). Inputs, roles and message handlers all read and move the same term, vote,
    commit index and peers' progress."""

    def __init__(self, node_id: str, peers: tuple[str, ...], log: RaftLog, settings: RaftSettings,
                 rng: random.Random, now: float, hard_state: HardState = HardState(0, None),
                 commit_index: int = -1) -> None:
        if node_id not in peers:
            raise ValueError(f"{node_id} is not one of the peers {peers}")
        self.id = node_id
        self.peers = tuple(sorted(peers))
        self.others = tuple(p for p in self.peers if p != node_id)
        self.log = log
        self.settings = settings
        self.rng = rng
        self.term = hard_state.term
        self.voted_for = hard_state.voted_for
        self.role = Role.FOLLOWER
        self.leader: str | None = None
        self.commit_index = min(commit_index, log.last_index)
        self.synced_index = log.last_index  # a restarted node's log is what the disk kept
        self._hard_state_dirty = False
        self._messages: list[tuple[str, Message]] = []
        self._completions: list[Completion] = []
        self._votes: set[str] = set()
        self._election_at = now + self._follower_timeout()
        self._last_leader_contact = -1e18
        self._heartbeat_at = 0.0
        self._heard_from: dict[str, float] = {}
        self._dispatchers: dict[str, EntryDispatcher] = {}
        self._quorum = QuorumAckChecker(node_id, self.peers, self.term, settings.wait_ack_timeout_s)
        self._handler = EntryHandler(node_id, self.term, settings.push.max_pending, settings.push.push_timeout_s)
        self._next_proposal = 0
        self._transfer_to: str | None = None
        self._transfer_until = 0.0
        self._pre_voting = False
        self.elections_started = 0

    # ------------------------------------------------------------------ inputs

    def tick(self, now: float) -> None:
        """Let time pass: elections, heartbeats, push timeouts, ack timeouts."""
        if self.role is Role.LEADER:
            if now >= self._heartbeat_at:
                self._heartbeat_at = now + self.settings.heartbeat_interval_s
                for peer in self.others:
                    self._send(peer, HeartBeat(self.term, self.id, self.commit_index))
            if not self._majority_heard(now):
                self._become_follower(self.term, None, now)  # cut off from the group: stop leading
                return
            self._check_transfer(now)
            self._advance_commit(now)  # times out appends waiting too long
        elif now >= self._election_at:
            if self.log.last_index < self.log.install_end:
                # installed from a leader and not yet holding what it had committed then: this
                # log could not win, so do not stand (votes for others are still answered)
                self._election_at = now + self._follower_timeout()
            else:
                self._start_pre_vote(now)
        else:
            self._serve_pushes(now)

    def receive(self, msg: Message, now: float) -> None:
        """A message from a peer."""
        if msg.term > self.term and not (isinstance(msg, VoteRequest | VoteResponse) and msg.pre_vote):
            sender_leads = isinstance(msg, HeartBeat | PushEntry | TakeLeadership)
            if isinstance(msg, VoteRequest) and not msg.transfer and self._leader_alive(now):
                self._send(msg.candidate, VoteResponse(self.term, self.id, VoteResult.REJECT_ALREADY_HAS_LEADER))
                return  # a live leader: do not let a partitioned node's term disrupt it
            self._become_follower(msg.term, msg.leader if sender_leads else None, now)  # type: ignore[union-attr]
        if isinstance(msg, VoteRequest):
            self._on_vote_request(msg, now)
        elif isinstance(msg, VoteResponse):
            self._on_vote_response(msg, now)
        elif isinstance(msg, HeartBeat):
            self._on_heartbeat(msg, now)
        elif isinstance(msg, HeartBeatResponse):
            self._heard_from[msg.peer] = now
        elif isinstance(msg, PushEntry):
            self._on_push(msg, now)
        elif isinstance(msg, PushResponse):
            self._on_push_response(msg, now)
        elif (isinstance(msg, TakeLeadership) and msg.term == self.term and msg.leader == self.leader
              and self.role is Role.FOLLOWER):
            self._start_election(now, transfer=True)

    def propose(self, bodies: list[bytes], now: float) -> range | Code:
        """Append ``bodies`` as entries of this term, one run; their proposal numbers, or why
        not."""
        if self.role is not Role.LEADER:
            return Code.NOT_LEADER
        if self._transfer_to is not None:
            return Code.LEADER_TRANSFERRING
        if self._quorum.pending_count + len(bodies) > self.settings.max_pending_appends:
            return Code.LEADER_PENDING_FULL
        first = self.log.last_index + 1
        self.log.append(BodyRun(first, self.term, bodies))
        proposal = self._next_proposal
        self._next_proposal += len(bodies)
        self._quorum.add(proposal, first, now, len(bodies))
        return range(proposal, proposal + len(bodies))

    def log_synced(self, index: int, now: float) -> None:
        """The driver synced the log through ``index``."""
        self.synced_index = min(index, self.log.last_index)
        if self.role is Role.LEADER:
            self._quorum.ack(self.id, self.term, self.synced_index)
            self._advance_commit(now)

    def transfer_leadership(self, target: str, now: float) -> str | None:
        """Hand leadership to ``target`` once it holds every entry; None, or why not."""
        if self.role is not Role.LEADER:
            return f"{self.id} is not the leader (the leader is {self.leader or 'unknown'})"
        if target == self.id:
            return None
        if target not in self.others:
            return f"{target} is not a member of this group {self.peers}"
        lag = self.log.last_index - self._dispatchers[target].watermark
        if lag > self.settings.transfer_wait_entries:
            return f"{target} is {lag} entries behind (at most {self.settings.transfer_wait_entries})"
        self._transfer_to = target
        self._transfer_until = now + self.settings.leader_lease_s + self.settings.election_jitter_s
        self._check_transfer(now)
        return None

    # ------------------------------------------------------------------ output

    def take_ready(self, now: float) -> Ready:
        """Everything to carry out now (see the module docstring)."""
        if self.role is Role.LEADER:
            for peer, dispatcher in self._dispatchers.items():
                for push in dispatcher.pushes(self.log, self.commit_index, now):
                    self._send(peer, push)
        hard = HardState(self.term, self.voted_for) if self._hard_state_dirty else None
        self._hard_state_dirty = False
        messages, self._messages = self._messages, []
        completions, self._completions = self._completions, []
        return Ready(hard, messages, completions, self.commit_index, self.role, self.leader, self.term)

    def next_wakeup(self, now: float) -> float:
        """The time :meth:`tick` next has something to do."""
        if self.role is Role.LEADER:
            times = [self._heartbeat_at]
            times.extend(d.next_wakeup(now) for d in self._dispatchers.values())
            deadline = self._quorum.next_deadline()
            if deadline is not None:
                times.append(deadline)
            if self._transfer_to is not None:
                times.append(self._transfer_until)
            return min(times)
        gap = self._handler.next_wakeup() if self.role is Role.FOLLOWER and self.leader is not None else None
        return self._election_at if gap is None else min(self._election_at, gap)

    def watermarks(self) -> dict[str, int]:
        """Per member, the index it is known to hold (leader only; others report themselves)."""
        if self.role is not Role.LEADER:
            return {self.id: self.log.last_index}
        marks = {peer: d.watermark for peer, d in self._dispatchers.items()}
        marks[self.id] = self.synced_index
        return marks

    # ------------------------------------------------------------------ roles

    def _follower_timeout(self) -> float:
        return self.settings.leader_lease_s + self.rng.uniform(0, self.settings.election_jitter_s)

    def _leader_alive(self, now: float) -> bool:
        if self.role is Role.LEADER:
            return True
        return self.leader is not None and now - self._last_leader_contact < self.settings.leader_lease_s

    def _has_majority(self) -> bool:
        """Whether the votes (or pre-votes) gathered so far are a majority of the members."""
        return len(self._votes) * 2 > len(self.peers)

    def _majority_heard(self, now: float) -> bool:
        lease = self.settings.leader_lease_s + self.settings.election_jitter_s
        heard = 1 + sum(1 for p in self.others if now - self._heard_from.get(p, -1e18) < lease)
        return heard * 2 > len(self.peers)

    def _set_hard_state(self, term: int, voted_for: str | None) -> None:
        if (term, voted_for) != (self.term, self.voted_for):
            self.term, self.voted_for = term, voted_for
            self._hard_state_dirty = True

    def _become_follower(self, term: int, leader: str | None, now: float) -> None:
        was_leader = self.role is Role.LEADER
        if term > self.term:
            self._set_hard_state(term, None)
        if was_leader:
            self._completions.extend(self._quorum.fail_all(Code.TERM_CHANGED))
            self._dispatchers.clear()
            self._transfer_to = None
        if was_leader or self._handler.term != self.term:
            self._handler = EntryHandler(self.id, self.term, self.settings.push.max_pending,
                                         self.settings.push.push_timeout_s)
        was_follower = self.role is Role.FOLLOWER and not self._pre_voting
        self.role = Role.FOLLOWER
        self._pre_voting = False
        self.leader = leader
        if leader is not None:
            self._last_leader_contact = now
        if leader is not None or not was_follower:
            # a higher term alone does not restart a follower's timer (Raft: only a leader's
            # message or a granted vote do), or a node that cannot win would delay those that can
            self._election_at = now + self._follower_timeout()

    def _start_pre_vote(self, now: float) -> None:
        """Ask before standing (Raft thesis 9.6): a node whose log cannot win, or that is cut off
        from a live leader's followers, gets no pre-votes and so never raises the term."""
        self.role = Role.FOLLOWER
        self._pre_voting = True
        self.leader = None
        self._votes = {self.id}
        self._election_at = now + self.rng.uniform(self.settings.candidate_timeout_min_s,
                                                   self.settings.candidate_timeout_max_s)
        request = VoteRequest(self.term + 1, self.id, self.log.last_index, self.log.last_term, pre_vote=True)
        for peer in self.others:
            self._send(peer, request)
        if self._has_majority():
            self._start_election(now, transfer=False)

    def _start_election(self, now: float, *, transfer: bool) -> None:
        self.elections_started += 1
        self._pre_voting = False
        self.role = Role.CANDIDATE
        self.leader = None
        self._set_hard_state(self.term + 1, self.id)
        self._votes = {self.id}
        self._election_at = now + self.rng.uniform(self.settings.candidate_timeout_min_s,
                                                   self.settings.candidate_timeout_max_s)
        request = VoteRequest(self.term, self.id, self.log.last_index, self.log.last_term, transfer)
        for peer in self.others:
            self._send(peer, request)
        self._maybe_win(now)

    def _maybe_win(self, now: float) -> None:
        if self.role is not Role.CANDIDATE or not self._has_majority():
            return
        self.role = Role.LEADER
        self.leader = self.id
        self._heard_from = {p: now for p in self.others}  # a fresh lease to prove itself in
        self._heartbeat_at = now
        self._completions.extend(self._quorum.start_term(self.term, self.commit_index))
        self._dispatchers = {p: EntryDispatcher(self.id, p, self.term, self.settings.push, self.log)
                             for p in self.others}
        # a no-op of the new term: commits the previous terms' tail with it (section 5.4.2)
        self.log.append([Entry(self.log.last_index + 1, self.term, b"", MAGIC_NOOP)])
        self.tick(now)

    def _check_transfer(self, now: float) -> None:
        target = self._transfer_to
        if target is None:
            preferred = self.settings.preferred_leader
            if (preferred is not None and preferred != self.id and preferred in self._dispatchers
                    and now - self._heard_from.get(preferred, -1e18) < self.settings.heartbeat_interval_s * 2
                    and self.log.last_index - self._dispatchers[preferred].watermark <= self.settings.transfer_wait_entries):
                self.transfer_leadership(preferred, now)
            return
        if now >= self._transfer_until:
            self._transfer_to = None  # the target did not take over in time: lead on
            return
        if self._dispatchers[target].watermark >= self.log.last_index:
            self._send(target, TakeLeadership(self.term, self.id))
            self._transfer_until = now + self.settings.candidate_timeout_max_s + self.settings.heartbeat_interval_s

    # ------------------------------------------------------------------ messages

    def _send(self, peer: str, msg: Message) -> None:
        self._messages.append((peer, msg))

    def _on_vote_request(self, req: VoteRequest, now: float) -> None:
        if req.pre_vote:
            self._send(req.candidate, VoteResponse(self.term, self.id, self._pre_vote_result(req, now), pre_vote=True))
            return
        result = VoteResult.ACCEPT
        if req.term < self.term:
            result = VoteResult.REJECT_EXPIRED_VOTE_TERM
        elif self.voted_for not in (None, req.candidate):
            result = VoteResult.REJECT_ALREADY_VOTED
        elif self.role is Role.LEADER or (self.leader is not None and not req.transfer and self._leader_alive(now)):
            result = VoteResult.REJECT_ALREADY_HAS_LEADER
        elif req.last_term < self.log.last_term:
            result = VoteResult.REJECT_EXPIRED_LEDGER_TERM
        elif req.last_term == self.log.last_term and req.last_index < self.log.last_index:
            result = VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        if result is VoteResult.ACCEPT:
            self._set_hard_state(self.term, req.candidate)
            self._election_at = now + self._follower_timeout()
        self._send(req.candidate, VoteResponse(self.term, self.id, result))

    def _pre_vote_result(self, req: VoteRequest, now: float) -> VoteResult:
        if req.term <= self.term:
            return VoteResult.REJECT_EXPIRED_VOTE_TERM
        if self._leader_alive(now):
            return VoteResult.REJECT_ALREADY_HAS_LEADER
        if req.last_term < self.log.last_term:
            return VoteResult.REJECT_EXPIRED_LEDGER_TERM
        if req.last_term == self.log.last_term and req.last_index < self.log.last_index:
            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        return VoteResult.ACCEPT

    def _on_vote_response(self, resp: VoteResponse, now: float) -> None:
        if resp.pre_vote:
            if self._pre_voting and resp.term <= self.term and resp.result is VoteResult.ACCEPT:
                self._votes.add(resp.voter)
                if self._has_majority():
                    self._start_election(now, transfer=False)
            return
        if self.role is Role.CANDIDATE and resp.term == self.term and resp.result is VoteResult.ACCEPT:
            self._votes.add(resp.voter)
            self._maybe_win(now)

    def _accept_leader(self, term: int, leader: str, now: float) -> bool:
        """A heartbeat or push of ``term`` from ``leader``: follow it when the term is ours."""
        if term < self.term:
            return False
        if self.role is not Role.FOLLOWER or self.leader != leader:
            self._become_follower(term, leader, now)
        self._last_leader_contact = now
        self._election_at = now + self._follower_timeout()
        return True

    def _on_heartbeat(self, hb: HeartBeat, now: float) -> None:
        if not self._accept_leader(hb.term, hb.leader, now):
            self._send(hb.leader, HeartBeatResponse(self.term, self.id, Code.EXPIRED_TERM))
            return
        self._handler.leader_commit = max(self._handler.leader_commit, hb.commit_index)
        self._follow_commit()
        self._send(hb.leader, HeartBeatResponse(self.term, self.id, Code.SUCCESS))

    def _on_push(self, req: PushEntry, now: float) -> None:
        if not self._accept_leader(req.term, req.leader, now):
            self._send(req.leader, PushResponse(self.term, self.id, req.kind, Code.EXPIRED_TERM, req.index,
                                                self.log.last_index))
            return
        self._handler.offer(req, now)
        self._serve_pushes(now)

    def _serve_pushes(self, now: float) -> None:
        if self.role is not Role.FOLLOWER or self.leader is None:
            return
        for resp in self._handler.process(self.log, self.commit_index, now):
            self._send(self.leader, resp)
        self._follow_commit()

    def _follow_commit(self) -> None:
        self.commit_index = max(self.commit_index, self._handler.commit_limit())

    def _on_push_response(self, resp: PushResponse, now: float) -> None:
        if self.role is not Role.LEADER or resp.term != self.term:
            return
        self._heard_from[resp.peer] = now
        dispatcher = self._dispatchers.get(resp.peer)
        if dispatcher is None:
            return
        mark = dispatcher.on_response(resp, self.log)
        if mark is not None:
            self._quorum.ack(resp.peer, self.term, mark)
            self._advance_commit(now)
            if self._transfer_to == resp.peer:
                self._check_transfer(now)

    def _advance_commit(self, now: float) -> None:
        self._completions.extend(self._quorum.advance(self.log, now))
        self.commit_index = self._quorum.commit_index
