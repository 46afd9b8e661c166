"""Broker behaviour over real TCP: validation, the PULL result table, long polling, batches,
offsets, topics."""

import time

import orjson
import pytest
import trio

from core.client.runtime import open_client
from core.config import BrokerSettings
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.request_headers import PULL_SUSPEND
from formats.batch import BatchItem, encode_batch
from formats.properties import encode_properties
from formats.record import decode_records
from formats.tags import tags_code
from tests.core.cluster_harness import start_cluster


def send_cmd(topic: str, body: bytes = b"x", queue_id: int = 0, tags: str = "t", v2: bool = True, **extra: str):
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": encode_properties({"TAGS": tags, "WAIT": "true"}), "reconsumeTimes": "0",
           "unitMode": "false", "batch": "false", **extra}
    if v2:
        short = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
                 "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
                 "unitMode": "k", "batch": "m"}
        ext = {short.get(k, k): v for k, v in ext.items()}
    return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE,
                           ext_fields=ext, body=body)


def pull_cmd(topic: str, queue_id: int, offset: int, *, sysflag: int = 4, suspend_ms: int = 0, sub: str = "*"):
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": "G", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(sysflag), "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
        "subscription": sub, "subVersion": "0"})


@pytest.fixture
async def broker(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path)
    running = await cluster.start_broker()
    async with open_remoting_client() as client:
        yield client, running.address, cluster


async def test_send_v1_and_v2_store_and_answer_strings(broker):
    client, addr, _ = broker
    r1 = await client.invoke(addr, send_cmd("T1", b"one", v2=False))
    r2 = await client.invoke(addr, send_cmd("T1", b"two", v2=True))
    assert r1.code == r2.code == ResponseCode.SUCCESS
    assert r1.ext_fields["queueOffset"] == "0" and r2.ext_fields["queueOffset"] == "1"
    assert len(r1.ext_fields["msgId"]) == 32 and r1.ext_fields["queueId"] == "0"
    pulled = await client.invoke(addr, pull_cmd("T1", 0, 0))
    recs = decode_records(pulled.body)
    assert [r.body for r in recs] == [b"one", b"two"]
    assert "WAIT" not in recs[0].properties and recs[0].properties["CLUSTER"] == "DefaultCluster"
    assert recs[0].store_host[1] == int(addr.split(":")[1])


@pytest.mark.parametrize("topic, fragment", [("bad topic", "illegal characters"), ("x" * 128, "max length"),
                                             ("", "lacks the field topic")])
async def test_invalid_topics_are_refused(broker, topic, fragment):
    client, addr, _ = broker
    resp = await client.invoke(addr, send_cmd(topic))
    assert resp.code == ResponseCode.SYSTEM_ERROR and fragment in resp.remark


async def test_oversized_body_is_message_illegal(broker):
    client, addr, _ = broker
    resp = await client.invoke(addr, send_cmd("Big", b"x" * (4 * 1024 * 1024 + 1)))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "MAX" in resp.remark


async def test_bad_queue_id_and_unknown_code(broker):
    client, addr, _ = broker
    await client.invoke(addr, send_cmd("Q"))
    resp = await client.invoke(addr, send_cmd("Q", queue_id=99))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId[99]" in resp.remark
    resp = await client.invoke(addr, RemotingCommand(code=7777))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "7777" in resp.remark


async def test_without_auto_create_unknown_topics_do_not_exist(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path, broker=BrokerSettings(auto_create_topic=False))
    running = await cluster.start_broker()
    async with open_remoting_client() as client:
        resp = await client.invoke(running.address, send_cmd("Nope"))
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "apply first" in resp.remark
        created = await client.invoke(running.address, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": "Nope", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}))
        assert created.code == ResponseCode.SUCCESS
        assert (await client.invoke(running.address, send_cmd("Nope", queue_id=1))).code == ResponseCode.SUCCESS


async def test_batches_by_code_and_by_the_cpp_batch_flag(broker):
    client, addr, _ = broker
    items = [BatchItem(f"b{i}".encode(), {"TAGS": "t", "UNIQ_KEY": f"{i:032X}"}) for i in range(5)]
    cmd = send_cmd("Batch", encode_batch(items))
    cmd.code = RequestCode.SEND_BATCH_MESSAGE
    resp = await client.invoke(addr, cmd)
    assert resp.code == ResponseCode.SUCCESS and len(resp.ext_fields["msgId"].split(",")) == 5
    cpp = send_cmd("Batch", encode_batch(items[:2]), v2=False, batch="1")
    resp = await client.invoke(addr, cpp)
    assert resp.ext_fields["queueOffset"] == "5"
    recs = decode_records((await client.invoke(addr, pull_cmd("Batch", 0, 0))).body)
    assert [r.body for r in recs] == [b"b0", b"b1", b"b2", b"b3", b"b4", b"b0", b"b1"]
    assert [r.queue_offset for r in recs] == list(range(7))
    assert [r.properties for r in recs[:2]] == [
        {"TAGS": "t", "UNIQ_KEY": f"{i:032X}", "CLUSTER": "DefaultCluster"} for i in range(2)]


async def test_pull_result_table(broker):
    client, addr, _ = broker
    for i in range(3):
        await client.invoke(addr, send_cmd("P", f"m{i}".encode(), tags="A" if i != 1 else "B"))

    async def pull(offset, sub="*"):
        r = await client.invoke(addr, pull_cmd("P", 0, offset, sub=sub))
        return r.code, {k: int(v) for k, v in r.ext_fields.items()}

    assert (await pull(0))[0] == ResponseCode.SUCCESS
    code, ext = await pull(3)
    assert code == ResponseCode.PULL_NOT_FOUND and ext["nextBeginOffset"] == 3 and ext["maxOffset"] == 3
    code, ext = await pull(10)
    assert code == ResponseCode.PULL_OFFSET_MOVED and ext["nextBeginOffset"] == 3
    code, ext = await pull(1, sub="A")
    assert code == ResponseCode.SUCCESS and ext["nextBeginOffset"] == 3
    code, ext = await pull(1, sub="C || D")
    assert code == ResponseCode.PULL_RETRY_IMMEDIATELY and ext["nextBeginOffset"] == 3
    r = await client.invoke(addr, pull_cmd("P", 1, 0))  # an empty queue of the topic
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "0"
    r = await client.invoke(addr, pull_cmd("Missing", 0, 0))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    assert all(isinstance(v, str) for v in r.ext_fields.values())


async def test_long_poll_wakes_on_arrival_and_answers_not_found_at_its_deadline(broker):
    client, addr, _ = broker
    await client.invoke(addr, send_cmd("LP", b"first"))
    start = trio.current_time()
    resp = await client.invoke(addr, pull_cmd("LP", 0, 1, sysflag=4 | PULL_SUSPEND, suspend_ms=300), 5)
    waited = trio.current_time() - start
    assert resp.code == ResponseCode.PULL_NOT_FOUND and 0.25 <= waited < 3

    async def send_later():
        await trio.sleep(0.3)
        await client.invoke(addr, send_cmd("LP", b"second"))

    async with trio.open_nursery() as inner:
        inner.start_soon(send_later)
        start = trio.current_time()
        resp = await client.invoke(addr, pull_cmd("LP", 0, 1, sysflag=4 | PULL_SUSPEND, suspend_ms=10_000), 15)
    assert resp.code == ResponseCode.SUCCESS and decode_records(resp.body)[0].body == b"second"
    assert trio.current_time() - start < 5, "a held pull must wake on arrival, not at its deadline"


async def test_long_poll_ignores_arrivals_its_tags_do_not_match_until_one_does(broker):
    client, addr, _ = broker
    await client.invoke(addr, send_cmd("LPT", b"seed", tags="A"))

    async def send_later():
        await trio.sleep(0.2)
        await client.invoke(addr, send_cmd("LPT", b"other", tags="B"))
        await trio.sleep(0.2)
        await client.invoke(addr, send_cmd("LPT", b"mine", tags="A"))

    async with trio.open_nursery() as inner:
        inner.start_soon(send_later)
        # the non-matching arrival answers NO_MATCHED with the offset after it (stock semantics)...
        first = await client.invoke(addr, pull_cmd("LPT", 0, 1, sysflag=4 | PULL_SUSPEND, suspend_ms=10_000, sub="A"), 15)
        assert first.code == ResponseCode.PULL_RETRY_IMMEDIATELY and first.ext_fields["nextBeginOffset"] == "2"
        # ...and the re-pull from there is held until the matching one arrives
        resp = await client.invoke(addr, pull_cmd("LPT", 0, 2, sysflag=4 | PULL_SUSPEND, suspend_ms=10_000, sub="A"), 15)
    assert [r.body for r in decode_records(resp.body)] == [b"mine"]


async def test_offsets_heartbeat_consumer_list_and_persistence(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path)
    running = await cluster.start_broker()
    addr = running.address
    async with open_remoting_client() as client:
        for i in range(4):
            await client.invoke(addr, send_cmd("Off", f"m{i}".encode()))
        q = {"consumerGroup": "CG", "topic": "Off", "queueId": "0"}
        first = await client.invoke(addr, RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=q))
        assert first.code == ResponseCode.SUCCESS and first.ext_fields["offset"] == "0"
        await client.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={**q, "commitOffset": "3"}))
        none = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": "CG"}))
        assert none.code == ResponseCode.SYSTEM_ERROR and "no consumer" in none.remark
        hb = {"clientID": "c1", "consumerDataSet": [{"groupName": "CG", "consumeType": 1, "messageModel": 1,
              "consumeFromWhere": 0, "subscriptionDataSet": [{"topic": "Off", "subString": "*", "subVersion": "1"}]}]}
        assert (await client.invoke(addr, RemotingCommand(code=RequestCode.HEART_BEAT, body=orjson.dumps(hb)))).code == 0
        ids = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": "CG"}))
        assert orjson.loads(ids.body) == {"consumerIdList": ["c1"]}
        maxo = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "Off", "queueId": "0"}))
        assert maxo.ext_fields == {"offset": "4"}
        earliest = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_EARLIEST_MSG_STORETIME, ext_fields={"topic": "Off", "queueId": "0"}))
        stamp = int(earliest.ext_fields["timestamp"])
        search = await client.invoke(addr, RemotingCommand(code=RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext_fields={
            "topic": "Off", "queueId": "0", "timestamp": str(stamp + 10_000_000)}))
        assert search.ext_fields == {"offset": "4"}
        search0 = await client.invoke(addr, RemotingCommand(code=RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext_fields={
            "topic": "Off", "queueId": "0", "timestamp": "0"}))
        assert search0.ext_fields == {"offset": "0"}
    await cluster.stop_broker(running.name)
    again = await cluster.start_broker(port=int(addr.split(":")[1]))
    async with open_remoting_client() as client:
        resp = await client.invoke(again.address, RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=q))
        assert resp.ext_fields["offset"] == "3", "committed offsets survive a restart"
        topics = orjson.loads((await client.invoke(again.address, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))).body)
        assert "%RETRY%CG" in topics["topicConfigTable"] and "Off" in topics["topicConfigTable"]


async def test_client_library_send_modes_batches_and_compression(broker):
    from core.client.producer import Message, Producer
    from core.client.pull import pull
    from core.client.route import MessageQueue

    _, addr, cluster = broker
    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "PG", compress_over_bytes=1000)
        result = await producer.send(Message("Lib", b"plain", tags="a", keys=["k1", "k2"], properties={"p": "1"}))
        assert result.status == "SEND_OK" and len(result.msg_id) == 32
        big = b"0123456789" * 1000
        await producer.send(Message("Lib", big))
        await producer.send_oneway(Message("Lib", b"oneway"))
        got: list = []
        done = trio.Event()
        producer.send_async(Message("Lib", b"async"), lambda r: (got.append(r), done.set()))
        with trio.fail_after(5):
            await done.wait()
        assert got[0].status == "SEND_OK"
        batch = await producer.send_batch([Message("Lib", f"b{i}".encode()) for i in range(3)])
        assert batch.status == "SEND_OK"
        route = await client.route("Lib")
        bodies, keys, flags = [], [], []
        for mq in route.read_queues:
            with trio.fail_after(10):
                while True:
                    r = await pull(client, "G", mq, 0)
                    if r.messages or r.status.value == "NO_NEW_MSG":
                        break
            for rec in r.messages:
                bodies.append(rec.payload())
                keys.append(rec.keys)
                flags.append(rec.sysflag)
        assert sorted(bodies) == sorted([b"plain", big, b"oneway", b"async", b"b0", b"b1", b"b2"])
        assert ["k1", "k2"] in keys
        assert 0x201 in flags, "the large body is zstd-compressed with RocketMQ 5's bits"
        assert isinstance(mq, MessageQueue)


async def test_push_consumers_share_queues_and_rebalance_when_one_leaves(broker):
    from core.client.consumer import PushConsumer
    from core.client.producer import Message, Producer

    _, addr, cluster = broker
    received: dict[str, list] = {"a": [], "b": []}

    def share(consumer):  # its queues of the topic (each member also pulls %RETRY%SG)
        return {mq for mq in consumer._loops if mq.topic == "Share"}

    def handler(name):
        async def handle(messages):
            received[name].extend(int(m.body) for m in messages)
            return True
        return handle

    async with open_client(cluster.namesrv, instance="a") as ca, open_client(cluster.namesrv, instance="b") as cb:
        producer = Producer(ca, "PG")
        await producer.send(Message("Share", b"-1"))  # creates the topic (4 queues)
        a = PushConsumer(ca, "SG", handler("a"), from_beginning=True)
        b = PushConsumer(cb, "SG", handler("b"), from_beginning=True)
        a.subscribe("Share")
        b.subscribe("Share")
        await a.start()
        await b.start()
        with trio.fail_after(15):
            while len(share(a)) + len(share(b)) != 4 or not share(a) or not share(b):
                await a.rebalance()
                await b.rebalance()
                await trio.sleep(0.05)
        assert not share(a) & share(b), "a queue belongs to one member"
        for i in range(40):
            await producer.send(Message("Share", str(i).encode()))
        with trio.fail_after(15):
            while len(received["a"]) + len(received["b"]) < 41:
                await trio.sleep(0.05)
        assert sorted(received["a"] + received["b"]) == list(range(-1, 40))
        await b.stop()
        with trio.fail_after(15):
            while len(share(a)) != 4:
                await a.rebalance()
                await trio.sleep(0.05)
        for i in range(40, 60):
            await producer.send(Message("Share", str(i).encode()))
        with trio.fail_after(15):
            while len(set(received["a"] + received["b"])) < 61:
                await trio.sleep(0.05)
        assert sorted(set(received["a"] + received["b"])) == list(range(-1, 60))


async def test_clients_use_any_live_name_server(nursery, tmp_path):
    from core.client.producer import Message, Producer

    cluster = await start_cluster(nursery, tmp_path, nameservers=2)
    await cluster.start_broker()
    async with open_client(list(reversed(cluster.namesrv)) + ["127.0.0.1:1"]) as client:
        with trio.fail_after(10):
            while await client.route("TBW102") is None:
                await trio.sleep(0.05)
        result = await Producer(client, "PG").send(Message("Multi", b"x"))
        assert result.status == "SEND_OK"
    async with open_client(["127.0.0.1:1", cluster.namesrv[0]]) as client:
        assert (await client.route("Multi")) is not None
    assert tags_code("t") != 0


async def test_auto_batched_sends_report_each_messages_own_offset_and_id(broker):
    from core.client.producer import Message, Producer
    from formats.msgid import decode_offset_msg_id

    _, addr, cluster = broker
    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "PG", auto_batch=True)
        results = {}

        async def one(i):
            results[i] = await producer.send(Message("Auto", f"m{i}".encode(), tags="t", keys=[f"k{i}"]))

        async with trio.open_nursery() as inner:
            for i in range(300):
                inner.start_soon(one, i)
        assert len(results) == 300 and {r.status for r in results.values()} == {"SEND_OK"}
        seen = set()
        async with open_remoting_client() as raw:
            for i, r in results.items():
                phys = decode_offset_msg_id(r.offset_msg_id).phys_offset
                view = await raw.invoke(addr, RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(phys)}))
                (rec,) = decode_records(view.body)
                assert rec.body == f"m{i}".encode() and rec.uniq_key == r.msg_id
                assert (rec.queue_id, rec.queue_offset) == (r.queue.queue_id, r.queue_offset)
                seen.add((rec.queue_id, rec.queue_offset))
        assert len(seen) == 300
        big = await producer.send(Message("Auto", b"z" * 10_000))  # compressed: sent on its own
        assert big.status == "SEND_OK"


async def test_auto_batched_send_async_answers_every_callback_even_after_one_raises(broker):
    from core.client.producer import Message, Producer

    _, addr, cluster = broker
    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "PG", auto_batch=True)
        answers: dict[int, object] = {}
        done = trio.Event()

        def callback(i):
            def on_done(result):
                answers[i] = result
                if len(answers) == 200:
                    done.set()
                if i == 7:
                    raise RuntimeError("a buggy callback")
            return on_done

        for i in range(200):
            producer.send_async(Message("AutoAsync", f"a{i}".encode(), keys=[f"k{i}"]), callback(i))
        with trio.fail_after(15):
            await done.wait()
        assert {r.status for r in answers.values()} == {"SEND_OK"}
        requests, batched = producer.batch_statistics()
        assert batched == 200 and requests < 200, "the sends shared batch requests"
        offsets = sorted((r.queue.queue_id, r.queue_offset) for r in answers.values())
        assert len(set(offsets)) == 200
        async with open_remoting_client() as raw:
            for queue_id in {q for q, _ in offsets}:
                pulled = await raw.invoke(addr, pull_cmd("AutoAsync", queue_id, 0))
                for rec in decode_records(pulled.body):
                    # batch items go without WAIT; the broker stores them as sent, CLUSTER added
                    assert "WAIT" not in rec.properties and rec.properties["CLUSTER"]
                    assert rec.body == f"a{rec.keys[0][1:]}".encode()


async def test_full_disk_refuses_sends_with_service_not_available_and_keeps_serving_pulls(nursery, tmp_path):
    import dataclasses

    from tests.core.cluster_harness import SMALL_STORE

    cluster = await start_cluster(nursery, tmp_path)
    running = await cluster.start_broker()
    async with open_remoting_client() as client:
        assert (await client.invoke(running.address, send_cmd("Disk", b"kept"))).code == ResponseCode.SUCCESS
    port = int(running.address.split(":")[1])
    await cluster.stop_broker(running.name)
    cluster.config = dataclasses.replace(cluster.config, store=dataclasses.replace(SMALL_STORE, disk_max_used_ratio=1e-9))
    again = await cluster.start_broker(port=port)
    async with open_remoting_client() as client:
        refused = await client.invoke(again.address, send_cmd("Disk", b"lost?"))
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk" in refused.remark
        pulled = await client.invoke(again.address, pull_cmd("Disk", 0, 0))
        assert [r.body for r in decode_records(pulled.body)] == [b"kept"]
