"""Master-slave replication in one process: real stores in temporary folders, the HA service
and client on loopback sockets."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from core.broker.replication import Replicated
from core.config import Config, ReplicationConfig, StoreConfig
from core.errors import ReadOnlyStoreError
from core.node_specs import BrokerNode
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore, open_message_store, opened_store
from formats.record import MessageRecord
from plugins import plugin_host
from replication.master_slave.protocol import encode_report
from replication.master_slave.strategy import MasterSlaveReplication

FAST = ReplicationConfig(ha_heartbeat_interval_ms=200, ha_housekeeping_interval_ms=2000, ha_reconnect_interval_ms=100)


def msg(i: int, tag: str = "A", body_size: int = 300) -> MessageRecord:
    return MessageRecord(
        topic="Orders", body=f"{tag}{i:05d}".encode() * (body_size // 6), queue_id=i % 4,
        born_timestamp=1_700_000_000_000 + i, born_host=("10.0.0.9", 40000), store_host=("127.0.0.1", 10911),
        properties={"KEYS": f"{tag}-{i}", "TAGS": tag, "UNIQ_KEY": f"{tag}{i:031X}"},
    )


def config(store: StoreConfig, replication: ReplicationConfig = FAST) -> Config:
    return Config(store=store, replication=replication)


@contextlib.asynccontextmanager
async def pair(tmp_path: Path, store_config: StoreConfig, *, sync: bool = False,
               replication: ReplicationConfig = FAST, master_dir: str = "master",
               slave_dir: str = "slave") -> AsyncIterator[tuple[MasterSlaveReplication, MasterSlaveReplication]]:
    """A master and a slave replicating over loopback."""
    cfg = config(store_config, replication)
    async with open_message_store(tmp_path / master_dir, store_config) as mstore, \
            open_message_store(tmp_path / slave_dir, store_config) as sstore, trio.open_nursery() as nursery:
        master = MasterSlaveReplication(BrokerNode("g", 0), cfg, mstore, sync=sync)
        slave = MasterSlaveReplication(BrokerNode("g", 1), cfg, sstore, sync=sync)
        ha = await nursery.start(master.serve, "127.0.0.1:0")
        await nursery.start(slave.serve, "127.0.0.1:0")
        slave.master_learned("127.0.0.1:1", ha)
        yield master, slave
        nursery.cancel_scope.cancel()


async def wait_caught_up(master: MessageStore, slave: MessageStore, timeout_s: float = 10) -> None:
    with trio.fail_after(timeout_s):
        while not slave.commitlog.write_offset == slave.reput_offset == master.commitlog.write_offset:
            await trio.sleep(0.01)


def log_bytes(store_dir: Path, start: int = 0) -> bytes:
    """Every CommitLog byte from ``start`` (segments concatenated)."""
    segs = sorted((store_dir / "commitlog").iterdir())
    data = b"".join(p.read_bytes() for p in segs if int(p.name) + p.stat().st_size > start)
    first = int(segs[0].name) if segs else 0
    for p in segs:
        if int(p.name) + p.stat().st_size > start:
            first = int(p.name)
            break
    return data[start - first :]


async def test_empty_slave_starts_at_the_last_segment_and_copies_byte_for_byte(tmp_path, small_store_config):
    async with pair(tmp_path, small_store_config) as (master, slave):
        for i in range(600):  # ~190 KiB: four 64 KiB segments
            master.store.put(msg(i))
        await wait_caught_up(master.store, slave.store)
        start = slave.store.commitlog.min_offset
        assert start == master.store.commitlog.files.last.start > 0
        for i in range(600, 900):  # live appends stream too, across a segment roll
            master.store.put(msg(i))
        await wait_caught_up(master.store, slave.store)
        end = master.store.commitlog.write_offset
        for seg in master.store.commitlog.files.files:
            if seg.start < start:
                continue
            twin = slave.store.commitlog.segment_of(seg.start)
            assert twin is not None and twin.view[:] == seg.view[:], f"segment {seg.start} differs"
        # the slave dispatched its own queues: every record it holds is readable there
        for q in range(4):
            assert slave.store.max_queue_offset("Orders", q) == master.store.max_queue_offset("Orders", q)
            entries = slave.store.queue_entries("Orders", q, slave.store.min_queue_offset("Orders", q), 1000)
            assert entries and all(e.phys_offset >= start for _, e in entries)
        assert slave.store.query_by_key("Orders", "A-899")[0].body == msg(899).body
        assert end == slave.store.commitlog.write_offset
        with pytest.raises(ReadOnlyStoreError):
            slave.store.put(msg(1))


async def test_full_sync_copies_from_offset_zero(tmp_path, small_store_config):
    async with pair(tmp_path, small_store_config, replication=dataclasses.replace(FAST, full_sync=True)) as (master, slave):
        for i in range(400):
            master.store.put(msg(i))
        await wait_caught_up(master.store, slave.store)
        assert slave.store.commitlog.min_offset == 0
        assert log_bytes(tmp_path / "slave") == log_bytes(tmp_path / "master")
        with trio.fail_after(5):  # the slave's ack of its last append reaches the master just after
            while not master.service.links or master.service.links[0].acked != master.store.commitlog.write_offset:
                await trio.sleep(0.01)
        status = master.service.status()
        assert len(status) == 1 and status[0]["lagBytes"] == 0 and status[0]["ackOffset"] == master.store.commitlog.write_offset


async def test_sync_sends_wait_for_the_slave_ack(tmp_path, small_store_config):
    async with pair(tmp_path, small_store_config, sync=True) as (master, slave):
        with trio.fail_after(5):
            while not master.service.links or master.service.links[0].acked is None:
                await trio.sleep(0.01)
        result = master.store.put(msg(1))
        assert await master.wait_replicated(result.phys_offset, result.phys_offset + result.size) is Replicated.OK
        assert slave.store.commitlog.write_offset >= result.phys_offset + result.size


async def test_sync_without_a_slave_answers_not_available_and_a_silent_slave_times_out(tmp_path, small_store_config):
    store_config = dataclasses.replace(small_store_config, sync_flush_timeout_ms=300)
    cfg = config(store_config)
    async with open_message_store(tmp_path / "m", store_config) as store, trio.open_nursery() as nursery:
        master = MasterSlaveReplication(BrokerNode("g", 0), cfg, store, sync=True)
        ha = await nursery.start(master.serve, "127.0.0.1:0")
        put = store.put(msg(1))
        assert await master.wait_replicated(put.phys_offset, put.phys_offset + put.size) is Replicated.NO_REPLICA
        # a slave that reports once and then never acks: close enough to wait for, but never done
        host, port = ha.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(encode_report(put.phys_offset))
        with trio.fail_after(5):
            while not master.service.links or master.service.links[0].acked is None:
                await trio.sleep(0.01)
        started = trio.current_time()
        assert await master.wait_replicated(put.phys_offset, put.phys_offset + put.size) is Replicated.TIMEOUT
        assert 0.25 <= trio.current_time() - started < 3
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def _fork(tmp_path: Path, store_config: StoreConfig, common: int, master_extra: int, slave_extra: int,
                slave_body: int = 300) -> None:
    """A master and a slave store that agree on ``common`` records, then each got its own."""
    async with open_message_store(tmp_path / "master", store_config) as store:
        for i in range(common):
            store.put(msg(i))
    shutil.copytree(tmp_path / "master", tmp_path / "slave")
    async with open_message_store(tmp_path / "master", store_config) as store:
        for i in range(master_extra):
            store.put(msg(i, "M"))
    async with open_message_store(tmp_path / "slave", store_config) as store:
        for i in range(slave_extra):
            store.put(msg(i, "S", slave_body))


@pytest.mark.parametrize(("slave_extra", "label"), [(20, "a fork within the verify window"),
                                                    (900, "a fork far behind the slave's end")])
async def test_forked_slave_is_cut_to_the_common_prefix(tmp_path, small_store_config, slave_extra, label):
    big = dataclasses.replace(small_store_config, segment_size_bytes=1 << 20)
    await _fork(tmp_path, big, common=300, master_extra=50, slave_extra=slave_extra)
    async with open_message_store(tmp_path / "master", big) as probe:
        fork_at = probe.query_by_key("Orders", "M-0")[0].phys_offset
    async with pair(tmp_path, big) as (master, slave):
        await wait_caught_up(master.store, slave.store)
        assert slave.client.truncated_bytes > 0, label
        assert slave.store.query_by_key("Orders", "S-0") == []
        assert slave.store.query_by_key("Orders", "M-49")[0].body == msg(49, "M").body
        assert slave.store.commitlog.read(0, fork_at + 1000) == master.store.commitlog.read(0, fork_at + 1000)
        for q in range(4):
            assert slave.store.max_queue_offset("Orders", q) == master.store.max_queue_offset("Orders", q)
        master.store.put(msg(1, "N"))  # and it keeps replicating
        await wait_caught_up(master.store, slave.store)
    assert log_bytes(tmp_path / "slave") == log_bytes(tmp_path / "master")


async def test_slave_ahead_of_its_master_drops_the_tail_the_master_lacks(tmp_path, small_store_config):
    big = dataclasses.replace(small_store_config, segment_size_bytes=1 << 20)
    await _fork(tmp_path, big, common=300, master_extra=0, slave_extra=40)
    async with pair(tmp_path, big) as (master, slave):
        end = master.store.commitlog.write_offset
        with trio.fail_after(10):
            while slave.store.commitlog.write_offset != end:
                await trio.sleep(0.01)
        assert slave.client.truncated_bytes > 0
        master.store.put(msg(7, "N"))
        await wait_caught_up(master.store, slave.store)
    assert log_bytes(tmp_path / "slave") == log_bytes(tmp_path / "master")


async def test_slave_with_no_common_prefix_refuses_and_keeps_its_files(tmp_path, small_store_config):
    big = dataclasses.replace(small_store_config, segment_size_bytes=1 << 20)
    async with open_message_store(tmp_path / "master", big) as store:
        for i in range(100):
            store.put(msg(i, "M"))
    async with open_message_store(tmp_path / "slave", big) as store:
        for i in range(100):
            store.put(msg(i, "S"))
    before = log_bytes(tmp_path / "slave")
    async with pair(tmp_path, big) as (_master, slave):
        with trio.fail_after(10):
            while slave.client.refused is None:
                await trio.sleep(0.01)
        assert "shares no prefix" in slave.client.refused
        assert slave.runtime_info()["haRefused"] == slave.client.refused
    assert log_bytes(tmp_path / "slave") == before


def test_the_replication_hook_gives_each_mode_its_plugin(tmp_path, small_store_config):
    host = plugin_host(load_entry_points=False)
    asked: list[str] = []

    class Observer:
        @hookimpl
        def mq_replication(self, mode: str, node: BrokerNode, config: Config, store: MessageStore) -> None:
            asked.append(mode)  # "not mine": the built-in plugins still answer

    host.register(Observer())
    cfg = config(small_store_config)
    with opened_store(tmp_path / "s", small_store_config) as store:
        master_async = host.replication("async", BrokerNode("g", 0), cfg, store)
        master_sync = host.replication("sync", BrokerNode("g", 0), cfg, store)
        slave = host.replication("sync", BrokerNode("g", 1), cfg, store)
        assert isinstance(master_async, MasterSlaveReplication) and not master_async.waits_for_replicas
        assert isinstance(master_sync, MasterSlaveReplication) and master_sync.waits_for_replicas
        assert slave is not None and not slave.writable and not slave.waits_for_replicas and slave.master_missing
        with pytest.raises(ReadOnlyStoreError):
            store.put(msg(1))
    assert asked == ["async", "sync", "sync"]
