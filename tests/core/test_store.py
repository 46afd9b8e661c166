import dataclasses
import os
import time

import pytest
import trio

from core.errors import DiskFullError, MessageTooLargeError, StoreClosedError
from core.plugin_manager import PluginHost
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore, open_message_store
from core.store.store_reads import LARGE_READ_BYTES
from core.store.store_types import StoreRole
from formats.consume_queue import CQ_ENTRY_SIZE
from formats.record import MessageRecord, decode_records
from formats.segments import RecordAt, scan_log
from formats.sysflag import TRANSACTION_PREPARED
from formats.tags import tags_code


def msg(i: int, topic: str = "Orders", queue: int | None = None, body_size: int = 300, **props: str) -> MessageRecord:
    return MessageRecord(
        topic=topic, body=f"{i:06d}".encode() * (body_size // 6), queue_id=i % 4 if queue is None else queue,
        born_timestamp=1_700_000_000_000 + i, born_host=("10.0.0.9", 40000), store_host=("127.0.0.1", 10911),
        properties={"KEYS": f"key-{i}", "TAGS": "TagA" if i % 2 else "TagB", "UNIQ_KEY": f"{i:032X}", **props},
    )


async def test_put_assigns_offsets_and_reads_back(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        results = [store.put(msg(i)) for i in range(400)]
        assert [r.queue_offset for r in results if True][:8] == [0, 0, 0, 0, 1, 1, 1, 1]
        assert store.max_queue_offset("Orders", 1) == 100
        for i, r in enumerate(results):
            rec = store.read_record(r.phys_offset)
            assert rec.properties["KEYS"] == f"key-{i}" and rec.phys_offset == r.phys_offset
            assert rec.queue_offset == r.queue_offset and rec.store_timestamp == r.store_timestamp
        entries = store.queue_entries("Orders", 2, 10, 5)
        assert [i for i, _ in entries] == [10, 11, 12, 13, 14]
        for index, entry in entries:
            rec = store.read_record(entry.phys_offset)
            assert (rec.queue_id, rec.queue_offset, rec.total_size) == (2, index, entry.size)
            assert entry.tags_code == tags_code(rec.tags)


async def test_segments_roll_with_a_blank_and_records_never_span(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        results = [store.put(msg(i, body_size=900)) for i in range(300)]
        seg = small_store_config.segment_size_bytes
        assert len(store.commitlog.files.files) > 3
        for r in results:
            assert r.phys_offset // seg == (r.phys_offset + r.size - 1) // seg
    items = list(scan_log(tmp_path / "n" / "commitlog"))
    assert all(isinstance(i, RecordAt) for i in items) and len(items) == 300


async def test_lookup_by_keys_and_uniq_key(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        for i in range(500):  # more than one small index file
            store.put(msg(i, KEYS=f"order-{i % 50} shared"))
        found = store.query_by_key("Orders", "order-7", limit=100)
        assert sorted(int(r.properties["UNIQ_KEY"], 16) for r in found) == list(range(7, 500, 50))
        (one,) = store.query_by_key("Orders", f"{123:032X}")
        assert one.properties["KEYS"] == "order-23 shared"
        assert store.query_by_key("Other", "order-7") == []
        assert len(store.query_by_key("Orders", "shared", limit=32)) == 32
        assert len(store.index.files) > 1


async def test_reopen_continues_queue_offsets(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        for i in range(50):
            store.put(msg(i, queue=0))
    assert not (tmp_path / "n" / "abort").exists()
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        assert store.max_queue_offset("Orders", 0) == 50
        r = store.put(msg(50, queue=0))
        assert r.queue_offset == 50
        assert len(store.query_by_key("Orders", "key-3")) == 1


async def test_transaction_halves_stay_out_of_consume_queues(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        half = dataclasses.replace(msg(1, queue=0), sysflag=TRANSACTION_PREPARED)
        r = store.put(half)
        assert r.queue_offset == 0 and store.max_queue_offset("Orders", 0) == 0
        store.put(msg(2, queue=0))
        assert store.max_queue_offset("Orders", 0) == 1


async def test_oversized_body_is_refused_and_nothing_is_written(tmp_path, small_store_config):
    config = dataclasses.replace(small_store_config, message_size_bytes_max=1000)
    async with open_message_store(tmp_path / "n", config) as store:
        before = store.commitlog.write_offset
        with pytest.raises(MessageTooLargeError):
            store.put(msg(1, body_size=2000))
        assert store.commitlog.write_offset == before


async def test_record_larger_than_a_segment_is_refused(tmp_path, small_store_config):
    config = dataclasses.replace(small_store_config, message_size_bytes_max=10**6)
    async with open_message_store(tmp_path / "n", config) as store:
        store.put(msg(0))
        with pytest.raises(MessageTooLargeError):
            store.put(msg(1, body_size=70_000))
        assert store.put(msg(2)).queue_offset == 0  # still writable, queue 2 untouched


async def test_disk_above_ratio_refuses_writes_but_serves_reads(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        r = store.put(msg(0))
    tight = dataclasses.replace(small_store_config, disk_max_used_ratio=1e-9)
    async with open_message_store(tmp_path / "n", tight) as store:
        before = store.commitlog.write_offset
        with pytest.raises(DiskFullError, match="writes refused, reads still served"):
            store.put(msg(1))
        assert store.commitlog.write_offset == before
        assert store.read_record(r.phys_offset).properties["KEYS"] == "key-0"
        assert store.stats.refused_disk_full == 1


async def test_closed_store_refuses_writes(tmp_path, small_store_config):
    store = MessageStore(tmp_path / "n", small_store_config)
    with pytest.raises(StoreClosedError):
        store.put(msg(0))


async def test_group_commit_covers_many_appends_with_one_fsync(tmp_path, small_store_config):
    config = dataclasses.replace(small_store_config, flush="sync")
    async with open_message_store(tmp_path / "n", config) as store:
        done = []

        async def producer(k: int) -> None:
            for j in range(10):
                result = await store.put_durable(msg(k * 10 + j))
                assert result.flushed
                assert store.commitlog.flushed_offset >= result.phys_offset + result.size
                done.append(result)

        async with trio.open_nursery() as nursery:
            for k in range(50):
                nursery.start_soon(producer, k)
        assert len(done) == 500
        assert store.stats.flushes < 100, "group commit should share fsyncs between appends"


async def test_async_flush_makes_appends_durable_within_the_interval(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        r = store.put(msg(0))
        with trio.fail_after(5):
            while store.commitlog.flushed_offset < r.phys_offset + r.size:
                await trio.sleep(0.01)


async def test_dispatch_hook_sees_every_record_in_order(tmp_path, small_store_config):
    seen = []
    queues = set()

    class Listener:
        @hookimpl
        def mq_records_dispatched(self, store_dir, requests):
            seen.extend((r.queue_id, r.queue_offset, r.phys_offset) for r in requests)
            queues.update(requests.queues)
            assert [r.phys_offset for r in requests[1:]] == [r.phys_offset for r in list(requests)[1:]]

    plugins = PluginHost(load_entry_points=False)
    plugins.register(Listener())
    async with open_message_store(tmp_path / "n", small_store_config, plugins) as store:
        results = [store.put(msg(i)) for i in range(30)]
        store.dispatch_pending()
    assert seen == [(i % 4, r.queue_offset, r.phys_offset) for i, r in enumerate(results)]
    assert queues == {(msg(0).topic, q) for q in range(4)}


async def test_large_reads_go_through_a_thread_and_match(tmp_path, small_store_config):
    config = dataclasses.replace(small_store_config, segment_size_bytes=1 << 20)
    async with open_message_store(tmp_path / "n", config) as store:
        results = [store.put(msg(i, body_size=3000)) for i in range(40)]
        first, last = results[0], results[-1]
        span = last.phys_offset + last.size - first.phys_offset
        assert span >= LARGE_READ_BYTES
        data = await store.read_bytes(first.phys_offset, span)
        assert data == store.commitlog.read(first.phys_offset, span)
        assert [r.properties["KEYS"] for r in decode_records(data)] == [f"key-{i}" for i in range(40)]


async def test_retention_deletes_old_segments_and_queue_files(tmp_path, small_store_config):
    plugins = PluginHost(load_entry_points=False)
    retired = []

    class Listener:
        @hookimpl
        def mq_segment_retired(self, segment, archive):
            retired.append((segment, archive))

    plugins.register(Listener())
    config = dataclasses.replace(small_store_config, retention_hours=1.0)
    async with open_message_store(tmp_path / "n", config, plugins) as store:
        for i in range(400):
            store.put(msg(i, queue=0, body_size=900))
        await store.flush()
        segments = list(store.commitlog.files.files)
        old = time.time() - 2 * 3600
        for seg in segments[:3]:
            os.utime(seg.path, (old, old))
        gone = await store.apply_retention()
        assert gone == [s.path for s in segments[:3]]
        assert [s for s, _ in retired] == gone and all(a is None for _, a in retired)
        assert store.commitlog.min_offset == segments[3].start
        low = store.min_queue_offset("Orders", 0)
        assert low > 0
        (index, entry), *_ = store.queue_entries("Orders", 0, 0, 1)
        assert index == low and entry.phys_offset >= segments[3].start
        cq_files = store.queues.get("Orders", 0).files.files
        assert cq_files[0].start > 0 and cq_files[0].start % CQ_ENTRY_SIZE == 0
    async with open_message_store(tmp_path / "n", config) as store:  # a restart begins there too
        assert store.min_queue_offset("Orders", 0) == low
        assert store.read_record(store.queue_entries("Orders", 0, 0, 1)[0][1].phys_offset).queue_offset == low


async def test_retention_archives_when_configured_and_dump_still_reads(tmp_path, small_store_config):
    config = dataclasses.replace(small_store_config, retention_hours=1.0, archive=True)
    async with open_message_store(tmp_path / "data" / "n1", config) as store:
        offsets = [store.put(msg(i, body_size=900)).phys_offset for i in range(200)]
        await store.flush()
        first = store.commitlog.files.files[0]
        old = time.time() - 7200
        os.utime(first.path, (old, old))
        await store.apply_retention()
    archive = tmp_path / "data" / "archive" / "n1" / (first.path.name + ".zst")
    assert archive.exists() and not first.path.exists()
    assert [r.offset for r in scan_log(tmp_path / "data" / "n1" / "commitlog")] == offsets


async def test_put_many_keeps_a_batch_in_one_segment_with_dense_offsets(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        for i in range(50):  # leave the first segment partly full
            store.put(msg(i, queue=1, body_size=900))
        seg = small_store_config.segment_size_bytes
        batch = [msg(100 + i, queue=1, body_size=900) for i in range(30)]
        results = store.put_many(batch)
        assert len({r.phys_offset // seg for r in results}) == 1, "a batch never straddles segments"
        assert [r.queue_offset for r in results] == list(range(50, 80))
        assert [r.phys_offset for r in results[1:]] == [r.phys_offset + r.size for r in results[:-1]]
        assert store.max_queue_offset("Orders", 1) == 80
        with pytest.raises(ValueError):
            store.put_many([msg(1, queue=0), msg(2, queue=1)])
        assert store.max_queue_offset("Orders", 0) == 0, "a refused batch stores nothing"


async def test_a_readable_limit_holds_records_back_from_readers_and_a_cut_drops_them(tmp_path, small_store_config):
    # controller mode: readers see only what every in-sync replica holds (the confirm offset)
    async with open_message_store(tmp_path / "n", small_store_config) as store:
        first = [store.put(msg(i, queue=0)) for i in range(3)]
        confirmed = first[-1].phys_offset + first[-1].size
        store.set_readable_limit(confirmed)
        held = [store.put(msg(i, queue=0)) for i in range(3, 6)]
        assert store.max_queue_offset("Orders", 0) == 3  # the three past the limit wait
        store.set_readable_limit(held[0].phys_offset + held[0].size)
        assert store.max_queue_offset("Orders", 0) == 4
        store.truncate(held[1].phys_offset)  # a returning master cuts what no member had
        store.set_readable_limit(None)
        assert store.max_queue_offset("Orders", 0) == 4
        assert [i for i, _ in store.queue_entries("Orders", 0, 0, 10)] == [0, 1, 2, 3]
        again = store.put(msg(9, queue=0))
        assert again.queue_offset == 4 and store.max_queue_offset("Orders", 0) == 5


async def test_a_replica_dispatches_copied_records_only_up_to_its_readable_limit(tmp_path, small_store_config):
    async with open_message_store(tmp_path / "m", small_store_config) as master, \
            open_message_store(tmp_path / "s", small_store_config) as slave:
        put = [master.put(msg(i, queue=0)) for i in range(3)]
        slave.set_role(StoreRole.REPLICA, "a slave")
        slave.set_readable_limit(put[0].phys_offset + put[0].size)  # the master's confirm offset
        slave.append_replicated(0, master.read_log(0, master.log_end))
        slave.dispatch_replicated()
        assert slave.max_queue_offset("Orders", 0) == 1
        slave.set_readable_limit(master.log_end)
        assert slave.max_queue_offset("Orders", 0) == 3
        # becoming the writer cuts only a record left half-copied, never one held back by a limit
        slave.set_readable_limit(put[0].phys_offset + put[0].size)
        slave.set_role(StoreRole.WRITER)
        assert slave.log_end == master.log_end
