"""Operator requests: UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG, GET_BROKER_RUNTIME_INFO,
VIEW_MESSAGE_BY_ID, mqctl's TRANSFER_LEADERSHIP, and the subscription groups'
(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with a SubscriptionGroupConfig body,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG, DELETE_SUBSCRIPTIONGROUP with ``groupName``)."""

from __future__ import annotations

from typing import Protocol

import orjson

from core.acl.permissions import SUB
from core.acl.requests import Resource
from core.broker.clients import ClientRegistry
from core.broker.consume.long_polling import PullHold
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.replication import Replication
from core.broker.tables.subscription_groups import BODY_BYTES_MAX as GROUP_BODY_BYTES_MAX
from core.broker.tables.subscription_groups import GroupConfigError, SubscriptionGroup, SubscriptionGroupTable
from core.broker.tables.topics import (
    AUTO_CREATE_TOPIC,
    TopicConfig,
    TopicTable,
    queue_nums_problem,
    topic_problem,
)
from core.config import BrokerSettings, ReplicationMode
from core.node_specs import BrokerNode
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.request_headers import (
    UNCHANGED,
    AllTopicConfigHeader,
    CreateTopicHeader,
    DeleteSubscriptionGroupHeader,
    NoHeader,
    TransferLeadershipHeader,
    ViewMessageHeader,
)
from core.store.message_store import MessageStore
from core.topic_names import group_problem, send_forbidden
from formats.errors import RecordError


class AdminBroker(Protocol):
    """What the operator requests need from their broker (``Broker`` is one)."""

    address: str
    clients: ClientRegistry
    groups: SubscriptionGroupTable
    hold: PullHold
    master_addr: str | None
    node: BrokerNode
    offsets: ConsumerOffsets
    pid: int
    replication: Replication
    replication_mode: ReplicationMode
    settings: BrokerSettings
    store: MessageStore
    topics: TopicTable

    def acl_refusal(self, request: RemotingCommand, conn: Connection, resources: list[Resource]) -> str | None: ...

    def topics_changed(self) -> None: ...


def update_and_create_topic(broker: AdminBroker, header: CreateTopicHeader, request: RemotingCommand,
                            conn: Connection) -> RemotingCommand:
    topic = header.topic
    problem = topic_problem(topic)
    if problem:
        return request.reply(ResponseCode.SYSTEM_ERROR, problem)
    if topic == AUTO_CREATE_TOPIC or send_forbidden(topic):
        return request.reply(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    read = header.read_queue_nums if header.read_queue_nums is not None else broker.settings.default_topic_queue_nums
    write = header.write_queue_nums if header.write_queue_nums is not None else read
    problem = queue_nums_problem(read, write, header.perm)
    if problem:
        return request.reply(ResponseCode.SYSTEM_ERROR, problem)
    if broker.topics.put(TopicConfig(topic, read, write, header.perm, header.topic_sys_flag, header.order)):
        broker.topics_changed()
    return request.reply(ResponseCode.SUCCESS)


def all_topic_config(broker: AdminBroker, header: AllTopicConfigHeader, request: RemotingCommand,
                     conn: Connection) -> RemotingCommand:
    """The whole topic table; to a slave that names the data version it holds (our own
    ``knownDataVersion`` field; stock callers never send it), only ``unchanged`` when that is
    this table's: a slave asks every 10 s, and 20,000 topics are 3 MB to encode and parse."""
    if header.known_data_version == broker.topics.version_tag():
        return request.reply(ResponseCode.SUCCESS, ext_fields={UNCHANGED: "true"})
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps(broker.topics.wrapper()))


def all_consumer_offsets(broker: AdminBroker, header: NoHeader, request: RemotingCommand,
                         conn: Connection) -> RemotingCommand:
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps(broker.offsets.to_json()))


def runtime_info(broker: AdminBroker, header: NoHeader,
                 request: RemotingCommand, conn: Connection) -> RemotingCommand:
    store = broker.store
    table = {
        "brokerVersionDesc": "mqctl", "brokerName": broker.node.name, "brokerId": str(broker.replication.broker_id),
        "brokerAddr": broker.address, "commitLogMinOffset": str(store.log_start),
        "commitLogMaxOffset": str(store.log_end),
        "commitLogFlushedOffset": str(store.commitlog.flushed_offset),
        "putMessageTimesTotal": str(store.stats.appended), "topicCount": str(len(broker.topics.topics)),
        "consumerGroupCount": str(len(broker.clients.consumers)), "heldPulls": str(broker.hold.parked),
        "flushMode": store.config.flush, "replicationMode": broker.replication_mode,
        "pid": str(broker.pid),
        "masterAddr": broker.master_addr or "",
        **broker.replication.runtime_info(),
    }
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps({"table": table}))


def transfer_leadership(broker: AdminBroker, header: TransferLeadershipHeader, request: RemotingCommand,
                        conn: Connection) -> RemotingCommand:
    target = header.target
    why = broker.replication.transfer_leadership(target)
    if why is not None:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"cannot transfer leadership to {target!r}: {why}")
    return request.reply(ResponseCode.SUCCESS, f"leadership of {broker.node.name} goes to {target}")


def view_message(broker: AdminBroker, header: ViewMessageHeader, request: RemotingCommand,
                 conn: Connection) -> RemotingCommand:
    offset = header.offset
    try:
        rec = broker.store.read_record(offset)
        if rec.phys_offset != offset:  # bytes inside a record (e.g. a body) that look like one
            raise KeyError(offset)
    except (KeyError, RecordError):  # before ValueError: a RecordError is one too
        return request.reply(ResponseCode.SYSTEM_ERROR, f"no message at commitlog offset {offset}")
    except ValueError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    refused = broker.acl_refusal(request, conn, [(rec.topic, SUB)])  # the offset named no topic
    if refused is not None:
        return request.reply(ResponseCode.NO_PERMISSION, refused)
    return request.reply(ResponseCode.SUCCESS, body=broker.store.commitlog.read(offset, rec.total_size))


def update_and_create_subscription_group(broker: AdminBroker, header: NoHeader, request: RemotingCommand,
                                         conn: Connection) -> RemotingCommand:
    body = request.body or b""
    if len(body) > GROUP_BODY_BYTES_MAX:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"a subscription group config over {GROUP_BODY_BYTES_MAX} bytes")
    try:
        broker.groups.put(SubscriptionGroup.from_json(orjson.loads(body)))
    except (orjson.JSONDecodeError, GroupConfigError) as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"subscription group config: {exc}")
    return request.reply(ResponseCode.SUCCESS)


def all_subscription_groups(broker: AdminBroker, header: NoHeader, request: RemotingCommand,
                            conn: Connection) -> RemotingCommand:
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps(broker.groups.wrapper()))


def delete_subscription_group(broker: AdminBroker, header: DeleteSubscriptionGroupHeader, request: RemotingCommand,
                              conn: Connection) -> RemotingCommand:
    name = header.group_name
    if group_problem(name):
        return request.reply(ResponseCode.SYSTEM_ERROR, f"groupName: {group_problem(name)}")
    broker.groups.delete(name)
    return request.reply(ResponseCode.SUCCESS)
