"""Raft members as a broker runs them: a raft member's MessageStore + DLedgerReplication over real
loopback sockets and real files, in one process (the real-process drills are in
tests/mqctl/test_dledger.py)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest
import trio

from core.broker.produce.batch_send import record_batch
from core.broker.replication import Replicated
from core.config import Config, ReplicationConfig, StoreConfig
from core.errors import ReadOnlyStoreError, StoreError
from core.node_specs import BrokerNode
from core.plugin_manager import PluginHost
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore, open_message_store
from core.store.store_types import StoreRole
from formats.batch import BatchItem, encode_batch
from formats.dledger import HEADER_SIZE
from formats.record import MessageRecord, prepare_record, write_record
from formats.record_batch import BatchFields, RecordBatch
from plugins import plugin_host
from plugins.ha_dledger import raft_message_store, raft_parts
from replication.dledger.messages import Code
from replication.dledger.raft_log import BodyRun, Entry
from replication.dledger.seal import seal_group
from replication.dledger.store import RaftParts
from replication.dledger.strategy import DLedgerReplication, follower_broker_id
from tests.conftest import free_port  # a free port whose next one is free too (raft port)

QUEUES = 4


def msg(i: int) -> MessageRecord:
    return MessageRecord(topic="Orders", body=b"order %05d " % i * 20, queue_id=i % QUEUES,
                         born_timestamp=1_700_000_000_000 + i, born_host=("10.0.0.9", 40000),
                         store_host=("127.0.0.1", 10911),
                         properties={"KEYS": f"k-{i}", "TAGS": "A", "UNIQ_KEY": f"{i:032X}"})


def group_config(store: StoreConfig, members: int) -> Config:
    brokers = tuple(BrokerNode("g", i, f"127.0.0.1:{free_port()}") for i in range(members))
    return Config(store=store, replication=ReplicationConfig(mode="dledger"), brokers=brokers)


class Group:
    """Members started and stopped at will, each a store and its replication."""

    def __init__(self, tmp_path: Path, config: Config, nursery: trio.Nursery) -> None:
        self.tmp, self.config, self.nursery = tmp_path, config, nursery
        self.members: dict[str, DLedgerReplication] = {}
        self.scopes: dict[str, trio.CancelScope] = {}

    @classmethod
    async def started(cls, tmp_path: Path, config: Config, nursery: trio.Nursery) -> Group:
        """A group with every member of ``config`` started."""
        group = cls(tmp_path, config, nursery)
        for node in config.brokers:
            await group.start(node)
        return group

    async def start(self, node: BrokerNode) -> None:
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[None]) -> None:
            with scope:
                store = raft_message_store(self.tmp / node.node, self.config.store)
                async with open_message_store(store.root, store.config, store=store):
                    rep = DLedgerReplication(node, self.config, store, raft_parts(store))
                    self.members[node.node] = rep
                    host, port = node.listen.rsplit(":", 1)
                    async with trio.open_nursery() as inner:
                        await inner.start(rep.serve, f"{host}:{int(port) + 1}")
                        task_status.started()
                        await trio.sleep_forever()

        await self.nursery.start(run)
        self.scopes[node.node] = scope

    async def stop(self, node: str) -> None:
        self.scopes.pop(node).cancel()
        self.members.pop(node)

    async def leader(self, timeout_s: float = 10.0) -> DLedgerReplication:
        with trio.fail_after(timeout_s):
            while True:
                leaders = [m for m in self.members.values() if m.writable]
                if len(leaders) == 1:
                    return leaders[0]
                await trio.sleep(0.01)


async def put_committed(leader: DLedgerReplication, records: list[MessageRecord]) -> list[int]:
    offsets = []
    for rec in records:
        result = leader.store.put(rec)
        assert await leader.wait_replicated(result.phys_offset, result.phys_offset + result.size) is Replicated.OK
        offsets.append(result.queue_offset)
    return offsets


async def wait_dispatched(store: MessageStore, per_queue: int, timeout_s: float = 10.0) -> None:
    with trio.fail_after(timeout_s):
        while any(store.max_queue_offset("Orders", q) < per_queue for q in range(QUEUES)):
            await trio.sleep(0.01)


def queue_bodies(store: MessageStore) -> dict[int, list[bytes]]:
    out = {}
    for q in range(QUEUES):
        entries = store.queue_entries("Orders", q, 0, 1000)
        records = [store.read_record(e.phys_offset) for _, e in entries]
        assert all(r.phys_offset == e.phys_offset for r, (_, e) in zip(records, entries))
        out[q] = [r.body for r in records]
    return out


async def test_members_commit_dispatch_fail_over_and_catch_up(tmp_path, small_store_config):
    config = group_config(small_store_config, 3)
    async with trio.open_nursery() as nursery:
        group = await Group.started(tmp_path, config, nursery)
        leader = await group.leader()
        assert leader.broker_id == 0
        assert await put_committed(leader, [msg(i) for i in range(40)]) == [i // QUEUES for i in range(40)]
        for member in group.members.values():
            await wait_dispatched(member.store, 10)
            if member is not leader:
                assert not member.writable and member.broker_id == follower_broker_id(member.node)
                with pytest.raises(ReadOnlyStoreError):
                    member.store.put(msg(99))
        assert len({repr(queue_bodies(m.store)) for m in group.members.values()}) == 1

        old = leader.node
        await group.stop(old.node)
        started = trio.current_time()
        leader = await group.leader()
        assert trio.current_time() - started < 5.0
        assert await put_committed(leader, [msg(i) for i in range(40, 44)]) == [10] * QUEUES  # offsets go on

        await group.start(old)
        await wait_dispatched(group.members[old.node].store, 11)
        assert len({repr(queue_bodies(m.store)) for m in group.members.values()}) == 1
        assert queue_bodies(leader.store)[0] == [msg(i).body for i in range(0, 44, QUEUES)]
        nursery.cancel_scope.cancel()


async def test_a_master_slave_store_switched_to_raft_keeps_its_messages_and_queue_offsets(tmp_path, small_store_config):
    root = tmp_path / "g-0"
    async with open_message_store(root, small_store_config) as classic:
        classic_results = [classic.put(msg(i)) for i in range(20)]
    config = group_config(small_store_config, 1)
    async with trio.open_nursery() as nursery:
        group = Group(tmp_path, config, nursery)
        await group.start(config.brokers[0])
        leader = await group.leader()
        store = leader.store
        for res in classic_results:  # every old offset still reads, as the old msgIds name it
            assert store.read_record(res.phys_offset).body == msg(classic_results.index(res)).body
        assert await put_committed(leader, [msg(i) for i in range(20, 24)]) == [5] * QUEUES
        await wait_dispatched(store, 6)
        base = leader.raft.raft_log.base
        assert base % small_store_config.segment_size_bytes == 0 and base > classic_results[-1].phys_offset
        entries = store.queue_entries("Orders", 0, 5, 1)
        assert entries[0][1].phys_offset >= base + HEADER_SIZE
        await group.stop(config.brokers[0].node)

        await group.start(config.brokers[0])  # reopened: the base stays, nothing is dispatched twice
        leader = await group.leader()
        assert [leader.store.max_queue_offset("Orders", q) for q in range(QUEUES)] == [6] * QUEUES
        assert queue_bodies(leader.store)[1] == [msg(i).body for i in range(1, 24, QUEUES)]
        nursery.cancel_scope.cancel()


def test_the_plugin_makes_the_raft_store_and_strategy_for_dledger_only(tmp_path, small_store_config):
    host = plugin_host(load_entry_points=False)
    made: list[str] = []

    class Observer:
        @hookimpl
        def mq_message_store(self, mode: str, node: BrokerNode, config: Config, root: Path,
                             plugins: PluginHost) -> None:
            made.append(mode)  # "not mine": the built-in plugins still answer

    host.register(Observer())
    config = group_config(small_store_config, 3)
    node = config.brokers[0]
    assert host.message_store("async", node, config, tmp_path / "a") is None
    store = host.message_store("dledger", node, config, tmp_path / "d")
    assert store is not None and isinstance(store.parts, RaftParts) and made == ["async", "dledger"]
    rep = host.replication("dledger", node, config, store)
    assert isinstance(rep, DLedgerReplication) and rep.waits_for_replicas and not rep.writable
    assert rep.peers == {b.node: f"127.0.0.1:{int(b.listen.rsplit(':', 1)[1]) + 1}" for b in config.brokers}
    with pytest.raises(TypeError):
        host.replication("dledger", node, config, MessageStore(tmp_path / "c", small_store_config))


async def test_a_leader_dispatches_what_it_proposed_only_while_the_log_still_holds_it(tmp_path, small_store_config):
    """The leader dispatches its own records from the fields it put (no decode), matched by raft
    index and term; an entry another leader wrote at the same index is read from the log."""
    store = raft_message_store(tmp_path / "g-0", small_store_config)
    raft = raft_parts(store)
    term = 1

    def propose(bodies: list[bytes]) -> list[int]:
        first = raft.raft_log.last_index + 1
        raft.raft_log.append([Entry(first + i, term, body) for i, body in enumerate(bodies)])
        return list(range(first, first + len(bodies)))

    async with open_message_store(store.root, store.config, store=store):
        raft.attach_proposer(propose)
        store.set_role(StoreRole.WRITER)
        store.put_many([msg(i) for i in range(0, 8, QUEUES)])  # queue 0, offsets 0 and 1: entries 0 and 1
        assert raft.dispatch_committed(0) == 1 and store.max_queue_offset("Orders", 0) == 1
        # deposed before entry 1 committed: the leader of term 2 wrote another record at index 1
        raft.raft_log.truncate_after(0)
        other = msg(50)  # queue 2
        prep = prepare_record(other)
        other_bytes = bytearray(prep[0])
        write_record(other_bytes, 0, other, prep, 0, raft.raft_log.record_offsets([prep[0]])[0], 7)
        raft.raft_log.append([Entry(1, 2, bytes(other_bytes))])
        assert raft.dispatch_committed(1) == 1
        assert store.max_queue_offset("Orders", 0) == 1  # the proposed msg(4) never reached queue 0
        assert queue_bodies(store)[2] == [other.body]
        term = 3
        store.set_role(StoreRole.WRITER)
        store.put_many([msg(i) for i in range(8, 16, QUEUES)])
        assert raft.dispatch_committed(3) == 2
        assert queue_bodies(store)[0] == [msg(0).body, msg(8).body, msg(12).body]


def _batch(first: int, count: int) -> RecordBatch:
    items = [BatchItem(msg(first + i).body, {"UNIQ_KEY": f"U{first + i:06d}"}) for i in range(count)]
    batch = record_batch(BatchFields("Orders", 1, 0, 1_700_000_000_000, ("10.0.0.9", 40000), ("127.0.0.1", 10911), 0),
                         "C1", encode_batch(items))
    assert batch is not None
    return batch


async def test_a_refused_proposal_leaves_the_store_as_it_was_and_a_cut_batch_is_read_from_the_log(
        tmp_path, small_store_config):
    """The write path is the master's (MessageStore.put_batch) with the raft proposals as its
    log: a proposal the raft node refuses takes no queue offset and no index room; a batch a
    later leader cut short is dispatched from what the log holds."""
    store = raft_message_store(tmp_path / "g-0", small_store_config)
    raft = raft_parts(store)
    refuse = True

    def propose(bodies: list[bytes]) -> range | Code:
        if refuse:
            return Code.LEADER_PENDING_FULL
        first = raft.raft_log.last_index + 1
        raft.raft_log.append(BodyRun(first, 1, bodies))
        return range(first, first + len(bodies))

    async with open_message_store(store.root, store.config, store=store):
        raft.attach_proposer(propose)
        store.set_role(StoreRole.WRITER)
        with pytest.raises(ReadOnlyStoreError, match="LEADER_PENDING_FULL"):
            store.put_batch(_batch(0, 5))
        assert (store.index.reserved, raft.raft_log.last_index, len(raft.proposals.kept)) == (0, -1, 0)
        refuse = False
        store.put_batch(_batch(0, 5))  # entries 0..4, queue offsets 0..4
        assert raft.dispatch_committed(3) == 0  # a batch put is dispatched whole, once all of it commits
        raft.raft_log.truncate_after(2)  # deposed: a later leader kept entries 0..2 and wrote its own
        other = msg(99)
        prep = prepare_record(other)
        other_bytes = bytearray(prep[0])
        write_record(other_bytes, 0, other, prep, 0, raft.raft_log.record_offsets([prep[0]])[0], 7)
        raft.raft_log.append([Entry(3, 2, bytes(other_bytes))])
        assert raft.dispatch_committed(3) == 4 and not raft.proposals.kept
        assert queue_bodies(store)[1] == [msg(i).body for i in range(3)]
        assert queue_bodies(store)[3] == [other.body]
        assert [store.query_by_key("Orders", f"U{i:06d}") != [] for i in range(5)] == [True] * 3 + [False] * 2


async def test_a_sealed_raft_group_continues_as_master_and_slaves_and_can_go_back_to_raft(tmp_path, small_store_config):
    config = group_config(small_store_config, 3)
    roots = [tmp_path / b.node for b in config.brokers]
    async with trio.open_nursery() as nursery:
        group = await Group.started(tmp_path, config, nursery)
        leader = await group.leader()
        assert await put_committed(leader, [msg(i) for i in range(24)]) == [i // QUEUES for i in range(24)]
        lagging = next(n for n in group.members if n != leader.node.node)
        await group.stop(lagging)  # misses the next four
        assert await put_committed(leader, [msg(i) for i in range(24, 28)]) == [6] * QUEUES
        for node in list(group.members):
            await group.stop(node)
        nursery.cancel_scope.cancel()

    with pytest.raises(StoreError, match="never sealed"):
        MessageStore(roots[0], small_store_config).open()
    # an offline tool: trio.run inside
    sealed = await trio.to_thread.run_sync(seal_group, roots, small_store_config, raft_message_store)
    assert len(sealed) == 3 and len({m.floor for m in sealed}) == 1
    assert {m.root.name: m.copied for m in sealed}[lagging] >= 4
    sealed_again = await trio.to_thread.run_sync(seal_group, roots, small_store_config, raft_message_store)
    assert sealed_again == []  # sealed already
    floor = sealed[0].floor
    for root in roots:  # each opens as a classic store holding all 28; new records go from the floor on
        async with open_message_store(root, small_store_config) as store:
            assert store.log_floor() == floor
            assert queue_bodies(store)[3] == [msg(i).body for i in range(3, 28, QUEUES)]
            put = store.put(msg(28))
            assert put.phys_offset == floor and put.queue_offset == 7

    # back to raft: the sealed era and the classic records after it stay readable
    async with trio.open_nursery() as nursery:
        group = await Group.started(tmp_path, config, nursery)
        leader = await group.leader()
        assert leader.raft.raft_log.base == floor + small_store_config.segment_size_bytes
        assert await put_committed(leader, [msg(32)]) == [8]
        assert queue_bodies(leader.store)[0] == [msg(i).body for i in range(0, 33, QUEUES)]
        nursery.cancel_scope.cancel()


def data_files(store: MessageStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store.root / "commitlog").iterdir()) if p.name.isdigit()}


async def wait_caught_up(member: DLedgerReplication, leader: DLedgerReplication, timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        while (member.store.reput_offset, member.raft.committed_index) != \
                (leader.store.reput_offset, leader.raft.committed_index):
            await trio.sleep(0.01)


async def test_retention_deletes_committed_files_and_members_behind_it_are_installed(tmp_path, small_store_config):
    """Members delete the data files retention may take; a member that was down meanwhile, and
    one that comes back with an empty store, get the leader's retained files as they lie, hold
    the same messages in their queues, and can lead."""
    store_config = dataclasses.replace(small_store_config, segment_size_bytes=8192)
    config = group_config(store_config, 3)
    async with trio.open_nursery() as nursery:
        group = await Group.started(tmp_path, config, nursery)
        leader = await group.leader()
        await put_committed(leader, [msg(i) for i in range(60)])
        behind = next(n for n in config.brokers if n.node != leader.node.node)
        behind_end = group.members[behind.node].raft.raft_log.last_index
        await group.stop(behind.node)
        await put_committed(leader, [msg(i) for i in range(60, 160)])
        # files last written before now will have outlived retention at `later`; the rest not
        later = time.time() + store_config.retention_hours * 3600
        await put_committed(leader, [msg(i) for i in range(160, 200)])
        other = next(m for m in group.members.values() if m is not leader)
        await wait_caught_up(other, leader)
        for member in (leader, other):
            retired = await member.store.apply_retention(now=later)
            assert len(retired) >= 5 and member.raft.raft_log.first_index > behind_end + 1
            assert member.store.min_queue_offset("Orders", 0) > 0
        first_kept = leader.raft.raft_log.first_index
        expected = queue_bodies(leader.store)
        assert expected[0][-1] == msg(196).body and 5 <= len(expected[0]) < 40

        await group.start(behind)  # down since before the leader deleted what it would need
        installed = group.members[behind.node]
        await wait_caught_up(installed, leader)
        assert installed.raft.raft_log.first_index == first_kept
        assert data_files(installed.store) == data_files(leader.store)
        assert queue_bodies(installed.store) == expected

        await group.stop(other.node.node)  # back with an empty store
        shutil.rmtree(tmp_path / other.node.node)
        await group.start(other.node)
        fresh = group.members[other.node.node]
        await wait_caught_up(fresh, leader)
        assert data_files(fresh.store) == data_files(leader.store) and queue_bodies(fresh.store) == expected

        await group.stop(leader.node.node)  # the installed member can lead
        new = await group.leader()
        if new is not installed:
            assert new.transfer_leadership(installed.node.node) is None
            with trio.fail_after(10):
                while not installed.writable:
                    await trio.sleep(0.01)
        assert await put_committed(installed, [msg(200)]) == [50]
        await wait_caught_up(fresh, installed)
        assert queue_bodies(fresh.store)[0][-2:] == [msg(196).body, msg(200).body]
        for node in list(group.members):
            await group.stop(node)
        nursery.cancel_scope.cancel()

    # the seal lines the members up (the old leader still holds files the others deleted)
    roots = [tmp_path / b.node for b in config.brokers]
    sealed = await trio.to_thread.run_sync(seal_group, roots, store_config, raft_message_store)
    assert len({m.floor for m in sealed}) == 1
    for root in roots:
        async with open_message_store(root, store_config) as store:
            bodies = queue_bodies(store)
            assert bodies[0][-2:] == [msg(196).body, msg(200).body]
            assert all(bodies[q][-len(expected[q]) - (q == 0):] == expected[q] + [msg(200).body] * (q == 0)
                       for q in range(QUEUES))
