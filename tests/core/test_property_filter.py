"""SQL92 subscriptions served by a broker (real TCP, in-process nodes): pulls filtered by
properties, the subscription parsed once, refusals with RocketMQ's codes, and heartbeats."""

from __future__ import annotations

import re

import orjson
import pytest
import trio

from core.client.consumer import PushConsumer
from core.client.producer import Message, Producer
from core.client.pull import PullStatus, SubscriptionRefusedError, pull
from core.client.runtime import open_client
from core.config import BrokerSettings
from core.filter.sql92 import compile_selector
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.record import decode_records
from tests.core.cluster_harness import start_cluster

SELECTOR = "region = 'eu' AND amount > 100"
REGIONS = ("eu", "us", None)
AMOUNTS = ("150", "50", "n/a", "100.5", None, "101", "100")


def mixed_properties(i: int) -> dict[str, str]:
    props = {"idx": str(i)}
    region, amount = REGIONS[i % 3], AMOUNTS[i % 7]
    if region is not None:
        props["region"] = region
    if amount is not None:
        props["amount"] = amount
    return props


def wanted(props: dict[str, str]) -> bool:
    """The selector written directly: an integer amount above 100 (anything else does not read
    as an Integer, an error, no match) in region eu."""
    amount = props.get("amount", "")
    return props.get("region") == "eu" and re.fullmatch(r"[+-]?\d+", amount) is not None and int(amount) > 100


async def start(nursery, tmp_path, *, enabled: bool):
    cluster = await start_cluster(nursery, tmp_path, broker=BrokerSettings(register_interval_ms=500,
                                                                           enable_property_filter=enabled))
    running = await cluster.start_broker()
    return cluster, running.address


async def send_mixed(client, topic: str, count: int) -> None:
    producer = Producer(client, "PG")
    for i in range(count):
        result = await producer.send(Message(topic, f"m{i}".encode(), tags=f"T{i % 10}", properties=mixed_properties(i)))
        assert result.status == "SEND_OK"


async def read_all(client, group: str, topic: str, expression: str, kind: str) -> tuple[list[int], int]:
    """Every message the broker delivers to a pull from each queue's start to its end; returns
    their idx values and the number of pulls that took."""
    route = await client.route(topic)
    got, pulls = [], 0
    for mq in sorted(route.read_queues):
        offset = 0
        while True:
            result = await pull(client, group, mq, offset, expression=expression, expression_type=kind)
            pulls += 1
            got += [int(m.properties["idx"]) for m in result.messages]
            if result.status is PullStatus.NO_NEW_MSG:
                break
            offset = result.next_offset
    return sorted(got), pulls


async def test_an_sql92_pull_delivers_exactly_the_matching_messages_and_parses_once(nursery, tmp_path):
    cluster, _ = await start(nursery, tmp_path, enabled=True)
    async with open_client(cluster.namesrv) as client:
        await send_mixed(client, "Mixed", 420)
        expected = [i for i in range(420) if wanted(mixed_properties(i))]
        assert 0 < len(expected) < 420 / 10

        got, pulls = await read_all(client, "G", "Mixed", SELECTOR, "SQL92")
        assert got == expected
        # a filtered pull reads on past 32 non-matching entries: one pull (and one empty one)
        # per queue, not one per 32 entries
        assert pulls <= 2 * len((await client.route("Mixed")).read_queues)

        misses = compile_selector.cache_info().misses
        again, _ = await read_all(client, "G", "Mixed", SELECTOR, "SQL92")
        assert again == expected
        assert compile_selector.cache_info().misses == misses, "a pull re-parsed the selector"

        # a tag subscription to the same stream still works, and TAGS is a property too
        by_tag, _ = await read_all(client, "G2", "Mixed", "T3 || T4", "TAG")
        by_sql, _ = await read_all(client, "G3", "Mixed", "TAGS IN ('T3', 'T4')", "SQL92")
        assert by_tag == by_sql == [i for i in range(420) if i % 10 in (3, 4)]


async def test_a_malformed_selector_is_refused_with_rocketmq_code_and_the_column(nursery, tmp_path):
    cluster, address = await start(nursery, tmp_path, enabled=True)
    async with open_client(cluster.namesrv) as client:
        await send_mixed(client, "Mixed", 10)
        mq = min((await client.route("Mixed")).read_queues)
        with pytest.raises(SubscriptionRefusedError, match=r"expected a property.*\(at column 10\)"):
            await pull(client, "G", mq, 0, expression="region = = 'eu'", expression_type="SQL92")
        with pytest.raises(SubscriptionRefusedError, match="unknown expression type 'XPATH'"):
            await pull(client, "G", mq, 0, expression="a", expression_type="XPATH")
    async with open_remoting_client() as raw:
        answer = await raw.invoke(address, check_client_config("region = = 'eu'"), 5)
        assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 10" in answer.remark
        answer = await raw.invoke(address, check_client_config(SELECTOR), 5)
        assert answer.code == ResponseCode.SUCCESS


def check_client_config(expression: str, kind: str = "SQL92") -> RemotingCommand:
    body = {"clientId": "c1", "group": "G", "subscriptionData": {"topic": "Mixed", "subString": expression,
                                                                 "expressionType": kind}}
    return RemotingCommand(code=RequestCode.CHECK_CLIENT_CONFIG, body=orjson.dumps(body))


async def test_a_broker_without_property_filtering_refuses_sql92_clearly(nursery, tmp_path):
    cluster, address = await start(nursery, tmp_path, enabled=False)
    async with open_client(cluster.namesrv) as client:
        await send_mixed(client, "Mixed", 10)
        mq = min((await client.route("Mixed")).read_queues)
        with pytest.raises(SubscriptionRefusedError, match="does not support consumer to filter message by SQL92"):
            await pull(client, "G", mq, 0, expression=SELECTOR, expression_type="SQL92")
        consumer = PushConsumer(client, "G", lambda messages: True, from_beginning=True)
        consumer.subscribe("Mixed", SELECTOR, sql=True)
        with pytest.raises(SubscriptionRefusedError, match="enable_property_filter"):
            await consumer.start()
        tags, _ = await read_all(client, "G", "Mixed", "T1", "TAG")  # tags are served as ever
        assert tags == [1]
    async with open_remoting_client() as raw:
        answer = await raw.invoke(address, check_client_config(SELECTOR), 5)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert (await raw.invoke(address, check_client_config("*", "TAG"), 5)).code == ResponseCode.SUCCESS


async def test_a_heartbeat_subscription_filters_pulls_that_do_not_carry_one(nursery, tmp_path):
    cluster, address = await start(nursery, tmp_path, enabled=True)
    async with open_client(cluster.namesrv) as client:
        await send_mixed(client, "Mixed", 60)
        mq = min((await client.route("Mixed")).read_queues)
    heartbeat = {"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "HG", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [
            {"topic": "Mixed", "subString": SELECTOR, "expressionType": "SQL92", "subVersion": 1700000000000,
             "tagsSet": [], "codeSet": []}]}]}
    async with open_remoting_client() as raw:
        answer = await raw.invoke(address, RemotingCommand(code=RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat)), 5)
        assert answer.code == ResponseCode.SUCCESS
        # a pull without the subscription flag (sysFlag 0) is served by the group's heartbeat
        answer = await raw.invoke(address, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
            "consumerGroup": "HG", "topic": "Mixed", "queueId": str(mq.queue_id), "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0"}), 5)
        got = [int(r.properties["idx"]) for r in decode_records(answer.body)] if answer.code == 0 else []
        assert got and all(wanted(mixed_properties(i)) for i in got)
        listed = await raw.invoke(address, RemotingCommand(code=RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                           ext_fields={"consumerGroup": "HG"}), 5)
        sub = orjson.loads(listed.body)["subscriptionTable"]["Mixed"]
        assert (sub["expressionType"], sub["subString"], sub["subVersion"]) == ("SQL92", SELECTOR, 1700000000000)

        # the same group subscribing with a malformed selector: its pulls are refused, not starved
        heartbeat["consumerDataSet"][0]["subscriptionDataSet"][0].update(subString="amount >", subVersion=1700000000001)
        await raw.invoke(address, RemotingCommand(code=RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat)), 5)
        answer = await raw.invoke(address, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
            "consumerGroup": "HG", "topic": "Mixed", "queueId": str(mq.queue_id), "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0"}), 5)
        assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 9" in answer.remark


async def test_a_push_consumer_by_sql92_receives_the_matching_messages(nursery, tmp_path):
    cluster, _ = await start(nursery, tmp_path, enabled=True)
    seen: list[int] = []
    async with open_client(cluster.namesrv) as client:
        await send_mixed(client, "Mixed", 210)
        expected = [i for i in range(210) if wanted(mixed_properties(i))]

        async def handler(messages):
            seen.extend(int(m.properties["idx"]) for m in messages)
            return True

        consumer = PushConsumer(client, "PushG", handler, from_beginning=True)
        consumer.subscribe("Mixed", SELECTOR, sql=True)
        await consumer.start()
        with trio.fail_after(20):
            while len(seen) < len(expected):
                await trio.sleep(0.05)
        await consumer.stop()
    assert sorted(seen) == expected
