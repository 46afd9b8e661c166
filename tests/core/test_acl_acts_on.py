"""What an ACL rule checks is what the handler acts on (issue 47).

For every request code with a rule (core/acl/requests.py) and every field it checks (an attribute
of the code's declared header type, sent under its wire name, or a kind of name in its body),
the same scenario runs on two fresh in-process brokers with real stores, the request differing
only in that field (A or B); what the broker did must differ (a message stored in topic A or B,
the offsets of group A or B, ...). A rule that gains a field without a scenario here fails
:func:`test_every_field_a_rule_checks_has_a_scenario`.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from core.acl.requests import RULES
from core.broker.pop.revive import revive_topic
from core.config import Config
from core.node_specs import BrokerNode
from core.plugin_markers import hookimpl
from core.remoting.client import RemotingClient, open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.request_headers import PULL_COMMIT_OFFSET, V2_NAMES, wire_name
from core.store.message_store import MessageStore
from formats.batch import BatchItem, encode_batch
from formats.msgid import decode_offset_msg_id
from formats.properties import encode_properties
from formats.recall import RecallHandle
from formats.record import decode_records
from plugins import plugin_host
from tests.core.cluster_harness import InProcessCluster, start_cluster
from tests.core.test_acl_requests import BODIES

TOPICS = ("TopicA", "TopicB")
GROUPS = ("groupA", "groupB")
CLUSTER = "DefaultCluster"
BROKER = "broker-a"
SHORT = {long: short for short, long in V2_NAMES.items()}


class StoreWitness:
    """A plugin that sees the store its broker opened (the replication hook is handed it)."""

    def __init__(self) -> None:
        self.store: MessageStore | None = None

    @hookimpl
    def mq_replication(self, mode: str, node: BrokerNode, config: Config, store: MessageStore) -> None:
        self.store = store


@dataclass
class Bench:
    """One fresh broker: its address, a raw client, its store and its cluster."""

    client: RemotingClient
    addr: str
    store: MessageStore
    cluster: InProcessCluster

    async def call(self, request: RemotingCommand, *codes: int) -> RemotingCommand:
        """The answer to ``request``; with ``codes``, asserted to be one of them."""
        answer = await self.client.invoke(self.addr, request)
        assert not codes or answer.code in codes, (RequestCode(request.code).name, answer.code, answer.remark)
        return answer

    async def send(self, topic: str, body: bytes = b"x", *, keys: str = "", queue_id: int = 0) -> int:
        """A message stored in ``topic``/``queue_id``; its CommitLog offset."""
        answer = await self.call(RemotingCommand(code=RequestCode.SEND_MESSAGE, body=body, ext_fields=dict(
            send_fields(topic, keys), queueId=str(queue_id))), ResponseCode.SUCCESS)
        return decode_offset_msg_id(answer.ext_fields["msgId"]).phys_offset

    async def create(self, topic: str, queues: int = 4) -> None:
        await self.call(RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}),
            ResponseCode.SUCCESS)

    async def commit(self, group: str, topic: str, offset: int) -> None:
        await self.call(RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
            "consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": str(offset)}), ResponseCode.SUCCESS)

    async def committed(self, group: str, topic: str) -> str:
        answer = await self.call(RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields={
            "consumerGroup": group, "topic": topic, "queueId": "0"}))
        return answer.ext_fields.get("offset", f"code {answer.code}")

    async def heartbeat(self, client_id: str, *groups: tuple[str, str], client: RemotingClient | None = None) -> None:
        """``client_id`` consumes each (group, topic) of ``groups``."""
        body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [{"topic": topic, "subString": "*"}]}
            for group, topic in groups]}
        answer = await (client or self.client).invoke(self.addr, RemotingCommand(
            code=RequestCode.HEART_BEAT, body=orjson.dumps(body)))
        assert answer.code == ResponseCode.SUCCESS, answer.remark

    async def members(self, group: str) -> list[str]:
        answer = await self.call(RemotingCommand(code=RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                 ext_fields={"consumerGroup": group}))
        return orjson.loads(answer.body)["consumerIdList"] if answer.code == ResponseCode.SUCCESS else []

    def queue_size(self, topic: str, queue_id: int = 0) -> int:
        return self.store.max_queue_offset(topic, queue_id)

    def revive_records(self, revive_qid: int, start: int) -> list[tuple[str, str, str]]:
        """(tag, topic, group) of each revive record of queue ``revive_qid`` from ``start``."""
        topic = revive_topic(CLUSTER)
        out = []
        for _, entry in self.store.queue_entries(topic, revive_qid, start, 64):
            rec = self.store.read_record(entry.phys_offset)
            doc = orjson.loads(rec.body)
            out.append((rec.properties["TAGS"], doc["t"], doc["c"]))
        return out

    async def wait_route(self, *topics: str) -> None:
        for topic in topics:
            with trio.fail_after(10):
                while (await self.client.invoke(self.cluster.namesrv[0], RemotingCommand(
                        code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}))).code != 0:
                    await trio.sleep(0.05)


def send_fields(topic: str, keys: str = "") -> dict[str, str]:
    """SEND_MESSAGE's fields (long names), queue 0."""
    props = {"TAGS": "t", "WAIT": "true", **({"KEYS": keys} if keys else {})}
    return {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
            "properties": encode_properties(props), "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}


def sent_as(code: int, fields: dict[str, str], attribute: str, value: str, body: bytes = b"") -> RemotingCommand:
    """A request of ``code`` with ``fields`` (long names) and header attribute ``attribute`` set
    to ``value`` under the name ``code`` carries it in."""
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        fields = {SHORT.get(k, k): v for k, v in fields.items()}
    return RemotingCommand(code=code, ext_fields={**fields, wire_name(code, attribute): value}, body=body)


@contextlib.asynccontextmanager
async def bench(nursery: trio.Nursery, where: Path) -> AsyncIterator[Bench]:
    cluster = await start_cluster(nursery, where)
    witness = StoreWitness()
    host = plugin_host(load_entry_points=False)
    host.register(witness, name="store-witness")
    running = await cluster.start_broker(plugins=host)
    assert witness.store is not None
    async with open_remoting_client() as client:
        yield Bench(client, running.address, witness.store, cluster)
    await cluster.stop_broker(running.name)


# ---------------------------------------------------------------------------- the scenarios
# Each runs on a fresh broker with ``value`` in the field the case names and returns what the
# broker did, as something two runs can compare (names, offsets, bodies, codes: no times).

Scenario = Callable[[Bench, str], Awaitable[object]]


async def sent(b: Bench, value: str, code: int) -> object:
    body = encode_batch([BatchItem(b"item", {"TAGS": "t"})]) if code == RequestCode.SEND_BATCH_MESSAGE else b"x"
    answer = await b.call(sent_as(code, send_fields("Other"), "topic", value, body), ResponseCode.SUCCESS)
    return b.store.read_record(decode_offset_msg_id(answer.ext_fields["msgId"].split(",")[0]).phys_offset).topic


async def recalled(b: Bench, value: str) -> object:
    for topic in TOPICS:
        await b.send(topic)
    handle = RecallHandle(TOPICS[0], BROKER, int(time.time() * 1000) + 3_600_000, "AB" * 16).text()
    answer = await b.call(sent_as(RequestCode.RECALL_MESSAGE, {"producerGroup": "PG", "recallHandle": handle},
                                  "topic", value))
    return answer.code


async def sent_back(b: Bench, value: str) -> object:
    offset = await b.send(TOPICS[0], b"job")
    await b.call(sent_as(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(offset), "delayLevel": "-1"},
                         "group", value), ResponseCode.SUCCESS)
    return [g for g in GROUPS if b.queue_size(f"%DLQ%{g}") > 0]


def pull_fields(topic: str, group: str, **extra: str) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", **extra}


async def pulled_topic(b: Bench, value: str) -> object:
    for topic in TOPICS:
        await b.send(topic, topic.encode())
    answer = await b.call(sent_as(RequestCode.PULL_MESSAGE, pull_fields("Other", GROUPS[0]), "topic", value))
    return [r.body for r in decode_records(answer.body)]


async def pulled_group(b: Bench, value: str) -> object:
    await b.send(TOPICS[0])
    await b.call(sent_as(RequestCode.PULL_MESSAGE, pull_fields(TOPICS[0], "other", sysFlag=str(PULL_COMMIT_OFFSET),
                                                               commitOffset="1"), "consumer_group", value))
    return [await b.committed(g, TOPICS[0]) for g in GROUPS]


def pop_fields(topic: str, group: str) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": "0", "maxMsgNums": "32", "invisibleTime": "60000",
            "pollTime": "0", "bornTime": "0", "initMode": "0"}


async def popped_topic(b: Bench, value: str) -> object:
    for topic in TOPICS:
        await b.send(topic, topic.encode())
    answer = await b.call(sent_as(RequestCode.POP_MESSAGE, pop_fields("Other", GROUPS[0]), "topic", value),
                          ResponseCode.SUCCESS)
    return [r.body for r in decode_records(answer.body)]


async def popped_group(b: Bench, value: str) -> object:
    await b.send(TOPICS[0])
    await b.call(sent_as(RequestCode.POP_MESSAGE, pop_fields(TOPICS[0], "other"), "group", value), ResponseCode.SUCCESS)
    return [await b.committed(g, TOPICS[0]) for g in GROUPS]


async def acked(b: Bench, value: str, code: int, attribute: str) -> object:
    """A message of TopicA popped by groupA (both topics hold one at queue 0 offset 0), then
    acked (or its invisible time changed) naming ``value``: the revive records it wrote."""
    for topic in TOPICS:
        await b.send(topic)
    popped = await b.call(RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields=pop_fields(TOPICS[0], GROUPS[0])),
                          ResponseCode.SUCCESS)
    ext, record = popped.ext_fields, decode_records(popped.body)[0]
    start, qid = ext["startOffsetInfo"].split()[2], int(ext["reviveQid"])
    handle = (f"{start} {ext['popTime']} {ext['invisibleTime']} {qid} 0 {BROKER} {record.queue_id} "
              f"{record.queue_offset}")
    before = b.queue_size(revive_topic(CLUSTER), qid)
    fields = {"consumerGroup": GROUPS[0], "topic": TOPICS[0], "queueId": "0", "extraInfo": handle,
              "offset": str(record.queue_offset), "invisibleTime": "1000"}
    await b.call(sent_as(code, fields, attribute, value), ResponseCode.SUCCESS)
    return b.revive_records(qid, before)


async def batch_acked(b: Bench, value: str, kind: str) -> object:
    entry = {"c": GROUPS[0], "t": TOPICS[0], "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 60000,
             "b": base64.b64encode(b"\x01").decode(), **({"t": value} if kind == "topic" else {"c": value})}
    await b.send(TOPICS[0])
    await b.call(RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, body=orjson.dumps(
        {"brokerName": BROKER, "acks": [entry]})), ResponseCode.SUCCESS)
    return b.revive_records(0, 0)


async def notified(b: Bench, value: str, attribute: str) -> object:
    await b.send(TOPICS[0])
    await b.create(TOPICS[1])  # there, and empty
    await b.commit(GROUPS[0], TOPICS[0], 1)  # groupA has read TopicA
    fields = {"consumerGroup": GROUPS[1], "topic": TOPICS[0], "queueId": "0", "pollTime": "0", "bornTime": "0"}
    answer = await b.call(sent_as(RequestCode.NOTIFICATION, fields, attribute, value), ResponseCode.SUCCESS)
    return answer.ext_fields["hasMsg"]


async def offset_queried(b: Bench, value: str, attribute: str) -> object:
    for topic in TOPICS:
        await b.send(topic)
    await b.commit(GROUPS[0], TOPICS[0], 1)
    await b.commit(GROUPS[1], TOPICS[0], 2)
    await b.commit(GROUPS[0], TOPICS[1], 3)
    fields = {"consumerGroup": GROUPS[0], "topic": TOPICS[0], "queueId": "0"}
    answer = await b.call(sent_as(RequestCode.QUERY_CONSUMER_OFFSET, fields, attribute, value), ResponseCode.SUCCESS)
    return answer.ext_fields["offset"]


async def offset_updated(b: Bench, value: str, attribute: str) -> object:
    for topic in TOPICS:
        await b.send(topic)
    fields = {"consumerGroup": GROUPS[0], "topic": TOPICS[0], "queueId": "0", "commitOffset": "5"}
    await b.call(sent_as(RequestCode.UPDATE_CONSUMER_OFFSET, fields, attribute, value), ResponseCode.SUCCESS)
    return [await b.committed(g, t) for g in GROUPS for t in TOPICS]


async def stats(b: Bench, value: str, attribute: str) -> object:
    for topic in TOPICS:
        await b.send(topic)
    await b.commit(GROUPS[0], TOPICS[0], 1)
    await b.commit(GROUPS[1], TOPICS[0], 0)
    answer = await b.call(sent_as(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUPS[0], "topic": TOPICS[0]},
                                  attribute, value), ResponseCode.SUCCESS)
    return [(row["topic"], row["queueId"], row["consumerOffset"]) for row in orjson.loads(answer.body)["offsetTable"]]


async def heartbeat_body(b: Bench, value: str, kind: str) -> object:
    await b.heartbeat("beater", (value, TOPICS[0]) if kind == "group" else (GROUPS[0], value))
    listed = [g for g in GROUPS if "beater" in await b.members(g)]
    answer = await b.call(RemotingCommand(code=RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                          ext_fields={"consumerGroup": GROUPS[0]}))
    subscribed = sorted(orjson.loads(answer.body)["subscriptionTable"]) if answer.code == ResponseCode.SUCCESS else []
    return listed, subscribed


def lock_body(group: str, topic: str, client_id: str) -> bytes:
    return orjson.dumps({"consumerGroup": group, "clientId": client_id,
                         "mqSet": [{"topic": topic, "brokerName": BROKER, "queueId": 0}]})


async def lock_probe(b: Bench) -> object:
    """Whether another client may lock groupA's TopicA queue 0 (so whether it was free)."""
    answer = await b.call(RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, body=lock_body(GROUPS[0], TOPICS[0], "probe")),
                          ResponseCode.SUCCESS)
    return bool(orjson.loads(answer.body)["lockOKMQSet"])


async def locked(b: Bench, value: str, kind: str) -> object:
    group, topic = (value, TOPICS[0]) if kind == "group" else (GROUPS[0], value)
    await b.call(RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, body=lock_body(group, topic, "holder")),
                 ResponseCode.SUCCESS)
    return await lock_probe(b)


async def unlocked(b: Bench, value: str, kind: str) -> object:
    for group, topic in ((GROUPS[0], TOPICS[0]), (GROUPS[1], TOPICS[0]), (GROUPS[0], TOPICS[1])):
        await b.call(RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, body=lock_body(group, topic, "holder")),
                     ResponseCode.SUCCESS)
    group, topic = (value, TOPICS[0]) if kind == "group" else (GROUPS[0], value)
    await b.call(RemotingCommand(code=RequestCode.UNLOCK_BATCH_MQ, body=lock_body(group, topic, "holder")),
                 ResponseCode.SUCCESS)
    return await lock_probe(b)


async def assigned(b: Bench, value: str, kind: str) -> object:
    await b.send(TOPICS[0])
    await b.create(TOPICS[1], queues=2)
    await b.wait_route(*TOPICS)
    await b.heartbeat("member", (GROUPS[0], TOPICS[0]))
    group, topic = (value, TOPICS[0]) if kind == "group" else (GROUPS[0], value)
    answer = await b.call(RemotingCommand(code=RequestCode.QUERY_ASSIGNMENT, body=orjson.dumps({
        "topic": topic, "consumerGroup": group, "clientId": "member", "strategyName": "AVG",
        "messageModel": "CLUSTERING"})))
    if answer.code != ResponseCode.SUCCESS:
        return answer.code
    return sorted((a["messageQueue"]["topic"], a["messageQueue"]["queueId"])
                  for a in orjson.loads(answer.body)["messageQueueAssignments"])


async def unregistered(b: Bench, value: str) -> object:
    await b.heartbeat("leaver", *((g, TOPICS[0]) for g in GROUPS))
    await b.call(sent_as(RequestCode.UNREGISTER_CLIENT, {"clientID": "leaver"}, "consumer_group", value),
                 ResponseCode.SUCCESS)
    return [g for g in GROUPS if "leaver" in await b.members(g)]


async def listed(b: Bench, value: str) -> object:
    await b.heartbeat("first", (GROUPS[0], TOPICS[0]))
    await b.heartbeat("second", (GROUPS[1], TOPICS[0]))
    answer = await b.call(sent_as(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {}, "consumer_group", value),
                          ResponseCode.SUCCESS)
    return orjson.loads(answer.body)["consumerIdList"]


async def connections(b: Bench, value: str) -> object:
    await b.heartbeat("first", (GROUPS[0], TOPICS[0]))
    await b.heartbeat("second", (GROUPS[1], TOPICS[1]))
    answer = await b.call(sent_as(RequestCode.GET_CONSUMER_CONNECTION_LIST, {}, "consumer_group", value),
                          ResponseCode.SUCCESS)
    doc = orjson.loads(answer.body)
    return [c["clientId"] for c in doc["connectionSet"]], sorted(doc["subscriptionTable"])


async def running_info(b: Bench, value: str) -> object:
    async with open_remoting_client() as member:  # no processor: it answers REQUEST_CODE_NOT_SUPPORTED
        await b.heartbeat("runner", (GROUPS[0], TOPICS[0]), client=member)
        answer = await b.call(sent_as(RequestCode.GET_CONSUMER_RUNNING_INFO, {"clientId": "runner"},
                                      "consumer_group", value))
    return answer.code  # relayed from the member, or CONSUMER_NOT_ONLINE


async def queried(b: Bench, value: str) -> object:
    for topic in TOPICS:
        await b.send(topic, topic.encode(), keys="k")
    fields = {"key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)}
    answer = await b.call(sent_as(RequestCode.QUERY_MESSAGE, fields, "topic", value), ResponseCode.SUCCESS)
    return [r.body for r in decode_records(answer.body)]


async def queue_answer(b: Bench, value: str, code: int) -> object:
    await b.send(TOPICS[0])
    for _ in range(2):
        await b.send(TOPICS[1])
    answer = await b.call(sent_as(code, {"queueId": "0", "timestamp": str(2**62)}, "topic", value),
                          ResponseCode.SUCCESS)
    return answer.ext_fields["offset"]


async def min_offset(b: Bench, value: str) -> object:
    """TopicA's messages fill the first CommitLog segment, which is retired; TopicB's are in the next."""
    while b.store.commitlog.write_offset < (1 << 20) - 300_000:
        await b.send(TOPICS[0], b"a" * 200_000)
    await b.send(TOPICS[1], b"b" * 400_000)  # does not fit: the second segment
    await b.store.retire_segments([b.store.commitlog.files.files[0]])
    answer = await b.call(sent_as(RequestCode.GET_MIN_OFFSET, {"queueId": "0"}, "topic", value), ResponseCode.SUCCESS)
    return answer.ext_fields["offset"]


async def earliest(b: Bench, value: str) -> object:
    stamps = {}
    for topic in TOPICS:
        offset = await b.send(topic)
        stamps[b.store.read_record(offset).store_timestamp] = topic
        with trio.fail_after(2):  # the next one is stored in a later millisecond
            while time.time_ns() // 1_000_000 <= max(stamps):
                await trio.sleep(0.001)
    answer = await b.call(sent_as(RequestCode.GET_EARLIEST_MSG_STORETIME, {"queueId": "0"}, "topic", value),
                          ResponseCode.SUCCESS)
    return stamps[int(answer.ext_fields["timestamp"])]


def _with(scenario: Callable[..., Awaitable[object]], *args: Any) -> Scenario:
    return lambda b, value: scenario(b, value, *args)


R = RequestCode
CASES: dict[tuple[int, str], Scenario] = {
    (R.SEND_MESSAGE, "topic"): _with(sent, R.SEND_MESSAGE),
    (R.SEND_MESSAGE_V2, "topic"): _with(sent, R.SEND_MESSAGE_V2),
    (R.SEND_BATCH_MESSAGE, "topic"): _with(sent, R.SEND_BATCH_MESSAGE),
    (R.RECALL_MESSAGE, "topic"): recalled,
    (R.CONSUMER_SEND_MSG_BACK, "group"): sent_back,
    (R.PULL_MESSAGE, "topic"): pulled_topic,
    (R.PULL_MESSAGE, "consumer_group"): pulled_group,
    (R.POP_MESSAGE, "topic"): popped_topic,
    (R.POP_MESSAGE, "group"): popped_group,
    (R.ACK_MESSAGE, "topic"): _with(acked, R.ACK_MESSAGE, "topic"),
    (R.ACK_MESSAGE, "group"): _with(acked, R.ACK_MESSAGE, "group"),
    (R.CHANGE_MESSAGE_INVISIBLETIME, "topic"): _with(acked, R.CHANGE_MESSAGE_INVISIBLETIME, "topic"),
    (R.CHANGE_MESSAGE_INVISIBLETIME, "group"): _with(acked, R.CHANGE_MESSAGE_INVISIBLETIME, "group"),
    (R.NOTIFICATION, "topic"): _with(notified, "topic"),
    (R.NOTIFICATION, "consumer_group"): _with(notified, "consumer_group"),
    (R.BATCH_ACK_MESSAGE, "body:topic"): _with(batch_acked, "topic"),
    (R.BATCH_ACK_MESSAGE, "body:group"): _with(batch_acked, "group"),
    (R.QUERY_CONSUMER_OFFSET, "topic"): _with(offset_queried, "topic"),
    (R.QUERY_CONSUMER_OFFSET, "consumer_group"): _with(offset_queried, "consumer_group"),
    (R.UPDATE_CONSUMER_OFFSET, "topic"): _with(offset_updated, "topic"),
    (R.UPDATE_CONSUMER_OFFSET, "consumer_group"): _with(offset_updated, "consumer_group"),
    (R.GET_CONSUME_STATS, "topic"): _with(stats, "topic"),
    (R.GET_CONSUME_STATS, "consumer_group"): _with(stats, "consumer_group"),
    (R.HEART_BEAT, "body:topic"): _with(heartbeat_body, "topic"),
    (R.HEART_BEAT, "body:group"): _with(heartbeat_body, "group"),
    (R.LOCK_BATCH_MQ, "body:topic"): _with(locked, "topic"),
    (R.LOCK_BATCH_MQ, "body:group"): _with(locked, "group"),
    (R.UNLOCK_BATCH_MQ, "body:topic"): _with(unlocked, "topic"),
    (R.UNLOCK_BATCH_MQ, "body:group"): _with(unlocked, "group"),
    (R.QUERY_ASSIGNMENT, "body:topic"): _with(assigned, "topic"),
    (R.QUERY_ASSIGNMENT, "body:group"): _with(assigned, "group"),
    (R.UNREGISTER_CLIENT, "consumer_group"): unregistered,
    (R.GET_CONSUMER_LIST_BY_GROUP, "consumer_group"): listed,
    (R.GET_CONSUMER_CONNECTION_LIST, "consumer_group"): connections,
    (R.GET_CONSUMER_RUNNING_INFO, "consumer_group"): running_info,
    (R.QUERY_MESSAGE, "topic"): queried,
    (R.GET_MAX_OFFSET, "topic"): _with(queue_answer, R.GET_MAX_OFFSET),
    (R.SEARCH_OFFSET_BY_TIMESTAMP, "topic"): _with(queue_answer, R.SEARCH_OFFSET_BY_TIMESTAMP),
    (R.GET_MIN_OFFSET, "topic"): min_offset,
    (R.GET_EARLIEST_MSG_STORETIME, "topic"): earliest,
}


def checked_fields() -> set[tuple[int, str]]:
    """(code, field) for every field a rule checks: its header attributes, and ``body:<kind>``
    for each kind of name its body names (topic, group)."""
    fields = set()
    for code, rule in RULES.items():
        fields |= {(code, attribute) for attribute in (*rule.topics, *rule.groups)}
        if rule.body is not None:
            fields |= {(code, f"body:{kind}") for kind, _, _ in rule.body(orjson.dumps(BODIES[RequestCode(code)]))}
    return fields


def test_every_field_a_rule_checks_has_a_scenario():
    assert set(CASES) == checked_fields(), "a rule checks a field no scenario here changes (or a scenario is stale)"


def values(code: int, field: str) -> tuple[str, str]:
    """The two names a field is given: topics for a topic, groups for a group."""
    return TOPICS if field in RULES[code].topics or field == "body:topic" else GROUPS


@pytest.mark.parametrize("case", sorted(checked_fields()), ids=lambda c: f"{RequestCode(c[0]).name}-{c[1]}")
async def test_the_field_a_rule_checks_is_what_the_handler_acts_on(case, nursery, tmp_path):
    scenario = CASES[case]
    seen = []
    for value in values(*case):
        async with bench(nursery, tmp_path / value) as b:
            seen.append(await scenario(b, value))
    assert seen[0] != seen[1], f"{RequestCode(case[0]).name}: {case[1]} A and B made the broker do the same: {seen[0]}"
