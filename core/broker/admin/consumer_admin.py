"""Consumer administration: GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST,
INVOKE_BROKER_TO_RESET_OFFSET (which also tells the group's clients, RESET_CONSUMER_CLIENT_OFFSET)
and GET_CONSUMER_RUNNING_INFO relayed to the client it names.

Tables keyed by message queue. RocketMQ's ``ConsumeStats.offsetTable`` and
``ResetOffsetBody.offsetTable`` are Java maps keyed by MessageQueue objects, which fastjson writes
with object keys -- not JSON:

```
{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:5}}
```

We write a list instead, one object per queue with the queue's fields and its values side by
side (the shape 4.9.8 already sends C++ clients as ResetOffsetBodyForC, and what the C++ client
parses):

```
GET_CONSUME_STATS               {"consumeTps": 0.0, "offsetTable": [{"brokerName": "broker-a",
                                 "queueId": 0, "topic": "T", "brokerOffset": 7,
                                 "consumerOffset": 5, "lastTimestamp": 1700000000000}, ...]}
INVOKE_BROKER_TO_RESET_OFFSET   {"offsetTable": [{"brokerName": "broker-a", "queueId": 0,
 and RESET_CONSUMER_CLIENT_OFFSET  "topic": "T", "offset": 3}, ...]}
```

Java peers (language JAVA: mqadmin, Java consumers) read bodies with fastjson, which cannot turn
a list into a map, so they get fastjson's object-keyed form, as from a stock broker. The
language of a consumer is the one of its heartbeats.

GET_CONSUME_STATS reports the queues of the topics the group's online members subscribe to
(else of the topics it committed offsets for) and of ``%RETRY%<group>``: broker offset (max
queue offset), consumer offset (committed, 0 when none) and the store time of the last consumed
message (the one at consumer offset - 1; 0 when none). A group nobody knows gets an empty table,
as from a stock broker.

INVOKE_BROKER_TO_RESET_OFFSET (``topic``, ``group``, ``timestamp``, ``isForce``): ``timestamp``
-1 is the end of each queue (4.9.8's meaning), 0 -- or any time before the first message -- its
beginning, else the first message stored at or after it. Without ``isForce`` offsets only move
back, as in 4.9.8. Unlike 4.9.8, which answers CONSUMER_NOT_ONLINE and leaves the committing to
the clients, the new offsets are committed here whether or not anyone is online, so a stopped
group can be reset too; online members are then told (oneway) so they jump at once. A group
with neither offsets for the topic here nor an online member subscribed to it is refused with
SUBSCRIPTION_GROUP_NOT_EXIST.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from core.broker.clients import ClientRegistry, ConsumerClient, Subscription
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.tables.topics import TopicTable, retry_topic
from core.errors import RemotingError, RemotingTimeoutError
from core.node_specs import BrokerNode
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.request_headers import (
    ConsumerGroupHeader,
    ConsumerRunningInfoHeader,
    ConsumeStatsHeader,
    ResetOffsetHeader,
)
from core.store.message_store import MessageStore
from formats.errors import RecordError

log = logging.getLogger(__name__)

RESET_TO_END = -1  # INVOKE_BROKER_TO_RESET_OFFSET timestamp meaning "the max offset of each queue"
FORWARD_TIMEOUT_S = 5.0  # how long an admin's GET_CONSUMER_RUNNING_INFO waits for the client
_SORTED = orjson.OPT_SORT_KEYS


class ConsumerAdminBroker(Protocol):
    """What consumer administration needs from its broker (``Broker`` is one)."""

    clients: ClientRegistry
    node: BrokerNode
    offsets: ConsumerOffsets
    store: MessageStore
    topics: TopicTable


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue's OffsetWrapper."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int  # store time of the last consumed message; 0 when none


# ---------------------------------------------------------------------------- peers


def _is_java(conn: object) -> bool:
    return isinstance(conn, Connection) and conn.attributes.get("language") == "JAVA"


def _online(conn: object) -> bool:
    return isinstance(conn, Connection) and not conn.closed.is_set()


# ---------------------------------------------------------------------------- bodies


def _queue(broker: ConsumerAdminBroker, topic: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker.node.name, "queueId": queue_id, "topic": topic}


def queue_table(entries: Iterable[tuple[dict[str, Any], Any]], value_field: str | None, *, java: bool) -> orjson.Fragment:
    """A MessageQueue-keyed table: fastjson's object-keyed map for Java peers, else a list of
    queue objects carrying ``value_field`` (or, when it is ``None``, the value's own fields)."""
    if java:
        pairs = (orjson.dumps(mq, option=_SORTED) + b":" + orjson.dumps(value, option=_SORTED) for mq, value in entries)
        return orjson.Fragment(b"{" + b",".join(pairs) + b"}")
    rows = [{**mq, value_field: value} if value_field else {**mq, **value} for mq, value in entries]
    return orjson.Fragment(orjson.dumps(rows))


# ---------------------------------------------------------------------------- GET_CONSUME_STATS


def progress_topics(broker: ConsumerAdminBroker, group: str) -> list[str]:
    """The topics whose queues GET_CONSUME_STATS reports for ``group`` (those this broker has)."""
    subscribed = {topic for member in broker.clients.members(group) for topic in member.subscriptions}
    topics = subscribed or set(broker.offsets.topics_of(group))
    topics.add(retry_topic(group))
    return sorted(t for t in topics if broker.topics.get(t) is not None)


def store_time(store: MessageStore, topic: str, queue_id: int, queue_offset: int) -> int:
    """When the record at ``queue_offset`` of the queue was stored (0: not there any more)."""
    entries = store.queue_entries(topic, queue_id, queue_offset, 1)
    if not entries or entries[0][0] != queue_offset:
        return 0
    try:
        return store.read_record(entries[0][1].phys_offset).store_timestamp
    except (KeyError, RecordError):
        return 0  # the record aged out of the CommitLog before its queue entry


def queue_progress(broker: ConsumerAdminBroker, group: str, topic: str) -> list[QueueProgress]:
    config = broker.topics.get(topic)
    if config is None:
        return []
    out = []
    for queue_id in range(config.read_queue_nums):
        broker_offset = max(0, broker.store.max_queue_offset(topic, queue_id))
        consumer_offset = max(0, broker.offsets.get(group, topic, queue_id) or 0)
        last = store_time(broker.store, topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
        out.append(QueueProgress(topic, queue_id, broker_offset, consumer_offset, last))
    return out


def consume_stats(broker: ConsumerAdminBroker, header: ConsumeStatsHeader, request: RemotingCommand,
                  conn: Connection) -> RemotingCommand:
    group = header.consumer_group
    topics = [header.topic] if header.topic else progress_topics(broker, group)
    rows = [(_queue(broker, p.topic, p.queue_id),
             {"brokerOffset": p.broker_offset, "consumerOffset": p.consumer_offset, "lastTimestamp": p.last_timestamp})
            for t in topics for p in queue_progress(broker, group, t)]
    body = {"consumeTps": 0.0, "offsetTable": queue_table(rows, None, java=request.language == "JAVA")}
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps(body))


# ---------------------------------------------------------------------------- GET_CONSUMER_CONNECTION_LIST


def subscription_data(sub: Subscription) -> dict[str, Any]:
    tags = [] if sub.expression == "*" or sub.codes is None else [t.strip() for t in sub.expression.split("||")]
    return {"classFilterMode": False, "codeSet": sorted(sub.codes or []), "expressionType": sub.expression_type,
            "subString": sub.expression, "subVersion": sub.version, "tagsSet": tags, "topic": sub.topic}


def _connection(member: ConsumerClient) -> dict[str, Any]:
    conn = member.connection
    attributes = conn.attributes if isinstance(conn, Connection) else {}
    return {"clientAddr": conn.remote if isinstance(conn, Connection) else "", "clientId": member.client_id,
            "language": attributes.get("language", "OTHER"), "version": attributes.get("version", 0)}


def consumer_connection_list(broker: ConsumerAdminBroker, header: ConsumerGroupHeader, request: RemotingCommand,
                             conn: Connection) -> RemotingCommand:
    group = header.consumer_group
    members = broker.clients.members(group)
    if not members:
        return request.reply(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    # like ConsumerGroupInfo: the group's settings and subscriptions as its latest heartbeats said
    by_age = sorted(members, key=lambda m: m.last_seen_ms)
    latest = by_age[-1]
    subscriptions: dict[str, Subscription] = {}
    for member in by_age:
        subscriptions.update(member.subscriptions)
    body = {"connectionSet": [_connection(m) for m in members], "consumeFromWhere": latest.consume_from_where,
            "consumeType": latest.consume_type, "messageModel": latest.message_model,
            "subscriptionTable": {t: subscription_data(s) for t, s in sorted(subscriptions.items())}}
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps(body))


# ---------------------------------------------------------------------------- INVOKE_BROKER_TO_RESET_OFFSET


def reset_targets(broker: ConsumerAdminBroker, group: str, topic: str, timestamp_ms: int, *, force: bool) -> dict[int, int]:
    """The offset each queue of ``topic`` moves to (by queue id)."""
    config = broker.topics.get(topic)
    store = broker.store
    targets = {}
    for queue_id in range(config.read_queue_nums if config else 0):
        if timestamp_ms == RESET_TO_END:
            target = store.max_queue_offset(topic, queue_id)
        else:
            target = store.offset_by_time(topic, queue_id, timestamp_ms)
        target = max(0, target)
        current = broker.offsets.get(group, topic, queue_id)
        if not force and current is not None and target >= current:
            target = current  # without isForce an offset only moves back
        targets[queue_id] = target
    return targets


def reset_offset(broker: ConsumerAdminBroker, header: ResetOffsetHeader,
                 request: RemotingCommand, conn: Connection) -> Reply:
    topic, group, timestamp = header.topic, header.group, header.timestamp
    if timestamp < RESET_TO_END:
        return request.reply(ResponseCode.SYSTEM_ERROR,
                             f"timestamp {timestamp} is neither -1 (the end) nor epoch milliseconds")
    if broker.topics.get(topic) is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST,
                             f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
    members = broker.clients.members(group)
    if topic not in broker.offsets.topics_of(group) and not any(topic in m.subscriptions for m in members):
        return request.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                             f"the consumer group <{group}> not exist: no offsets for topic {topic} on broker "
                             f"{broker.node.name} and no online member subscribes to it")
    targets = reset_targets(broker, group, topic, timestamp, force=header.is_force)
    for queue_id, offset in targets.items():
        broker.offsets.commit(group, topic, queue_id, offset)
    log.info("reset offsets of %s on %s to %s (timestamp %d)", group, topic, targets, timestamp)
    entries = [(_queue(broker, topic, q), offset) for q, offset in sorted(targets.items())]
    reply = request.reply(ResponseCode.SUCCESS, body=orjson.dumps(
        {"offsetTable": queue_table(entries, "offset", java=request.language == "JAVA")}))
    online = [m for m in members if _online(m.connection)]
    if not online:
        return reply
    told = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(header.is_force).lower()}
    return _tell_members(online, told, entries, reply)


async def _tell_members(members: list[ConsumerClient], fields: dict[str, str],
                        entries: list[tuple[dict[str, Any], int]], reply: RemotingCommand) -> RemotingCommand:
    """RESET_CONSUMER_CLIENT_OFFSET to each online member, so running consumers jump at once."""
    for member in members:
        conn = member.connection
        assert isinstance(conn, Connection)
        body = orjson.dumps({"offsetTable": queue_table(entries, "offset", java=_is_java(conn))})
        try:
            await conn.oneway(RemotingCommand(code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=dict(fields),
                                              body=body, language="JAVA"))
        except RemotingError as exc:
            log.info("telling %s of the reset failed: %s", member.client_id, exc)
    return reply


# ---------------------------------------------------------------------------- GET_CONSUMER_RUNNING_INFO


def consumer_running_info(broker: ConsumerAdminBroker, header: ConsumerRunningInfoHeader, request: RemotingCommand,
                          conn: Connection) -> Reply:
    """An admin's GET_CONSUMER_RUNNING_INFO, asked of the named client over its own connection."""
    group, client_id = header.consumer_group, header.client_id
    member = broker.clients.member(group, client_id)
    if member is None or not _online(member.connection):
        return request.reply(ResponseCode.CONSUMER_NOT_ONLINE, f"The Consumer <{group}> <{client_id}> not online")
    assert isinstance(member.connection, Connection)
    return _ask_client(member.connection, request, header)


async def _ask_client(client: Connection, request: RemotingCommand, header: ConsumerRunningInfoHeader) -> RemotingCommand:
    group, client_id = header.consumer_group, header.client_id
    forwarded = RemotingCommand(code=request.code, ext_fields={
        "consumerGroup": group, "clientId": client_id, "jstackEnable": str(header.jstack_enable).lower()},
        body=request.body, language="JAVA")
    try:
        answer = await client.request(forwarded, FORWARD_TIMEOUT_S)
    except RemotingTimeoutError as exc:
        return request.reply(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {exc}")
    except RemotingError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
    return request.reply(answer.code, answer.remark, ext_fields=answer.ext_fields, body=answer.body)
