"""Requests from clients about themselves and their offsets: HEART_BEAT, CHECK_CLIENT_CONFIG, UNREGISTER_CLIENT,
GET_CONSUMER_LIST_BY_GROUP, QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET,
SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, LOCK/UNLOCK_BATCH_MQ."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import orjson

from core.broker.clients import ClientRegistry, check_heartbeat
from core.broker.consume.consumer_filters import FilterRefused, build_filter
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.consume.queue_locks import LockedQueue, QueueLocks
from core.broker.tables.topics import TopicConfig, TopicTable, retry_topic
from core.clock import Clock
from core.config import BrokerSettings
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.request_headers import (
    ConsumerGroupHeader,
    NoHeader,
    QueryConsumerOffsetHeader,
    QueueHeader,
    SearchOffsetHeader,
    UnregisterClientHeader,
    UpdateConsumerOffsetHeader,
)
from core.store.message_store import MessageStore
from core.topic_names import group_problem, topic_problem


class ClientRequestBroker(Protocol):
    """What clients' requests about themselves need from their broker (``Broker`` is one)."""

    clients: ClientRegistry
    now_ms: Clock
    offsets: ConsumerOffsets
    queue_locks: QueueLocks
    settings: BrokerSettings
    store: MessageStore
    topics: TopicTable

    def adopt_replicated_topic(self, topic: str) -> TopicConfig | None: ...

    def consumer_group_changed(self, group: str) -> None: ...

    def topics_changed(self) -> None: ...


def heartbeat(broker: ClientRequestBroker, header: NoHeader,
              request: RemotingCommand, conn: Connection) -> RemotingCommand:
    # the sender's language and version, for GET_CONSUMER_CONNECTION_LIST and the body shapes
    # sent to it (Java peers get fastjson's forms)
    conn.attributes["language"] = request.language
    conn.attributes["version"] = request.version
    try:
        doc = check_heartbeat(orjson.loads(request.body) if request.body else {})
    except (orjson.JSONDecodeError, ValueError) as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"bad HEART_BEAT body: {exc}")
    changed = broker.clients.heartbeat(doc, conn, broker.now_ms())
    created = False
    if broker.settings.auto_create_subscription_group:
        for consumer in doc.get("consumerDataSet") or []:
            group = str(consumer.get("groupName", ""))
            if group:
                _, new = broker.topics.ensure(retry_topic(group), 1)
                created = created or new
    if created:
        broker.topics_changed()
    for group in changed:
        broker.consumer_group_changed(group)
    return request.reply(ResponseCode.SUCCESS)


def check_client_config(broker: ClientRequestBroker, header: NoHeader, request: RemotingCommand,
                        conn: Connection) -> RemotingCommand:
    """CHECK_CLIENT_CONFIG: whether this broker can serve a subscription, asked by a consumer
    before it starts (RocketMQ's Java consumer does for every non-TAG subscription)."""
    try:
        doc = orjson.loads(request.body) if request.body else {}
    except orjson.JSONDecodeError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"bad CHECK_CLIENT_CONFIG body: {exc}")
    sub = doc.get("subscriptionData") if isinstance(doc, dict) else None
    if not isinstance(sub, dict):
        return request.reply(ResponseCode.SUCCESS)
    kind, expression = sub.get("expressionType"), sub.get("subString")
    if not isinstance(kind, (str, type(None))) or not isinstance(expression, (str, type(None))):
        return request.reply(ResponseCode.SYSTEM_ERROR, "expressionType and subString must be strings")
    try:
        build_filter(kind, expression, sql_enabled=broker.clients.filters.sql_enabled)
    except FilterRefused as exc:
        return request.reply(exc.code, exc.remark)
    return request.reply(ResponseCode.SUCCESS)


def unregister_client(broker: ClientRequestBroker, header: UnregisterClientHeader, request: RemotingCommand,
                      conn: Connection) -> RemotingCommand:
    changed = broker.clients.unregister(header.client_id, header.producer_group, header.consumer_group)
    for group in changed:
        broker.consumer_group_changed(group)
    return request.reply(ResponseCode.SUCCESS)


def consumer_list(broker: ClientRequestBroker, header: ConsumerGroupHeader, request: RemotingCommand,
                  conn: Connection) -> RemotingCommand:
    group = header.consumer_group
    ids = broker.clients.consumer_ids(group)
    if not ids:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))


def query_consumer_offset(broker: ClientRequestBroker, header: QueryConsumerOffsetHeader, request: RemotingCommand,
                          conn: Connection) -> RemotingCommand:
    topic, queue_id = header.topic, header.queue_id
    offset = broker.offsets.get(header.consumer_group, topic, queue_id)
    if offset is not None:
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
    # Nothing committed: a queue still holding its first message starts at 0, so a new group on
    # a fresh store sees what was sent before it started (what stock brokers answer).
    if broker.store.min_queue_offset(topic, queue_id) <= 0:
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
    return request.reply(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


def update_consumer_offset(broker: ClientRequestBroker, header: UpdateConsumerOffsetHeader, request: RemotingCommand,
                           conn: Connection) -> RemotingCommand:
    topic, queue_id = header.topic, header.queue_id
    # Each committed (group, topic, queue) is kept and written to consumerOffsets.json: only
    # queues that exist, so a client cannot grow the table without bound (RocketMQ 4.x keeps
    # whatever it is sent).
    config = broker.topics.get(topic) or broker.adopt_replicated_topic(topic)
    if config is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if not 0 <= queue_id < max(config.read_queue_nums, config.write_queue_nums):
        return request.reply(ResponseCode.SYSTEM_ERROR, f"queueId[{queue_id}] is illegal, topic {topic} has "
                             f"{max(config.read_queue_nums, config.write_queue_nums)} queues")
    broker.offsets.commit(header.consumer_group, topic, queue_id, header.commit_offset)
    return request.reply(ResponseCode.SUCCESS)


def _answer_offset(request: RemotingCommand, header: QueueHeader | SearchOffsetHeader,
                   lookup: Callable[[str, int], int]) -> RemotingCommand:
    """Reply ``{"offset": lookup(topic, queueId)}`` for the queue the header names."""
    return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(lookup(header.topic, header.queue_id))})


def max_offset(broker: ClientRequestBroker, header: QueueHeader,
               request: RemotingCommand, conn: Connection) -> RemotingCommand:
    return _answer_offset(request, header, broker.store.max_queue_offset)


def min_offset(broker: ClientRequestBroker, header: QueueHeader,
               request: RemotingCommand, conn: Connection) -> RemotingCommand:
    return _answer_offset(request, header, broker.store.min_queue_offset)


def search_offset(broker: ClientRequestBroker, header: SearchOffsetHeader, request: RemotingCommand,
                  conn: Connection) -> RemotingCommand:
    return _answer_offset(request, header, lambda topic, queue_id: broker.store.offset_by_time(
        topic, queue_id, header.timestamp))


def earliest_store_time(broker: ClientRequestBroker, header: QueueHeader, request: RemotingCommand,
                        conn: Connection) -> RemotingCommand:
    stamp = broker.store.earliest_store_time(header.topic, header.queue_id)
    if stamp is None:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"no message in {header.topic}/{header.queue_id}")
    return request.reply(ResponseCode.SUCCESS, ext_fields={"timestamp": str(stamp)})


def _lock_body(request: RemotingCommand) -> tuple[str, str, list[LockedQueue]]:
    """LockBatchRequestBody / UnlockBatchRequestBody: group, client id and queues."""
    doc = orjson.loads(request.body) if request.body else None
    if not isinstance(doc, dict) or not isinstance(doc.get("mqSet", []), list):
        raise ValueError("the body must be an object with consumerGroup, clientId and mqSet")
    queues = []
    for mq in doc.get("mqSet", []):
        if not isinstance(mq, dict):
            raise ValueError("mqSet holds objects")
        queue = LockedQueue(str(mq.get("topic", "")), str(mq.get("brokerName", "")), int(mq.get("queueId", -1)))
        if problem := topic_problem(queue.topic):
            raise ValueError(problem)
        queues.append(queue)
    group = str(doc.get("consumerGroup", ""))
    if problem := group_problem(group):
        raise ValueError(problem)
    return group, str(doc.get("clientId", "")), queues


def lock_batch(broker: ClientRequestBroker, header: NoHeader,
               request: RemotingCommand, conn: Connection) -> RemotingCommand:
    try:
        group, client_id, queues = _lock_body(request)
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"bad LOCK_BATCH_MQ body: {exc}")
    locked = broker.queue_locks.try_lock(group, client_id, queues, broker.now_ms())
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": [
        {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id} for mq in locked]}))


def unlock_batch(broker: ClientRequestBroker, header: NoHeader,
                 request: RemotingCommand, conn: Connection) -> RemotingCommand:
    try:
        group, client_id, queues = _lock_body(request)
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"bad UNLOCK_BATCH_MQ body: {exc}")
    broker.queue_locks.unlock(group, client_id, queues)
    return request.reply(ResponseCode.SUCCESS)
