"""Three raft members in one process over real loopback sockets, with their logs on disk."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from formats.record import MessageRecord, encode_record
from replication.dledger.driver import CHECKPOINT_INTERVAL_S, RaftDriver
from replication.dledger.messages import Code
from replication.dledger.raft_node import RaftSettings, Role
from replication.dledger.state_files import load_commit_checkpoint
from tests.conftest import free_port

SEGMENT = 64 * 1024


def body(i: int) -> bytes:
    return bytes(encode_record(MessageRecord(topic="Orders", body=b"m%05d" % i, queue_id=i % 4)))


class Cluster:
    def __init__(self, tmp_path: Path, settings: RaftSettings | None = None) -> None:
        self.tmp = tmp_path
        self.settings = settings
        self.addrs = {f"n{i}": f"127.0.0.1:{free_port()}" for i in range(3)}
        self.drivers: dict[str, RaftDriver] = {}
        self.scopes: dict[str, trio.CancelScope] = {}

    async def start(self, nursery: trio.Nursery, node: str) -> None:
        driver = RaftDriver("g", node, self.addrs, self.tmp / node, SEGMENT, self.settings, rng=random.Random(node))
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[int]) -> None:
            with scope:
                await driver.run(self.addrs[node], task_status=task_status)

        await nursery.start(run)
        self.drivers[node], self.scopes[node] = driver, scope

    def kill(self, node: str) -> None:
        self.scopes.pop(node).cancel()
        self.drivers.pop(node)

    async def leader(self, timeout_s: float = 10.0) -> RaftDriver:
        with trio.fail_after(timeout_s):
            while True:
                leaders = [d for d in self.drivers.values() if d.role is Role.LEADER]
                if len(leaders) == 1 and all(d.leader == leaders[0].id for d in self.drivers.values()):
                    return leaders[0]
                await trio.sleep(0.01)


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, settings: RaftSettings | None = None) -> AsyncIterator[tuple[Cluster, trio.Nursery]]:
    c = Cluster(tmp_path, settings)
    async with trio.open_nursery() as nursery:
        for node in c.addrs:
            await c.start(nursery, node)
        yield c, nursery
        nursery.cancel_scope.cancel()


async def test_appends_commit_on_every_member_and_survive_the_leader(tmp_path):
    async with cluster(tmp_path) as (c, nursery):
        leader = await c.leader()
        results = await leader.append([body(i) for i in range(50)])
        assert not isinstance(results, Code)
        assert [r.code for r in results] == [Code.SUCCESS] * 50
        last = results[-1].index
        with trio.fail_after(5):
            for d in c.drivers.values():
                await d.wait_committed(last)
        follower = next(d for d in c.drivers.values() if d is not leader)
        assert await follower.append([body(0)]) == Code.NOT_LEADER
        entries = {n: [d.log.entry(i) for i in range(last + 1)] for n, d in c.drivers.items()}
        assert len({tuple(e) for e in entries.values()}) == 1  # the same entries everywhere

        old = leader.id
        died = trio.current_time()
        c.kill(old)
        new = await c.leader()
        elected_after = trio.current_time() - died
        assert new.id != old and elected_after < 2.5
        more = await new.append([body(i) for i in range(50, 60)])
        assert not isinstance(more, Code) and {r.code for r in more} == {Code.SUCCESS}

        await c.start(nursery, old)  # back from its disk: catches up as a follower
        with trio.fail_after(10):
            await c.drivers[old].wait_committed(more[-1].index)
        assert c.drivers[old].log.entry(more[-1].index) == new.log.entry(more[-1].index)


async def test_leadership_transfer_over_the_network(tmp_path):
    async with cluster(tmp_path) as (c, _nursery):
        leader = await c.leader()
        await leader.append([body(1)])
        target = next(n for n in c.drivers if n != leader.id)
        assert leader.transfer_leadership(target) is None
        with trio.fail_after(5):
            while (await c.leader()).id != target:
                await trio.sleep(0.01)


async def test_without_synced_appends_the_log_is_flushed_on_a_timer_and_checkpointed_only_that_far(tmp_path):
    settings = RaftSettings(sync_appends=False, flush_interval_s=0.2)
    async with cluster(tmp_path, settings) as (c, _nursery):
        leader = await c.leader()
        results = await leader.append([body(i) for i in range(30)])
        assert not isinstance(results, Code) and {r.code for r in results} == {Code.SUCCESS}
        last = results[-1].index
        with trio.fail_after(5):  # the flush task makes it durable, and only then is it checkpointed
            while True:
                marks = {n: (load_commit_checkpoint(d.store_dir / "dledger" / "checkpoint"), d.log.durable_index)
                         for n, d in c.drivers.items()}
                assert all(checkpoint <= durable for checkpoint, durable in marks.values()), marks
                if all(checkpoint >= last for checkpoint, _ in marks.values()):
                    break
                await trio.sleep(CHECKPOINT_INTERVAL_S / 10)
