"""POP consumption over remoting on a real broker (in process, real TCP): pop, ack, change the
invisible time, revive what was not acked, across a broker restart."""

from __future__ import annotations

import json

import pytest
import trio

from core.client.producer import Message, Producer
from core.client.runtime import open_client
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.record import MessageRecord, decode_records
from tests.core.cluster_harness import start_cluster

GROUP = "PopGroup"


@pytest.fixture
async def pop_cluster(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path)
    running = await cluster.start_broker()
    return cluster, running


async def send(namesrv: list[str], topic: str, count: int) -> list[str]:
    async with open_client(namesrv) as client:
        producer = Producer(client, "PopProducer")
        return [(await producer.send(Message(topic, f"m{i}".encode(), tags="A" if i % 2 == 0 else "B"))).msg_id
                for i in range(count)]


def pop_request(topic: str, *, invisible_ms: int = 1000, max_nums: int = 32, exp: str = "*",
                poll_ms: int = 0) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields={
        "consumerGroup": GROUP, "topic": topic, "queueId": "-1", "maxMsgNums": str(max_nums),
        "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "bornTime": "0", "initMode": "0",
        "expType": "TAG", "exp": exp})


def handles(resp: RemotingCommand) -> list[tuple[MessageRecord, str]]:
    """Each popped record with the receipt handle a client builds from the response header."""
    ext = resp.ext_fields
    starts = {}
    for entry in ext["startOffsetInfo"].split(";"):
        flag, queue, start = entry.split()
        starts[(flag, int(queue))] = int(start)
    out = []
    for rec in decode_records(resp.body):
        flag = "1" if rec.topic.startswith("%RETRY%") else "0"
        start = starts[(flag, rec.queue_id)]
        out.append((rec, f"{start} {ext['popTime']} {ext['invisibleTime']} {ext['reviveQid']} {flag} broker-a "
                         f"{rec.queue_id} {rec.queue_offset}"))
    return out


def ack_request(rec: MessageRecord, handle: str, *, change_ms: int | None = None) -> RemotingCommand:
    fields = {"consumerGroup": GROUP, "topic": rec.topic, "queueId": str(rec.queue_id), "extraInfo": handle,
              "offset": str(rec.queue_offset)}
    if change_ms is None:
        return RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields=fields)
    return RemotingCommand(code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=dict(fields, invisibleTime=str(change_ms)))


async def pop_until(client, address: str, topic: str, want: int, deadline_s: float) -> list[tuple[MessageRecord, str]]:
    got: list[tuple[MessageRecord, str]] = []
    with trio.fail_after(deadline_s):
        while len(got) < want:
            resp = await client.invoke(address, pop_request(topic, poll_ms=500))
            if resp.code == ResponseCode.SUCCESS:
                got += handles(resp)
            else:
                assert resp.code == ResponseCode.POLLING_TIMEOUT, (resp.code, resp.remark)
    return got


async def test_what_is_not_acked_comes_back_once_with_one_more_attempt(pop_cluster):
    cluster, running = pop_cluster
    ids = await send(cluster.namesrv, "PopTopic", 6)
    async with open_remoting_client() as client:
        first = await pop_until(client, running.address, "PopTopic", 6, 10)
        assert sorted(r.uniq_key for r, _ in first) == sorted(ids) and {r.reconsume_times for r, _ in first} == {0}
        empty = await client.invoke(running.address, pop_request("PopTopic"))  # handed out: invisible now
        assert empty.code == ResponseCode.POLLING_TIMEOUT
        acked = {r.uniq_key for r, _ in first[:3]}
        for rec, handle in first[:3]:
            resp = await client.invoke(running.address, ack_request(rec, handle))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        again = await pop_until(client, running.address, "PopTopic", 3, 15)
        assert {r.uniq_key for r, _ in again} == set(ids) - acked
        assert {r.reconsume_times for r, _ in again} == {1} and {r.topic for r, _ in again} == {"%RETRY%PopGroup_PopTopic"}
        assert sorted(r.body for r, _ in again) == sorted(r.body for r, _ in first[3:])
        for rec, handle in again:  # acked on the retry topic: nothing comes back any more
            assert (await client.invoke(running.address, ack_request(rec, handle))).code == ResponseCode.SUCCESS
        with trio.move_on_after(3):  # three revive rounds past the invisible time
            extra = await pop_until(client, running.address, "PopTopic", 1, 10)
            raise AssertionError(f"acked messages came back: {extra}")


async def test_a_longer_invisible_time_keeps_a_message_away_and_bad_requests_get_rocketmqs_codes(pop_cluster):
    cluster, running = pop_cluster
    await send(cluster.namesrv, "PopKeep", 2)
    async with open_remoting_client() as client:
        first = await pop_until(client, running.address, "PopKeep", 2, 10)
        (kept, kept_handle), (other, _) = first
        changed = await client.invoke(running.address, ack_request(kept, kept_handle, change_ms=60_000))
        assert changed.code == ResponseCode.SUCCESS and changed.ext_fields["invisibleTime"] == "60000"
        back = await pop_until(client, running.address, "PopKeep", 1, 15)
        assert [r.uniq_key for r, _ in back] == [other.uniq_key]

        too_many = await client.invoke(running.address, pop_request("PopKeep", max_nums=33))
        assert too_many.code == ResponseCode.INVALID_PARAMETER
        unknown = await client.invoke(running.address, pop_request("NoSuchTopic"))
        assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
        forged = ack_request(kept, "1 2 3 x 0 broker-a 0 0")
        assert (await client.invoke(running.address, forged)).code == ResponseCode.SYSTEM_ERROR
        beyond = ack_request(kept, kept_handle)
        beyond.ext_fields["offset"] = "999999"
        assert (await client.invoke(running.address, beyond)).code == ResponseCode.NO_MESSAGE


async def test_tags_filter_what_a_pop_hands_out(pop_cluster):
    cluster, running = pop_cluster
    await send(cluster.namesrv, "PopTags", 8)
    async with open_remoting_client() as client:
        resp = await client.invoke(running.address, pop_request("PopTags", exp="A"))
        assert resp.code == ResponseCode.SUCCESS
        assert sorted(r.body for r, _ in handles(resp)) == [b"m0", b"m2", b"m4", b"m6"]


async def test_a_message_popped_before_a_broker_restart_and_never_acked_comes_back(pop_cluster):
    """Even when the broker died before it saved the offsets the POP moved: a restarted broker
    (or a new raft leader) raises them from the stored checkpoints before it serves a POP, so
    nothing comes from the topic again, only the revived copies."""
    cluster, running = pop_cluster
    ids = await send(cluster.namesrv, "PopRestart", 4)
    port = int(running.address.rsplit(":", 1)[1])
    async with open_remoting_client() as client:
        first = await pop_until(client, running.address, "PopRestart", 4, 10)
        assert len(first) == 4
    await cluster.stop_broker(running.name)
    offsets = cluster.data_dir / running.node.node / "config" / "consumerOffsets.json"
    table = json.loads(offsets.read_text())
    assert table["offsetTable"].pop(f"PopRestart@{GROUP}")  # as if killed before the periodic save
    offsets.write_text(json.dumps(table))
    running = await cluster.start_broker(port=port)
    async with open_remoting_client() as client:
        again = await pop_until(client, running.address, "PopRestart", 4, 20)
    assert sorted(r.uniq_key for r, _ in again) == sorted(ids) and {r.reconsume_times for r, _ in again} == {1}


def batch_ack_body(popped: list[tuple[MessageRecord, str]]) -> bytes:
    """BatchAckMessageRequestBody: per checkpoint, a bitset (Java BitSet bytes, base64) of offset - start."""
    import base64

    import orjson

    entries: dict[tuple[str, ...], dict] = {}
    for rec, handle in popped:
        start, pop_time, invisible, revive_qid, flag, _, queue, offset = handle.split()
        topic = rec.topic.split("_", 1)[1] if flag == "1" else rec.topic
        entry = entries.setdefault((start, pop_time, queue, flag), {
            "c": GROUP, "t": topic, "r": flag, "so": int(start), "q": int(queue), "rq": int(revive_qid),
            "pt": int(pop_time), "it": int(invisible), "bits": 0})
        entry["bits"] |= 1 << (int(offset) - int(start))
    acks = [dict({k: v for k, v in e.items() if k != "bits"},
                 b=base64.b64encode(e["bits"].to_bytes(4, "little")).decode()) for e in entries.values()]
    return orjson.dumps({"brokerName": "broker-a", "acks": acks})


async def test_a_batch_ack_acks_every_message_it_names(pop_cluster):
    cluster, running = pop_cluster
    await send(cluster.namesrv, "PopBatch", 5)
    async with open_remoting_client() as client:
        first = await pop_until(client, running.address, "PopBatch", 5, 10)
        resp = await client.invoke(running.address, RemotingCommand(
            code=RequestCode.BATCH_ACK_MESSAGE, body=batch_ack_body(first)))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        bad = await client.invoke(running.address, RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, body=b"{"))
        assert bad.code == ResponseCode.SYSTEM_ERROR and "batch ack body" in (bad.remark or "")
        with trio.move_on_after(3):
            extra = await pop_until(client, running.address, "PopBatch", 1, 10)
            raise AssertionError(f"batch-acked messages came back: {extra}")


async def test_a_batch_ack_naming_checkpoints_of_several_revive_queues_acks_them_all(pop_cluster):
    cluster, running = pop_cluster
    await send(cluster.namesrv, "PopBatchRq", 4)
    async with open_remoting_client() as client:
        popped: list[tuple[MessageRecord, str]] = []
        with trio.fail_after(10):
            while len(popped) < 4:  # one message a POP: each POP's checkpoint takes the next revive queue
                resp = await client.invoke(running.address, pop_request("PopBatchRq", max_nums=1, poll_ms=500))
                popped += handles(resp) if resp.code == ResponseCode.SUCCESS else []
        assert len({handle.split()[3] for _, handle in popped}) > 1
        resp = await client.invoke(running.address, RemotingCommand(
            code=RequestCode.BATCH_ACK_MESSAGE, body=batch_ack_body(popped)))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        with trio.move_on_after(3):
            extra = await pop_until(client, running.address, "PopBatchRq", 1, 10)
            raise AssertionError(f"batch-acked messages came back: {extra}")


async def test_notification_says_whether_a_pop_would_find_a_message_and_waits_for_one(pop_cluster):
    cluster, running = pop_cluster
    await send(cluster.namesrv, "PopNotify", 1)

    def notification(poll_ms: int) -> RemotingCommand:
        return RemotingCommand(code=RequestCode.NOTIFICATION, ext_fields={
            "consumerGroup": GROUP, "topic": "PopNotify", "queueId": "-1", "pollTime": str(poll_ms), "bornTime": "0"})

    async with open_remoting_client() as client:
        assert (await client.invoke(running.address, notification(0))).ext_fields["hasMsg"] == "true"
        await pop_until(client, running.address, "PopNotify", 1, 10)
        assert (await client.invoke(running.address, notification(0))).ext_fields["hasMsg"] == "false"
        started = trio.current_time()
        parked = await client.invoke(running.address, notification(1000))  # nothing comes: the poll runs out
        assert parked.ext_fields["hasMsg"] == "false" and trio.current_time() - started >= 0.9
        answer: list[RemotingCommand] = []

        async def wait() -> None:
            answer.append(await client.invoke(running.address, notification(10_000), timeout_s=15))

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await send(cluster.namesrv, "PopNotify", 1)
        # woken by the arrival (or asked after it): well before its 10 s poll ends
        assert answer[0].ext_fields["hasMsg"] == "true" and trio.current_time() - started < 5


def fifo_pop(topic: str, attempt: str, *, invisible_ms: int = 1000, poll_ms: int = 0) -> RemotingCommand:
    request = pop_request(topic, invisible_ms=invisible_ms, poll_ms=poll_ms)
    request.ext_fields.update(order="true", attemptId=attempt)
    return request


def fifo_handles(resp: RemotingCommand) -> list[tuple[MessageRecord, str, int]]:
    """Each record, its handle (revive queue 999) and its delivery count from orderCountInfo."""
    counts = {}
    for entry in resp.ext_fields["orderCountInfo"].split(";"):
        flag, where, count = entry.split()
        if where.startswith("qo"):
            queue, offset = where[2:].split("%")
            counts[(int(queue), int(offset))] = int(count)
    return [(rec, handle, counts[(rec.queue_id, rec.queue_offset)]) for rec, handle in handles(resp)]


async def test_fifo_pops_keep_each_queue_blocked_until_its_batch_is_acked_or_visible_again(pop_cluster):
    cluster, running = pop_cluster
    await send(cluster.namesrv, "PopFifo", 8)
    async with open_remoting_client() as client:
        first = await client.invoke(running.address, fifo_pop("PopFifo", "a1"))
        assert first.code == ResponseCode.SUCCESS and first.ext_fields["reviveQid"] == "999"
        batch = fifo_handles(first)
        assert len(batch) == 8 and {count for _, _, count in batch} == {0}
        by_queue: dict[int, list[int]] = {}
        for rec, _, _ in batch:
            by_queue.setdefault(rec.queue_id, []).append(rec.queue_offset)
        assert all(offsets == sorted(offsets) for offsets in by_queue.values())  # each queue in order

        blocked = await client.invoke(running.address, fifo_pop("PopFifo", "a2"))
        assert blocked.code == ResponseCode.POLLING_TIMEOUT  # every queue's batch is out
        same = await client.invoke(running.address, fifo_pop("PopFifo", "a1"))  # the same attempt again
        assert sorted(r.uniq_key for r, _, _ in fifo_handles(same)) == sorted(r.uniq_key for r, _, _ in batch)

        *acked, (last, last_handle, _) = batch
        for rec, handle, _ in acked:
            assert (await client.invoke(running.address, ack_request(rec, handle))).code == ResponseCode.SUCCESS
        # the last one's queue stays blocked until its invisible time ends; then it comes again, counted
        with trio.fail_after(10):
            while True:
                again = await client.invoke(running.address, fifo_pop("PopFifo", "a3", poll_ms=300))
                if again.code == ResponseCode.SUCCESS:
                    break
        [(rec, handle, count)] = fifo_handles(again)
        assert (rec.uniq_key, count) == (last.uniq_key, 1)
        assert (await client.invoke(running.address, ack_request(rec, handle))).code == ResponseCode.SUCCESS
        assert (await client.invoke(running.address, fifo_pop("PopFifo", "a4"))).code == ResponseCode.POLLING_TIMEOUT
        await send(cluster.namesrv, "PopFifo", 1)
        [(fresh, _, fresh_count)] = fifo_handles(await client.invoke(running.address, fifo_pop("PopFifo", "a5")))
        assert fresh.body == b"m0" and fresh_count == 0
