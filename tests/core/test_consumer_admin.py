"""Consumer administration over real TCP: GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST,
INVOKE_BROKER_TO_RESET_OFFSET (and the RESET_CONSUMER_CLIENT_OFFSET it sends running
consumers), GET_CONSUMER_RUNNING_INFO relayed to a client."""

import re
import time

import orjson
import pytest
import trio

from core.client.consumer import PushConsumer
from core.client.offset_table import parse_offset_table
from core.client.producer import Message, Producer
from core.client.route import MessageQueue
from core.client.runtime import open_client
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.record import decode_records
from tests.core.test_broker import broker, pull_cmd, send_cmd  # noqa: F401 (broker: the fixture)


def stats_cmd(group: str, **extra: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.GET_CONSUME_STATS, ext_fields={"consumerGroup": group, **extra})


def reset_cmd(group: str, topic: str, timestamp: int, force: bool = True) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext_fields={
        "topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()})


def commit_cmd(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)})


def heartbeat_cmd(client_id: str, group: str, topic: str, language: str = "CPP") -> RemotingCommand:
    hb = {"clientID": client_id, "consumerDataSet": [{
        "groupName": group, "consumeType": 1, "messageModel": 1, "consumeFromWhere": 4,
        "subscriptionDataSet": [{"topic": topic, "subString": "a||b", "subVersion": "1"}]}]}
    return RemotingCommand(code=RequestCode.HEART_BEAT, body=orjson.dumps(hb), language=language)


def offsets_of(resp: RemotingCommand) -> dict[tuple[str, int], int]:
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return {(q["topic"], q["queueId"]): q["offset"] for q in orjson.loads(resp.body)["offsetTable"]}


async def send_spaced(client, addr: str, topic: str, count: int) -> list:
    """``count`` messages to queue 0, each stored in a later millisecond than the one before."""
    for i in range(count):
        assert (await client.invoke(addr, send_cmd(topic, f"m{i}".encode()))).code == ResponseCode.SUCCESS
        recs = decode_records((await client.invoke(addr, pull_cmd(topic, 0, 0))).body)
        with trio.fail_after(2):
            while time.time_ns() // 1_000_000 <= recs[-1].store_timestamp:
                await trio.sleep(0.001)
    return recs


async def test_consume_stats_report_offsets_and_the_last_consumed_time(broker):  # noqa: F811
    client, addr, _ = broker
    recs = await send_spaced(client, addr, "Stats", 3)
    await client.invoke(addr, commit_cmd("SG", "Stats", 0, 2))
    resp = await client.invoke(addr, stats_cmd("SG"))
    assert resp.code == ResponseCode.SUCCESS
    doc = orjson.loads(resp.body)
    table = {(q["topic"], q["queueId"]): q for q in doc["offsetTable"]}
    assert set(table) == {("Stats", q) for q in range(4)}, "every read queue, no retry topic (none exists)"
    assert table["Stats", 0] == {"topic": "Stats", "brokerName": "broker-a", "queueId": 0, "brokerOffset": 3,
                                 "consumerOffset": 2, "lastTimestamp": recs[1].store_timestamp}
    assert table["Stats", 1] == {**table["Stats", 1], "brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0}
    # a Java admin gets fastjson's map keyed by queue objects, which is how it parses ConsumeStats
    java = stats_cmd("SG")
    java.language = "JAVA"
    body = (await client.invoke(addr, java)).body
    assert b'{"brokerName":"broker-a","queueId":0,"topic":"Stats"}:{"brokerOffset":3,"consumerOffset":2,' in body
    # nobody knows the group: an empty table, as from a stock broker; no group: an error
    assert orjson.loads((await client.invoke(addr, stats_cmd("Nobody"))).body)["offsetTable"] == []
    missing = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_CONSUME_STATS))
    assert missing.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in missing.remark


async def test_reset_offset_by_time_to_the_end_and_back_without_force(broker):  # noqa: F811
    client, addr, _ = broker
    recs = await send_spaced(client, addr, "Reset", 3)
    unknown = await client.invoke(addr, reset_cmd("RG", "Reset", 0))
    assert unknown.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "<RG>" in unknown.remark
    await client.invoke(addr, commit_cmd("RG", "Reset", 0, 3))
    by_time = offsets_of(await client.invoke(addr, reset_cmd("RG", "Reset", recs[1].store_timestamp)))
    assert by_time == {("Reset", 0): 1, ("Reset", 1): 0, ("Reset", 2): 0, ("Reset", 3): 0}
    stats = orjson.loads((await client.invoke(addr, stats_cmd("RG", topic="Reset"))).body)["offsetTable"]
    assert [q["consumerOffset"] for q in stats] == [1, 0, 0, 0], "committed on the broker"
    assert offsets_of(await client.invoke(addr, reset_cmd("RG", "Reset", -1)))[("Reset", 0)] == 3
    # without isForce an offset only moves back
    assert offsets_of(await client.invoke(addr, reset_cmd("RG", "Reset", 0, force=False)))[("Reset", 0)] == 0
    assert offsets_of(await client.invoke(addr, reset_cmd("RG", "Reset", -1, force=False)))[("Reset", 0)] == 0
    nosuch = await client.invoke(addr, reset_cmd("RG", "NoSuchTopic", 0))
    assert nosuch.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in nosuch.remark
    bad = await client.invoke(addr, reset_cmd("RG", "Reset", -5))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "-1" in bad.remark


async def test_consumer_connection_list_names_members_their_language_and_subscriptions(broker):  # noqa: F811
    client, addr, _ = broker
    offline = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                        ext_fields={"consumerGroup": "LG"}))
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE and "LG" in offline.remark
    assert (await client.invoke(addr, heartbeat_cmd("cpp-1", "LG", "Topic"))).code == ResponseCode.SUCCESS
    resp = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                     ext_fields={"consumerGroup": "LG"}))
    assert resp.code == ResponseCode.SUCCESS
    doc = orjson.loads(resp.body)
    (conn,) = doc["connectionSet"]
    assert conn["clientId"] == "cpp-1" and conn["language"] == "CPP" and conn["version"] > 0
    assert conn["clientAddr"].startswith("127.0.0.1:")
    assert (doc["messageModel"], doc["consumeType"], doc["consumeFromWhere"]) == (
        "CLUSTERING", "CONSUME_PASSIVELY", "CONSUME_FROM_FIRST_OFFSET")
    assert doc["subscriptionTable"]["Topic"]["subString"] == "a||b"
    assert doc["subscriptionTable"]["Topic"]["tagsSet"] == ["a", "b"]


class Recorder:
    """A client connection's processor: keeps the resets a broker sends it, answers nothing."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self.arrived = trio.Event()

    def process(self, request: RemotingCommand, conn) -> None:
        if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self.requests.append(request)
            self.arrived.set()


async def test_a_java_member_is_told_of_a_reset_in_the_fastjson_form(broker):  # noqa: F811
    _, addr, _ = broker
    recorder = Recorder()
    async with open_remoting_client(recorder) as member:
        await member.invoke(addr, send_cmd("J", b"x"))
        assert (await member.invoke(addr, heartbeat_cmd("java-1", "JG", "J", language="JAVA"))).code == 0
        resp = await member.invoke(addr, reset_cmd("JG", "J", -1))
        assert offsets_of(resp)[("J", 0)] == 1
        with trio.fail_after(5):
            await recorder.arrived.wait()
    (told,) = recorder.requests
    assert told.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and told.is_oneway
    assert told.ext_fields == {"topic": "J", "group": "JG", "timestamp": "-1", "isForce": "true"}
    assert re.search(rb'\{\{"brokerName":"broker-a","queueId":0,"topic":"J"\}:1,', told.body)
    assert parse_offset_table(told.body)[MessageQueue("J", "broker-a", 0)] == 1
    assert parse_offset_table(b'{"offsetTable":[{"topic":"J","brokerName":"b","queueId":2,"offset":7}]}') == {
        MessageQueue("J", "b", 2): 7}
    with pytest.raises(ValueError, match="offsetTable"):
        parse_offset_table(b'{"offsetTable":{"J":1}}')


async def test_running_info_of_an_unknown_client_and_a_relayed_refusal(broker):  # noqa: F811
    client, addr, _ = broker
    absent = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields={
        "consumerGroup": "IG", "clientId": "nobody", "jstackEnable": "false"}))
    assert absent.code == ResponseCode.CONSUMER_NOT_ONLINE and "nobody" in absent.remark
    async with open_remoting_client() as member:  # no processor: it answers REQUEST_CODE_NOT_SUPPORTED
        assert (await member.invoke(addr, heartbeat_cmd("plain-1", "IG", "I"))).code == 0
        relayed = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields={
            "consumerGroup": "IG", "clientId": "plain-1", "jstackEnable": "false"}))
    assert relayed.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "307" in relayed.remark


async def test_a_running_push_consumer_jumps_back_on_reset_and_reports_running_info(broker):  # noqa: F811
    admin, addr, cluster = broker
    seen: list[bytes] = []
    changed = trio.Event()

    async def handler(messages):
        seen.extend(m.body for m in messages)
        changed.set()
        return True

    async def wait_seen(count: int) -> None:
        nonlocal changed
        with trio.fail_after(10):
            while len(seen) < count:
                changed = trio.Event()
                await changed.wait()

    bodies = [f"r{i}".encode() for i in range(6)]
    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "PG")
        for body in bodies:
            await producer.send(Message("Rewind", body))
        consumer = PushConsumer(client, "PCG", handler, from_beginning=True)
        consumer.subscribe("Rewind")
        await consumer.start()
        await wait_seen(6)
        assert sorted(seen) == sorted(bodies)
        resp = await admin.invoke(addr, reset_cmd("PCG", "Rewind", 0))
        assert set(offsets_of(resp).values()) == {0}
        await wait_seen(12)  # the whole topic again, from the new offsets
        assert sorted(seen[6:]) == sorted(bodies)

        ask = RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields={
            "consumerGroup": "PCG", "clientId": client.client_id, "jstackEnable": "false"})
        with trio.fail_after(10):  # the reset's own commits of the new offsets finish
            while True:
                info = await admin.invoke(addr, RemotingCommand(code=ask.code, ext_fields=dict(ask.ext_fields)))
                assert info.code == ResponseCode.SUCCESS, info.remark
                doc = orjson.loads(info.body)
                rewind = [q for q in doc["mqTable"] if q["topic"] == "Rewind"]
                if all(q["commitOffset"] >= 0 for q in rewind):
                    break
                await trio.sleep(0.02)
        assert doc["properties"]["messageModel"] == "CLUSTERING" and doc["properties"]["consumerGroup"] == "PCG"
        assert {s["topic"] for s in doc["subscriptionSet"]} == {"Rewind", "%RETRY%PCG"}
        assert [q["queueId"] for q in rewind] == [0, 1, 2, 3]
        assert sum(q["nextPullOffset"] for q in rewind) == 6
        assert all(q["commitOffset"] <= q["nextPullOffset"] for q in rewind)
        await consumer.stop()
