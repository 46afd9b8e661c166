"""The sans-IO raft core, one rule at a time: scripted inputs, no sockets, no clock."""

from __future__ import annotations

import random

from formats.dledger import MAGIC_NOOP
from replication.dledger.dispatcher import DispatchState, EntryDispatcher, PushLimits
from replication.dledger.entry_handler import EntryHandler
from replication.dledger.messages import (
    Code,
    PushEntry,
    PushKind,
    PushResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from replication.dledger.quorum import QuorumAckChecker
from replication.dledger.raft_log import Entry, MemoryLog
from replication.dledger.raft_node import RaftNode, RaftSettings, Role

PEERS = ("a", "b", "c")


def log_of(*terms: int) -> MemoryLog:
    return MemoryLog([Entry(i, t, f"e{i}".encode()) for i, t in enumerate(terms)])


# ------------------------------------------------------------------ quorum


def test_an_old_term_entry_held_by_a_majority_is_not_committed_by_counting_alone():
    log = log_of(1, 2, 4)  # leader of term 4; entry 1 is from term 2
    q = QuorumAckChecker("a", PEERS, 4, wait_ack_timeout_s=1.0)
    q.start_term(4, commit_index=0)
    q.add(proposal=7, index=2, now=0.0)
    q.ack("a", 4, 2)
    q.ack("b", 4, 1)  # a majority holds entry 1 (term 2), only the leader entry 2
    assert q.advance(log, 0.1) == [] and q.commit_index == 0  # DLedger 0.2.x would say 1
    q.ack("b", 4, 2)
    done = q.advance(log, 0.2)
    assert q.commit_index == 2  # entry 1 commits with the current term's entry after it
    assert [(c.proposal, c.code, c.index) for c in done] == [(7, Code.SUCCESS, 2)]


def test_a_proposed_run_completes_as_far_as_the_commit_index_and_the_rest_waits_on():
    log = log_of(3, 3, 3, 3, 3, 3)
    q = QuorumAckChecker("a", PEERS, 3, wait_ack_timeout_s=1.0)
    q.start_term(3, -1)
    q.add(proposal=10, index=1, now=0.0, count=4)  # entries 1..4 in one run
    q.add(proposal=14, index=5, now=0.5)
    assert q.pending_count == 5
    q.ack("a", 3, 5)
    q.ack("b", 3, 2)
    done = q.advance(log, 0.1)
    assert [(c.proposal, c.index, c.count) for c in done] == [(10, 1, 2)] and q.pending_count == 3
    assert [(c.proposal, c.index) for c in done[0].each()] == [(10, 1), (11, 2)]
    timed_out = q.advance(log, 1.0)  # 12 and 13 were proposed at 0.0, 14 at 0.5
    assert [(c.proposal, c.code, c.count) for c in timed_out] == [(12, Code.WAIT_QUORUM_ACK_TIMEOUT, 2)]
    assert [(c.proposal, c.count) for c in q.fail_all(Code.TERM_CHANGED)] == [(14, 1)] and q.pending_count == 0


def test_waiting_appends_time_out_and_end_with_the_term():
    log = log_of(3, 3, 3)
    q = QuorumAckChecker("a", PEERS, 3, wait_ack_timeout_s=1.0)
    q.start_term(3, -1)
    q.add(1, 0, now=0.0)
    q.add(2, 1, now=0.5)
    assert [c.code for c in q.advance(log, 1.0)] == [Code.WAIT_QUORUM_ACK_TIMEOUT]
    assert q.next_deadline() == 1.5
    assert [(c.proposal, c.code) for c in q.start_term(4, -1)] == [(2, Code.TERM_CHANGED)]
    assert q.watermarks == {4: {"a": -1, "b": -1, "c": -1}}  # older terms' watermarks dropped


# ------------------------------------------------------------------ dispatcher


def test_a_late_answer_to_an_older_compare_is_ignored():
    log = log_of(1, 1, 1, 1)
    d = EntryDispatcher("a", "b", 1, PushLimits(push_timeout_s=0.3), log)
    (first,) = d.pushes(log, -1, now=0.0)
    assert first.kind is PushKind.COMPARE and first.index == 3
    (again,) = d.pushes(log, -1, now=0.3)  # unanswered: asked again
    d.on_response(PushResponse(1, "b", PushKind.COMPARE, Code.INCONSISTENT_STATE, 3, 1, seq=again.seq), log)
    assert d.compare_index == 1
    # the answer to the first request, overtaken on the way, must not move the walk again
    d.on_response(PushResponse(1, "b", PushKind.COMPARE, Code.INCONSISTENT_STATE, 1, 0, seq=first.seq), log)
    assert (d.state, d.compare_index) == (DispatchState.COMPARE, 1)


def test_a_push_deadline_fires_at_the_exact_wakeup_time():
    log = log_of(*[1] * 20)
    d = EntryDispatcher("a", "b", 1, PushLimits(push_timeout_s=0.3, batch_count=5), log)
    compare = d.pushes(log, -1, 1.7816238882382738)[0]
    d.on_response(PushResponse(1, "b", PushKind.COMPARE, Code.SUCCESS, compare.index, 19, seq=compare.seq), log)
    truncate = d.pushes(log, -1, 1.7816238882382738)[0]
    d.on_response(PushResponse(1, "b", PushKind.TRUNCATE, Code.SUCCESS, 19, 19, seq=truncate.seq), log)
    assert d.state is DispatchState.APPEND and d.watermark == 19
    log.append([Entry(20, 1, b"x")])
    sent_at = 1.7816238882382738
    (push,) = d.pushes(log, -1, sent_at)
    wake = d.next_wakeup(sent_at)
    assert wake == sent_at + 0.3
    (resend,) = [p for p in d.pushes(log, -1, wake) if p.kind is PushKind.APPEND]  # not a rounding error early
    assert resend.index == push.index == 20


# ------------------------------------------------------------------ entry handler


def test_truncate_below_the_commit_index_keeps_the_committed_prefix():
    log = log_of(1, 1, 1, 1, 1, 1)  # from the leader of term 1; the leader of term 2 truncates
    h = EntryHandler("b", 2, max_pending=10, gap_timeout_s=1.0)
    h.offer(PushEntry(2, "a", PushKind.TRUNCATE, 2, (), commit_index=4, seq=9), now=0.0)
    (resp,) = h.process(log, commit_index=4, now=0.0)
    assert (resp.code, resp.end_index, resp.seq) == (Code.SUCCESS, 4, 9)
    assert log.last_index == 4 and h.matched_index == 4


def test_truncate_keeps_entries_of_the_leaders_own_term():
    # seed 4277: a follower acknowledged entries 3-4 of term 2, then a TRUNCATE at 2 (the leader
    # compared again after a gap) cut them, while the leader had counted them towards a commit
    log = log_of(1, 1, 1, 2, 2)
    h = EntryHandler("b", 2, max_pending=10, gap_timeout_s=1.0)
    h.offer(PushEntry(2, "a", PushKind.TRUNCATE, 2, (), commit_index=1, seq=4), now=0.0)
    (resp,) = h.process(log, commit_index=1, now=0.0)
    assert (resp.code, resp.end_index) == (Code.SUCCESS, 4) and log.last_index == 4


def test_an_answer_to_a_push_from_before_the_latest_truncate_moves_nothing():
    log = log_of(1, 1, 1, 1, 1)
    d = EntryDispatcher("a", "b", 1, PushLimits(), log)
    (compare,) = d.pushes(log, commit_index=2, now=0.0)
    d.on_response(PushResponse(1, "b", PushKind.COMPARE, Code.SUCCESS, 4, 4, seq=compare.seq), log)
    (truncate,) = d.pushes(log, commit_index=2, now=0.0)
    assert d.on_response(PushResponse(1, "b", PushKind.TRUNCATE, Code.SUCCESS, 4, 4, seq=truncate.seq), log) == 4
    log.append([Entry(i, 1, b"x") for i in range(5, 10)])
    (append,) = d.pushes(log, commit_index=2, now=0.0)
    assert append.kind is PushKind.APPEND and append.seq == truncate.seq
    gap = PushResponse(1, "b", PushKind.APPEND, Code.INCONSISTENT_STATE, 5, 4, seq=append.seq)
    d.on_response(gap, log)  # the follower reported a gap: a new round begins
    (again,) = d.pushes(log, commit_index=2, now=0.0)
    assert again.kind is PushKind.COMPARE and again.seq > truncate.seq
    late = PushResponse(1, "b", PushKind.APPEND, Code.SUCCESS, 5, 9, count=5, seq=append.seq)
    assert d.on_response(late, log) is None and d.watermark == 4


def test_appends_apply_in_order_and_a_gap_left_open_is_reported():
    log = log_of(1)
    h = EntryHandler("b", 1, max_pending=10, gap_timeout_s=1.0)
    h.offer(PushEntry(1, "a", PushKind.TRUNCATE, 0, (), -1, seq=1), 0.0)
    h.process(log, -1, 0.0)

    def append(i: int) -> PushEntry:
        return PushEntry(1, "a", PushKind.APPEND, i, (Entry(i, 1, b"x"),), commit_index=i)

    h.offer(append(2), 0.1)
    assert h.process(log, -1, 0.1) == []  # waits for entry 1
    h.offer(append(1), 0.2)
    assert [(r.index, r.end_index) for r in h.process(log, -1, 0.2)] == [(1, 1), (2, 2)]
    assert h.commit_limit() == 2
    h.offer(append(5), 0.3)
    assert h.process(log, -1, 1.2) == [] and h.next_wakeup() == 1.3
    (stuck,) = h.process(log, -1, 1.3)
    assert (stuck.code, stuck.index, stuck.end_index) == (Code.INCONSISTENT_STATE, 5, 2)


def test_a_duplicated_truncate_arriving_late_cuts_nothing_the_follower_acknowledged():
    # seed 5262 of the simulator: a TRUNCATE delivered twice, the copy after the APPENDs that
    # followed it; acting on the copy cut entries the leader already counted as committed
    h = EntryHandler("b", 2, max_pending=10, gap_timeout_s=1.0)
    log = log_of(1, 1, 1)
    truncate = PushEntry(2, "a", PushKind.TRUNCATE, 2, (), commit_index=1, seq=1)
    h.offer(truncate, 0.0)
    h.process(log, commit_index=1, now=0.0)
    h.offer(PushEntry(2, "a", PushKind.APPEND, 3, (Entry(3, 2, b"x"), Entry(4, 2, b"y")), commit_index=1), 0.0)
    assert [r.code for r in h.process(log, commit_index=1, now=0.0)] == [Code.SUCCESS]
    assert log.last_index == 4
    h.offer(truncate, 0.1)  # the duplicate
    assert h.process(log, commit_index=1, now=0.1) == []
    assert log.last_index == 4 and log.term_at(4) == 2
    h.offer(PushEntry(2, "a", PushKind.TRUNCATE, 3, (), commit_index=1, seq=2), 0.2)  # a new round is served,
    assert [r.code for r in h.process(log, commit_index=1, now=0.2)] == [Code.SUCCESS]
    assert log.last_index == 4  # and keeps what the leader of term 2 wrote


def test_a_follower_never_commits_a_tail_it_has_not_matched():
    log = log_of(1, 1, 2, 2)  # entries 2-3 from an old term 2 leader
    h = EntryHandler("b", 3, max_pending=10, gap_timeout_s=1.0)
    h.offer(PushEntry(3, "a", PushKind.COMMIT, -1, (), commit_index=3), 0.0)
    h.process(log, -1, 0.0)
    assert h.commit_limit() == -1  # the leader's commit index 3 says nothing about this log's entry 3


def test_a_follower_behind_the_leaders_first_entry_is_installed_from_it():
    leader_log = log_of(1, 1, 1, 1, 2, 2, 2)
    leader_log.sync()
    leader_log.compact(3)  # retention deleted entries 0-3
    d = EntryDispatcher("a", "b", 2, PushLimits(batch_count=2), leader_log)
    (compare,) = d.pushes(leader_log, commit_index=6, now=0.0)
    assert compare.kind is PushKind.COMPARE and compare.index == 6
    d.on_response(PushResponse(2, "b", PushKind.COMPARE, Code.INCONSISTENT_STATE, 6, 1, seq=compare.seq), leader_log)
    (install,) = d.pushes(leader_log, commit_index=6, now=0.0)  # it would compare at 1, which is gone
    assert (install.kind, install.index, install.prev_term, install.install_end) == (PushKind.INSTALL, 4, 1, 6)
    assert [e.index for e in install.entries] == [4, 5]

    follower_log = log_of(1, 1)
    h = EntryHandler("b", 2, max_pending=10, gap_timeout_s=1.0)
    h.offer(install, 0.0)
    (resp,) = h.process(follower_log, commit_index=1, now=0.0)
    assert (resp.code, resp.end_index) == (Code.SUCCESS, 5)
    assert (follower_log.first_index, follower_log.last_index, follower_log.term_at(3)) == (4, 5, 1)
    assert follower_log.install_end == 6
    assert d.on_response(resp, leader_log) == 5 and d.state is DispatchState.APPEND
    (append,) = d.pushes(leader_log, commit_index=6, now=0.0)
    assert (append.kind, append.index) == (PushKind.APPEND, 6)


def test_an_install_never_drops_a_committed_entry_the_follower_agrees_on():
    follower_log = log_of(1, 1, 1, 1, 1, 1)
    h = EntryHandler("b", 2, max_pending=10, gap_timeout_s=1.0)
    h.offer(PushEntry(2, "a", PushKind.INSTALL, 4, (), 6, seq=1, prev_term=1, install_end=6), 0.0)
    (resp,) = h.process(follower_log, commit_index=5, now=0.0)  # it holds committed entries 4 and 5
    assert resp.code is Code.INCONSISTENT_STATE and follower_log.last_index == 5 and follower_log.first_index == 0


def test_an_installing_member_does_not_stand_until_it_holds_what_was_committed():
    log = MemoryLog()
    log.reset(10, 3, install_end=20)
    node = RaftNode("b", PEERS, log, RaftSettings(), random.Random(1), 0.0)
    node.tick(30.0)
    assert node.role is Role.FOLLOWER and node.take_ready(30.0).messages == []
    log.append([Entry(i, 3, b"x") for i in range(10, 21)])
    node.tick(60.0)
    assert any(isinstance(m, VoteRequest) and m.pre_vote for _, m in node.take_ready(60.0).messages)


# ------------------------------------------------------------------ node


class Group:
    """Nodes on a perfect network: every Ready carried out at once, in order."""

    def __init__(self, settings: RaftSettings | None = None, logs: dict[str, MemoryLog] | None = None) -> None:
        settings = settings or RaftSettings()
        self.now = 0.0
        self.logs = logs or {p: MemoryLog() for p in PEERS}
        self.nodes = {p: RaftNode(p, PEERS, self.logs[p], settings, random.Random(i), 0.0)
                      for i, p in enumerate(PEERS)}
        self.down: set[str] = set()
        self.readies: list = []

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while True:
            live = [n for p, n in self.nodes.items() if p not in self.down]
            node = min(live, key=lambda n: n.next_wakeup(self.now))
            t = max(self.now, node.next_wakeup(self.now))
            if t > end:
                self.now = end
                return
            self.now = t
            node.tick(t)
            self.flush(node)

    def flush(self, node: RaftNode) -> None:
        ready = node.take_ready(self.now)
        self.readies.append((node.id, ready))
        node.log_synced(self.logs[node.id].sync(), self.now)
        for dst, msg in ready.messages:
            if dst not in self.down and node.id not in self.down:
                self.nodes[dst].receive(msg, self.now)
                self.flush(self.nodes[dst])

    def leader(self) -> RaftNode:
        (leader,) = [n for p, n in self.nodes.items() if p not in self.down and n.role is Role.LEADER]
        return leader


def test_a_group_elects_one_leader_which_commits_a_noop_of_its_term():
    g = Group()
    g.run(3.0)
    leader = g.leader()
    assert leader.commit_index == 0 and g.logs[leader.id].entry(0).magic == MAGIC_NOOP
    assert all(n.leader == leader.id and n.term == leader.term for n in g.nodes.values())


def test_a_vote_is_on_disk_before_its_answer_leaves():
    g = Group()
    g.run(3.0)
    for _node, ready in g.readies:
        if any(isinstance(m, VoteResponse) and not m.pre_vote and m.result.value == "ACCEPT" for _, m in ready.messages):
            assert ready.hard_state is not None  # the vote travels in the same Ready as its hard state
            break
    else:
        raise AssertionError("no vote was granted")


def test_a_node_that_cannot_win_does_not_raise_the_term():
    logs = {"a": log_of(1, 1, 1), "b": log_of(1, 1, 1), "c": MemoryLog()}
    g = Group(logs=logs)
    g.down = {"a", "b"}
    g.run(5.0)  # c alone: it asks for pre-votes nobody grants
    assert g.nodes["c"].term == 0 and g.nodes["c"].elections_started == 0
    g.down = set()
    g.run(3.0)
    assert g.leader().id in ("a", "b") and g.leader().term == 1  # the first real election wins


def test_sends_commit_and_the_old_leader_is_replaced_within_the_failover_budget():
    g = Group()
    g.run(3.0)
    old = g.leader()
    proposals = old.propose([b"m1", b"m2"], g.now)
    assert isinstance(proposals, range)
    g.flush(old)
    g.run(0.1)
    assert old.commit_index == 2
    g.down = {old.id}
    died = g.now
    while g.now - died < 5.0:
        g.run(0.05)
        new = [n for p, n in g.nodes.items() if p != old.id and n.role is Role.LEADER]
        if new:
            break
    assert new, "no new leader"
    assert g.now - died <= 2.5  # leader lease 1.5 s + jitter 0.5 s + a pre-vote and a vote
    assert [e.body for e in g.logs[new[0].id].all()[1:3]] == [b"m1", b"m2"]
    assert new[0].propose([b"m3"], g.now) != Code.NOT_LEADER
    assert g.nodes[next(p for p in PEERS if p not in (old.id, new[0].id))].propose([b"m4"], g.now) == Code.NOT_LEADER


def test_leadership_transfer_hands_over_to_a_caught_up_follower():
    g = Group()
    g.run(3.0)
    old = g.leader()
    term_before = old.term
    target = next(p for p in PEERS if p != old.id)
    assert old.transfer_leadership(target, g.now) is None
    assert old.propose([b"x"], g.now) == Code.LEADER_TRANSFERRING
    g.flush(old)
    g.run(1.0)
    assert g.leader().id == target and g.leader().term == term_before + 1
    assert old.role is Role.FOLLOWER and old.leader == target
    assert old.transfer_leadership("zz", g.now) is not None  # not the leader any more


def test_vote_requests_carry_the_last_index_and_term():
    g = Group(logs={"a": log_of(1, 2), "b": MemoryLog(), "c": MemoryLog()})
    node = g.nodes["a"]
    node.tick(5.0)  # past any election timeout: pre-vote first
    pre = [m for _, m in node.take_ready(5.0).messages if isinstance(m, VoteRequest)]
    assert pre and all(r.pre_vote and r.term == 1 and node.term == 0 for r in pre)  # no term raised yet
    node.receive(VoteResponse(0, "b", VoteResult.ACCEPT, pre_vote=True), 5.0)
    requests = [m for _, m in node.take_ready(5.0).messages if isinstance(m, VoteRequest)]
    assert requests and all((r.term, r.last_index, r.last_term, r.pre_vote) == (1, 1, 2, False) for r in requests)


# ------------------------------------------------------------------ wire


def test_every_message_survives_the_wire_and_bad_frames_are_named():
    import pytest

    from core.remoting.command import RemotingCommand
    from replication.dledger import wire
    from replication.dledger.messages import HeartBeat, HeartBeatResponse, TakeLeadership

    noop = Entry(3, 2, b"", MAGIC_NOOP)
    messages = [
        VoteRequest(5, "a", 9, 4, transfer=True), VoteRequest(5, "a", -1, -1, pre_vote=True),
        VoteResponse(5, "b", VoteResult.REJECT_ALREADY_VOTED, pre_vote=True),
        HeartBeat(5, "a", 7), HeartBeatResponse(5, "b", Code.EXPIRED_TERM),
        PushEntry(5, "a", PushKind.APPEND, 3, (noop, Entry(4, 5, b"record bytes")), 2, seq=0),
        PushEntry(5, "a", PushKind.TRUNCATE, 2, (), 2, seq=11),
        PushEntry(5, "a", PushKind.INSTALL, 3, (noop,), 9, seq=12, prev_term=1, install_end=9),
        PushResponse(5, "b", PushKind.COMPARE, Code.INCONSISTENT_STATE, 3, 1, 0, seq=11),
        TakeLeadership(5, "a"),
    ]
    for msg in messages:
        cmd = wire.encode_message(msg, "broker-a")
        assert cmd.code in wire.RAFT_CODES and cmd.ext_fields["group"] == "broker-a"
        assert wire.decode_message(cmd) == msg
    with pytest.raises(wire.WireError, match="missing field"):
        wire.decode_message(RemotingCommand(code=wire.VOTE, ext_fields={"term": "1"}))
    with pytest.raises(wire.WireError, match="not a raft message"):
        wire.decode_message(RemotingCommand(code=10, ext_fields={"term": "1"}))
    push = wire.encode_message(messages[5], "g")
    push.body = push.body[:-3]
    with pytest.raises(wire.WireError, match="past the end"):
        wire.decode_message(push)


# ------------------------------------------------------------------ Raft figure 8


class Wires:
    """Nodes whose messages wait in a list until the test delivers (or drops) them."""

    def __init__(self, nodes: dict[str, RaftNode], logs: dict[str, MemoryLog]) -> None:
        self.nodes, self.logs = nodes, logs
        self.in_flight: list[tuple[str, str, object]] = []
        self.now = 0.0

    def step(self, node_id: str) -> None:
        node = self.nodes[node_id]
        ready = node.take_ready(self.now)
        node.log_synced(self.logs[node_id].sync(), self.now)
        self.in_flight.extend((node_id, dst, m) for dst, m in ready.messages)

    def deliver(self, keep=lambda src, dst, m: True) -> None:
        """Deliver everything in flight that ``keep`` allows (dropping the rest), until quiet."""
        while self.in_flight:
            batch, self.in_flight = self.in_flight, []
            for src, dst, msg in batch:
                if dst in self.nodes and keep(src, dst, msg):
                    self.nodes[dst].receive(msg, self.now)
                    self.step(dst)


def figure_8(monkeypatch=None, *, dledger_02_rule: bool = False) -> tuple[list[int], dict[str, MemoryLog]]:
    """a (leader of term 2) wrote e1 alone; c (leader of term 3) wrote x1 alone; now a leads
    term 4 and gets e1 onto b, but not its own no-op, before it dies; then c leads term 5.
    Returns a's commit index after each step of term 4, and the logs at the end."""
    from replication.dledger.raft_node import HardState

    if dledger_02_rule:  # commit whatever a majority holds, of any term
        def advance(self, log, now):
            q = self.quorum_index()
            self.commit_index = max(self.commit_index, q)
            return []
        monkeypatch.setattr(QuorumAckChecker, "advance", advance)
    e0 = Entry(0, 1, b"e0")
    logs = {"a": MemoryLog([e0, Entry(1, 2, b"e1")]), "b": MemoryLog([e0]), "c": MemoryLog([e0, Entry(1, 3, b"x1")])}
    settings = RaftSettings(push=PushLimits(batch_count=1))
    nodes = {p: RaftNode(p, PEERS, logs[p], settings, random.Random(1), 0.0, HardState(3, None), commit_index=0)
             for p in ("a", "b")}
    w = Wires(nodes, logs)

    def not_the_noop(src, dst, m):  # b gets e1 (index 1), every push of a's no-op (index 2) is lost
        return not (isinstance(m, PushEntry) and m.kind is PushKind.APPEND and m.index >= 2)

    nodes["a"]._start_election(0.0, transfer=False)  # term 4; b votes (a's log is newer), c is down
    w.step("a")
    w.deliver(keep=not_the_noop)
    assert nodes["a"].role is Role.LEADER and nodes["a"].term == 4
    commits = [nodes["a"].commit_index]
    w.now = 1.0
    nodes["a"].tick(w.now)  # heartbeats and pushes go round again
    w.step("a")
    w.deliver(keep=not_the_noop)
    commits.append(nodes["a"].commit_index)
    assert logs["b"].term_at(1) == 2  # a majority (a, b) holds e1 of term 2
    # a dies; c comes back and, with the newer last term, wins b's vote for term 5
    del nodes["a"]
    nodes["c"] = RaftNode("c", PEERS, logs["c"], settings, random.Random(2), 10.0, HardState(4, None), commit_index=0)
    w.now = 10.0
    nodes["c"]._start_election(10.0, transfer=False)  # (its pre-vote passes the same way)
    w.step("c")
    w.deliver()
    assert nodes["c"].role is Role.LEADER and nodes["c"].term == 5
    nodes["c"].propose([b"y"], w.now)
    w.step("c")
    w.deliver()
    return commits, logs


def test_figure_8_an_old_term_entry_on_a_majority_is_not_committed_and_may_be_replaced():
    commits, logs = figure_8()
    assert commits == [0, 0]  # e1 was on a majority but never reported committed
    assert logs["b"].all() == logs["c"].all() and logs["c"].entry(1).body == b"x1"  # replaced; nothing lost


def test_figure_8_with_dledger_02_rule_commits_an_entry_that_the_next_leader_lacks(monkeypatch):
    commits, logs = figure_8(monkeypatch, dledger_02_rule=True)
    assert commits[-1] == 1  # e1 "committed" by counting replicas ...
    assert logs["c"].entry(1).body == b"x1"  # ... yet the next leader holds x1 there: a committed entry lost
