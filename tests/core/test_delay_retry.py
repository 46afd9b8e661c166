"""Delayed messages, CONSUMER_SEND_MSG_BACK retries and dead letters."""

import dataclasses
import time

import pytest
import trio

from core.broker.timers.schedule import ScheduleService, to_schedule, to_timer
from core.config import ConfigError, StoreConfig, parse_delay_levels
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.store.message_store import open_message_store
from core.topic_names import SCHEDULE_TOPIC
from formats.properties import encode_properties
from formats.record import MessageRecord, decode_records
from tests.core.cluster_harness import SMALL_STORE, start_cluster
from tests.core.test_broker import pull_cmd, send_cmd

FAST_LEVELS = dataclasses.replace(SMALL_STORE, delay_levels="200ms 400ms 600ms")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_delay_levels_parse_like_rocketmq_and_refuse_nonsense():
    assert parse_delay_levels("1s 5s 1m 2h 100ms 1d") == (1000, 5000, 60_000, 7_200_000, 100, 86_400_000)
    assert StoreConfig().delay_levels_ms[:3] == (1000, 5000, 10_000) and len(StoreConfig().delay_levels_ms) == 18
    for bad in ("", "5x", "0s", "1s -2s"):
        with pytest.raises(ConfigError, match="delay_levels"):
            StoreConfig(delay_levels=bad)


def delayed(i: int, level: int, topic: str = "Orders") -> MessageRecord:
    rec = MessageRecord(topic, f"m{i}".encode(), {"UNIQ_KEY": f"U{i:04d}", "DELAY": str(level), "TAGS": "t"},
                        queue_id=i % 2, born_timestamp=1, store_host=("127.0.0.1", 10911))
    return to_schedule(rec, level, 3)


async def test_schedule_service_delivers_due_messages_in_order_and_resumes_from_its_file(tmp_path):
    async with open_message_store(tmp_path / "n", FAST_LEVELS) as store:
        service = ScheduleService(store, tmp_path / "config", ("127.0.0.1", 10911))
        results = [store.put(delayed(i, level)) for i, level in enumerate([1, 2, 1, 9])]
        stamps = [r.store_timestamp for r in results]
        # the ConsumeQueue entry's tagsCode is the due time; level 9 counts as the last (3)
        entries = store.queue_entries(SCHEDULE_TOPIC, 0, 0, 10) + store.queue_entries(SCHEDULE_TOPIC, 2, 0, 10)
        assert [e.tags_code for _, e in entries] == [stamps[0] + 200, stamps[2] + 200, stamps[3] + 600]
        assert service.deliver_due(stamps[0] + 199) == stamps[0] + 200  # nothing due yet
        assert store.max_queue_offset("Orders", 0) == 0
        next_due = service.deliver_due(max(stamps) + 200)
        assert next_due == stamps[1] + 400 and service.stats.delivered == 2
        got = [store.read_record(e.phys_offset) for _, e in store.queue_entries("Orders", 0, 0, 10)]
        assert [r.body for r in got] == [b"m0", b"m2"]
        assert "DELAY" not in got[0].properties and got[0].properties["REAL_TOPIC"] == "Orders"
        assert got[0].properties["TAGS"] == "t" and got[0].queue_id == 0
        service.save()
        assert service.deliver_due(max(stamps) + 10_000) is None and service.stats.delivered == 4
        assert service.backlog() == {1: 0, 2: 0, 3: 0}
        # a new service (a restart after a clean save) starts where the file says
        again = ScheduleService(store, tmp_path / "config", ("127.0.0.1", 10911))
        assert again.offsets == {1: 2, 2: 0, 3: 0}


async def test_a_crash_before_saving_progress_does_not_deliver_twice(tmp_path):
    async with open_message_store(tmp_path / "n", FAST_LEVELS) as store:
        first = ScheduleService(store, tmp_path / "config", ("127.0.0.1", 10911))
        stamp = store.put(delayed(1, 1)).store_timestamp
        store.put(delayed(2, 1))
        first.deliver_due(stamp + 1000)
        assert first.stats.delivered == 2  # ... and the process dies before first.save()
        restarted = ScheduleService(store, tmp_path / "config", ("127.0.0.1", 10911), started_ms=stamp + 1001)
        restarted.deliver_due(stamp + 1001)
        assert restarted.stats.skipped_as_delivered == 2 and restarted.stats.delivered == 0
        assert store.max_queue_offset("Orders", 1) == 1 and store.max_queue_offset("Orders", 0) == 1


async def test_a_recalled_timer_message_is_dropped_when_due_also_after_a_restart(tmp_path):
    async with open_message_store(tmp_path / "n", FAST_LEVELS) as store:
        first = ScheduleService(store, tmp_path / "config", ("127.0.0.1", 10911))
        due = now_ms() + 60_000
        for i in range(2):
            rec = MessageRecord("Orders", f"t{i}".encode(), {"UNIQ_KEY": f"T{i}"}, queue_id=0,
                                store_host=("127.0.0.1", 10911))
            store.put(to_timer(rec, due, first.timer_queue))
        store.put(first.recall("T0", due))  # the marker, as RECALL_MESSAGE stores it
        restarted = ScheduleService(store, tmp_path / "config", ("127.0.0.1", 10911))  # knows it from the log only
        assert restarted.deliver_due(due - 1) == due
        restarted.deliver_due(due)
        assert restarted.stats.recalled == 1 and restarted.stats.delivered == 1
        got = [store.read_record(e.phys_offset).body for _, e in store.queue_entries("Orders", 0, 0, 10)]
        assert got == [b"t1"]


@pytest.fixture
async def fast_broker(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path, store=FAST_LEVELS)
    running = await cluster.start_broker()
    async with open_remoting_client() as client:
        yield client, running, cluster


async def wait_pull(client, addr, topic, queue_id=0, count=1, deadline_s=10.0):
    with trio.fail_after(deadline_s):
        while True:
            resp = await client.invoke(addr, pull_cmd(topic, queue_id, 0))
            recs = decode_records(resp.body) if resp.code == ResponseCode.SUCCESS else []
            if len(recs) >= count:
                return recs
            await trio.sleep(0.02)


def delayed_send(topic: str, body: bytes, level: int) -> RemotingCommand:
    cmd = send_cmd(topic, body)
    cmd.ext_fields["i"] = encode_properties({"TAGS": "t", "DELAY": str(level), "UNIQ_KEY": "AB" * 16})
    return cmd


async def test_delayed_send_waits_then_lands_in_its_queue(fast_broker):
    client, running, _ = fast_broker
    sent_at = now_ms()
    resp = await client.invoke(running.address, delayed_send("Later", b"soon", 2))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueId"] == "0"
    early = await client.invoke(running.address, pull_cmd("Later", 0, 0))
    assert early.code != ResponseCode.SUCCESS, "not visible before it is due"
    (rec,) = await wait_pull(client, running.address, "Later")
    assert rec.body == b"soon" and rec.store_timestamp >= sent_at + 400
    assert "DELAY" not in rec.properties and rec.uniq_key == "AB" * 16


async def test_batches_with_delay_are_refused(fast_broker):
    from formats.batch import BatchItem, encode_batch

    client, running, _ = fast_broker
    cmd = send_cmd("B", encode_batch([BatchItem(b"x", {"DELAY": "1"})]), batch="true")
    cmd.code = RequestCode.SEND_BATCH_MESSAGE
    resp = await client.invoke(running.address, cmd)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "delay" in resp.remark


def send_back_cmd(offset: int, group: str = "G", delay: int = 0, **extra: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK,
                           ext_fields={"group": group, "offset": str(offset), "delayLevel": str(delay), **extra})


async def test_send_back_retries_with_growing_delay_then_dead_letters(fast_broker):
    client, running, _ = fast_broker
    addr = running.address
    assert (await client.invoke(addr, send_cmd("Work", b"job", tags="tg"))).code == ResponseCode.SUCCESS
    (original,) = await wait_pull(client, addr, "Work")
    resp = await client.invoke(addr, send_back_cmd(original.phys_offset))
    assert resp.code == ResponseCode.SUCCESS
    (retry,) = await wait_pull(client, addr, "%RETRY%G")
    assert retry.body == b"job" and retry.reconsume_times == 1
    assert retry.properties["RETRY_TOPIC"] == "Work" and retry.properties["TAGS"] == "tg"
    assert retry.properties["ORIGIN_MESSAGE_ID"] and retry.store_timestamp >= original.store_timestamp + 600
    # the retry topic exists with a route, so consumers of the group pick it up
    topics = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))
    assert b"%RETRY%G" in topics.body
    # used up: straight to the dead letter queue, no delay
    resp = await client.invoke(addr, send_back_cmd(retry.phys_offset, maxReconsumeTimes="1"))
    assert resp.code == ResponseCode.SUCCESS
    (dead,) = await wait_pull(client, addr, "%DLQ%G", deadline_s=2)
    assert dead.reconsume_times == 2 and dead.properties["RETRY_TOPIC"] == "Work"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == retry.properties["ORIGIN_MESSAGE_ID"]
    # a negative level asks for the dead letter queue at once
    assert (await client.invoke(addr, send_back_cmd(original.phys_offset, delay=-1))).code == ResponseCode.SUCCESS
    assert len(await wait_pull(client, addr, "%DLQ%G", count=2, deadline_s=2)) == 2


async def test_send_back_of_a_bad_offset_is_a_clear_error(fast_broker):
    client, running, _ = fast_broker
    resp = await client.invoke(running.address, send_back_cmd(10**12))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in resp.remark
    resp = await client.invoke(running.address, send_back_cmd(0, group="bad group"))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in resp.remark


async def test_a_delayed_message_survives_a_broker_restart_and_is_delivered_once(fast_broker):
    client, running, cluster = fast_broker
    port = int(running.address.split(":")[1])
    resp = await client.invoke(running.address, delayed_send("Restart", b"once", 3))
    assert resp.code == ResponseCode.SUCCESS
    await cluster.stop_broker(running.name)  # before it is due (600 ms)
    again = await cluster.start_broker(port=port)
    (rec,) = await wait_pull(client, again.address, "Restart")
    assert rec.body == b"once"
    # and once only, even across another restart after delivery
    await cluster.stop_broker(again.name)
    third = await cluster.start_broker(port=port)
    with trio.move_on_after(1.0):
        await wait_pull(client, third.address, "Restart", count=2)
        pytest.fail("delivered twice")


async def test_push_consumer_reconsume_later_brings_the_message_back_through_the_retry_topic(fast_broker):
    from core.client.consumer import PushConsumer
    from core.client.producer import Message, Producer
    from core.client.runtime import open_client

    _, _, cluster = fast_broker
    seen: list[tuple[str, bytes, int]] = []

    async def handler(messages):
        for m in messages:
            seen.append((m.topic, m.body, m.reconsume_times))
        # the first delivery of "b" fails: a and the rest consumed, b given back
        if any(m.body == b"b" and m.reconsume_times == 0 for m in messages):
            return [m.body for m in messages].index(b"b")
        return True

    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "PG")
        for body in (b"a", b"b", b"c"):
            await producer.send(Message("Redo", body))
        consumer = PushConsumer(client, "RG", handler, from_beginning=True)
        consumer.subscribe("Redo")
        await consumer.start()
        with trio.fail_after(20):
            while (("Redo", b"b", 1)) not in seen:
                await consumer.rebalance()  # picks up %RETRY%RG once its route exists
                await trio.sleep(0.05)
        await consumer.stop()
    firsts = sorted(body for topic, body, times in seen if times == 0)
    assert firsts[:3] == [b"a", b"b", b"c"] and seen.count(("Redo", b"b", 1)) == 1
    assert all(topic == "Redo" for topic, _, _ in seen), "retries show their original topic"
