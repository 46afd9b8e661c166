"""The raft engine (node, disk log, driver) as a replicated log for other state than messages:
three members in one process over loopback, each applying its committed entries to a dict.
The log stores bodies as given (a broker's store passes ``place_body=record_at``; nothing here
does), so a body that happens to look like a message record is not rewritten."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from formats.dledger import MAGIC_NORMAL
from formats.record import MAGIC_V1
from replication.dledger.driver import RaftDriver
from replication.dledger.messages import Code
from replication.dledger.raft_node import Role
from tests.conftest import free_port

SEGMENT = 64 * 1024


class KeyValueMember:
    """One member: its driver, and the dict its committed ``key=value`` entries build."""

    def __init__(self, node: str, addrs: dict[str, str], root: Path) -> None:
        self.state: dict[bytes, bytes] = {}
        self.applied = -1
        self.driver = RaftDriver("kv", node, addrs, root / node, SEGMENT, rng=random.Random(node),
                                 on_commit=self.apply)

    def apply(self, commit_index: int) -> None:
        log = self.driver.log
        for index in range(self.applied + 1, commit_index + 1):
            entry = log.entry(index)
            assert entry is not None
            if entry.magic == MAGIC_NORMAL:  # a new leader's no-op changes nothing
                key, _, value = entry.body.partition(b"=")
                self.state[key] = value
        self.applied = commit_index


@contextlib.asynccontextmanager
async def key_value_group(tmp_path: Path) -> AsyncIterator[tuple[dict[str, KeyValueMember], trio.Nursery]]:
    addrs = {f"n{i}": f"127.0.0.1:{free_port()}" for i in range(3)}
    members = {node: KeyValueMember(node, addrs, tmp_path) for node in addrs}
    async with trio.open_nursery() as nursery:
        for node, member in members.items():
            await nursery.start(member.driver.run, addrs[node])
        yield members, nursery
        nursery.cancel_scope.cancel()


async def leader_of(members: dict[str, KeyValueMember]) -> KeyValueMember:
    with trio.fail_after(10):
        while True:
            leaders = [m for m in members.values() if m.driver.role is Role.LEADER]
            if len(leaders) == 1 and all(m.driver.leader == leaders[0].driver.id for m in members.values()):
                return leaders[0]
            await trio.sleep(0.01)


async def test_the_raft_engine_replicates_a_dict(tmp_path):
    # bytes 4..8 of this body are a message record's magic, and it is long enough to hold a
    # PHYSICALOFFSET field: a log that rewrote message records would change it
    odd = b"odd=" + MAGIC_V1.to_bytes(4, "big", signed=True) + bytes(range(64))
    ops = [b"k%d=v%d" % (i % 7, i) for i in range(30)] + [odd]
    expected = {b"k%d" % k: b"v%d" % max(i for i in range(30) if i % 7 == k) for k in range(7)}
    expected[b"odd"] = odd.partition(b"=")[2]
    async with key_value_group(tmp_path) as (members, _nursery):
        leader = await leader_of(members)
        results = await leader.driver.append(ops)
        assert not isinstance(results, Code) and {r.code for r in results} == {Code.SUCCESS}
        with trio.fail_after(5):
            for m in members.values():
                await m.driver.wait_committed(results[-1].index)
        assert all(m.state == expected for m in members.values())
        assert all(m.driver.log.entry(results[-1].index).body == odd for m in members.values())

        follower = next(m for m in members.values() if m is not leader)
        assert await follower.driver.append([b"x=y"]) == Code.NOT_LEADER
