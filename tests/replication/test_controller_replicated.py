"""The controller's state replicated by the project's raft engine: three members in one
process over loopback apply the same events, reject a damaged entry alike, and a member that
restarts rebuilds its state from its own log."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from replication.controller.event_codec import EventError, decode_event, encode_event
from replication.controller.group_state import Candidate, alter_sync_state_set, elect, register
from replication.controller.replicated_state import ControllerState
from replication.dledger.driver import RaftDriver
from replication.dledger.messages import Code
from replication.dledger.raft_node import Role
from tests.conftest import free_port

SEGMENT = 64 * 1024


class Member:
    def __init__(self, node: str, addrs: dict[str, str], root: Path) -> None:
        self.node, self.addrs, self.root = node, addrs, root
        self.start_fresh()

    def start_fresh(self) -> None:
        self.state = ControllerState()
        self.driver = RaftDriver("controller", self.node, self.addrs, self.root / self.node, SEGMENT,
                                 rng=random.Random(self.node), on_commit=self.committed)
        self.scope = trio.CancelScope()
        self.stopped = trio.Event()

    def committed(self, commit_index: int) -> None:
        self.state.apply_committed(self.driver.log, commit_index)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the member; what its log held committed at start is applied before it serves
        (the driver reports only commits past that)."""
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.driver.run, self.addrs[self.node])
                    self.committed(self.driver.commit_index)
                    task_status.started()
        finally:
            self.stopped.set()


async def leader_of(members: dict[str, Member]) -> Member:
    with trio.fail_after(10):
        while True:
            leaders = [m for m in members.values() if m.driver.role is Role.LEADER]
            if len(leaders) == 1:
                return leaders[0]
            await trio.sleep(0.01)


async def propose(leader: Member, bodies: list[bytes]) -> int:
    results = await leader.driver.append(bodies)
    assert not isinstance(results, Code) and {r.code for r in results} == {Code.SUCCESS}
    await leader.driver.wait_committed(results[-1].index)
    return results[-1].index


async def test_controller_members_hold_the_same_groups_and_a_restarted_one_rebuilds_them(tmp_path):
    addrs = {f"c{i}": f"127.0.0.1:{free_port()}" for i in range(3)}
    members = {node: Member(node, addrs, tmp_path) for node in addrs}
    async with trio.open_nursery() as nursery:
        for m in members.values():
            await nursery.start(m.run)
        leader = await leader_of(members)
        bodies = []
        state = leader.state
        for broker_id in (1, 0, 2):
            event = register(state.group("broker-a"), broker_id, f"127.0.0.1:{10911 + 10 * broker_id}")
            assert event is not None
            bodies.append(encode_event(event))
        await propose(leader, bodies)
        live = {b: Candidate(b, True, 0, 100) for b in (0, 1, 2)}
        await propose(leader, [encode_event(elect(state.group("broker-a"), live))])
        altered = alter_sync_state_set(state.group("broker-a"), 0, 1, frozenset({0, 1}), 1, frozenset({1, 2}))
        last = await propose(leader, [encode_event(altered), b"{not an event"])
        with trio.fail_after(5):
            for m in members.values():
                await m.driver.wait_committed(last)
                while m.state.applied < last:
                    await trio.sleep(0.01)
        groups = [m.state.groups for m in members.values()]
        assert groups[0] == groups[1] == groups[2]
        a = groups[0]["broker-a"]
        assert (a.master_id, a.master_epoch, a.sync_state_set, a.sync_state_set_epoch) == (0, 1, {0, 1}, 2)
        assert a.replicas == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921", 2: "127.0.0.1:10931"}

        follower = next(m for m in members.values() if m is not leader)
        follower.scope.cancel()
        with trio.fail_after(5):
            await follower.stopped.wait()  # its driver checkpointed and closed its log
        follower.start_fresh()
        assert follower.state.groups == {}
        await nursery.start(follower.run)
        with trio.fail_after(10):
            while follower.state.groups != groups[0] or follower.state.applied < last:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("body", [
    b"[]", b'{"event": "elected", "group": "a b", "masterId": 0}', b'{"event": "registered", "group": "g"}',
    b'{"event": "altered", "group": "g", "syncStateSet": [-1], "syncStateSetEpoch": 1}',
    b'{"event": "elected", "group": "g", "masterId": true, "masterEpoch": 1, "syncStateSet": [], "syncStateSetEpoch": 1}',
    b'{"event": "gone", "group": "g"}', b"x" * 70000,
])
def test_a_damaged_entry_is_refused(body):
    with pytest.raises(EventError):
        decode_event(body)
