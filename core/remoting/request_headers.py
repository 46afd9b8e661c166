"""One declared header type per request code a broker serves (RocketMQ's CommandCustomHeader
classes: SendMessageRequestHeader, PullMessageRequestHeader, ...): :data:`HEADER_TYPES`.

The broker parses a request's header once, with its code's type, and hands the result to the
handler; the ACL (:mod:`core.acl.requests`) judges the same attributes, so a rule checks
exactly what the handler acts on. Attributes are RocketMQ's field names in snake case
(``consumerGroup`` -> ``consumer_group``), read as :mod:`core.remoting.header_fields` declares;
the POP family's (:mod:`core.remoting.pop_headers`) keep the names the proxy's gRPC door builds
them with (``group``, ``*_ms``).
SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE name SEND_MESSAGE's fields by letters (:data:`V2_NAMES`).
A code whose handler reads no header field has :class:`NoHeader` (its names, if any, are in
the body).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Self

from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.header_fields import (
    HeaderFieldError,
    RequestHeader,
    as_bool,
    as_int,
    boolean,
    number,
    text,
    wire_names,
)
from core.remoting.pop_headers import AckHeader, NotificationHeader, PopHeader

# SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE short names -> SEND_MESSAGE names
V2_NAMES = MappingProxyType({
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
    "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
    "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName",
})
_SHORT_NAMES = MappingProxyType({long: short for short, long in V2_NAMES.items()})
V2_CODES = frozenset({RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})

# GET_ALL_TOPIC_CONFIG between our slave and master: the data version the slave holds, and the
# master's answer when that is its own (no body). Stock callers send neither.
KNOWN_DATA_VERSION = "knownDataVersion"
UNCHANGED = "unchanged"

# PULL sysFlag bits
PULL_COMMIT_OFFSET = 1
PULL_SUSPEND = 2
PULL_SUBSCRIPTION = 4


@dataclass(frozen=True, slots=True)
class NoHeader(RequestHeader):
    """A request whose handler reads no header field."""


# ---------------------------------------------------------------------------- produce


@dataclass(frozen=True, slots=True)
class SendHeader(RequestHeader):
    """SendMessageRequestHeader (SEND_MESSAGE) and SendMessageRequestHeaderV2 (SEND_MESSAGE_V2,
    SEND_BATCH_MESSAGE: the same fields by letters). Read by hand: every send parses it."""

    producer_group: str = text("producerGroup", "")
    topic: str = text("topic")
    default_topic: str = text("defaultTopic", "TBW102")
    default_topic_queue_nums: int = number("defaultTopicQueueNums", 4, bits=32)
    queue_id: int = number("queueId", -1, bits=32)
    sys_flag: int = number("sysFlag", 0, bits=32)
    born_timestamp: int = number("bornTimestamp", 0)
    flag: int = number("flag", 0, bits=32)
    properties: str = text("properties", "")
    reconsume_times: int = number("reconsumeTimes", 0, bits=32)
    batch: bool = boolean("batch")
    max_reconsume_times: int | None = number("maxReconsumeTimes", None, bits=32)

    @classmethod
    def of(cls, request: RemotingCommand) -> Self:
        ext = request.ext_fields
        if request.code in V2_CODES:
            ext = {V2_NAMES.get(k, k): v for k, v in ext.items()}
        topic = ext.get("topic")
        if not topic:
            raise HeaderFieldError("the request lacks the field topic")
        max_reconsume = ext.get("maxReconsumeTimes")
        return cls(
            producer_group=ext.get("producerGroup") or "",
            topic=topic,
            default_topic=ext.get("defaultTopic") or "TBW102",
            default_topic_queue_nums=as_int(ext, "defaultTopicQueueNums", 4, bits=32),
            queue_id=as_int(ext, "queueId", -1, bits=32),
            sys_flag=as_int(ext, "sysFlag", 0, bits=32),
            born_timestamp=as_int(ext, "bornTimestamp", 0),
            flag=as_int(ext, "flag", 0, bits=32),
            properties=ext.get("properties") or "",
            reconsume_times=as_int(ext, "reconsumeTimes", 0, bits=32),
            batch=as_bool(ext, "batch"),
            max_reconsume_times=as_int(ext, "maxReconsumeTimes", bits=32) if max_reconsume else None,
        )


@dataclass(frozen=True, slots=True)
class EndTransactionHeader(RequestHeader):
    """EndTransactionRequestHeader: the half by its queue offset in the half topic and its
    CommitLog offset, and the decision (0 unknown, 8 commit, 12 rollback)."""

    producer_group: str = text("producerGroup")
    tran_state_table_offset: int = number("tranStateTableOffset")
    commit_log_offset: int = number("commitLogOffset")
    commit_or_rollback: int = number("commitOrRollback", bits=32)


@dataclass(frozen=True, slots=True)
class RecallMessageHeader(RequestHeader):
    """RecallMessageRequestHeader."""

    topic: str = text("topic")
    recall_handle: str = text("recallHandle", "")


# ---------------------------------------------------------------------------- consume


@dataclass(frozen=True, slots=True)
class PullHeader(RequestHeader):
    """PullMessageRequestHeader. Read by hand: every pull parses it."""

    consumer_group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = number("queueId", bits=32)
    queue_offset: int = number("queueOffset")
    max_msg_nums: int = number("maxMsgNums", 32, bits=32)
    sys_flag: int = number("sysFlag", 0, bits=32)
    commit_offset: int = number("commitOffset", -1)
    suspend_timeout_millis: int = number("suspendTimeoutMillis", 15_000)
    subscription: str | None = text("subscription", None)
    expression_type: str | None = text("expressionType", None)
    sub_version: int = number("subVersion", 0)

    @classmethod
    def of(cls, request: RemotingCommand) -> Self:
        ext = request.ext_fields
        group, topic = ext.get("consumerGroup"), ext.get("topic")
        if not topic or not group:
            raise HeaderFieldError("PULL_MESSAGE needs topic and consumerGroup")
        return cls(
            consumer_group=group, topic=topic, queue_id=as_int(ext, "queueId", bits=32),
            queue_offset=as_int(ext, "queueOffset"), max_msg_nums=as_int(ext, "maxMsgNums", 32, bits=32),
            sys_flag=as_int(ext, "sysFlag", 0, bits=32), commit_offset=as_int(ext, "commitOffset", -1),
            suspend_timeout_millis=as_int(ext, "suspendTimeoutMillis", 15_000),
            subscription=ext.get("subscription"), expression_type=ext.get("expressionType"),
            sub_version=max(0, as_int(ext, "subVersion", 0)),
        )


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackHeader(RequestHeader):
    """ConsumerSendMsgBackRequestHeader: the message by its CommitLog offset, the group whose
    retry topic (or DLQ) it goes to."""

    offset: int = number("offset")
    group: str = text("group")
    delay_level: int = number("delayLevel", 0, bits=32)
    max_reconsume_times: int | None = number("maxReconsumeTimes", None, bits=32)


# ---------------------------------------------------------------------------- offsets and queries


@dataclass(frozen=True, slots=True)
class QueueHeader(RequestHeader):
    """GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
    GetEarliestMsgStoretimeRequestHeader: one queue of a topic."""

    topic: str = text("topic")
    queue_id: int = number("queueId", bits=32)


@dataclass(frozen=True, slots=True)
class SearchOffsetHeader(RequestHeader):
    """SearchOffsetRequestHeader: the first offset of a queue stored at or after ``timestamp``."""

    topic: str = text("topic")
    queue_id: int = number("queueId", bits=32)
    timestamp: int = number("timestamp")


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetHeader(RequestHeader):
    """QueryConsumerOffsetRequestHeader."""

    consumer_group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = number("queueId", bits=32)


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetHeader(RequestHeader):
    """UpdateConsumerOffsetRequestHeader."""

    consumer_group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = number("queueId", bits=32)
    commit_offset: int = number("commitOffset")


@dataclass(frozen=True, slots=True)
class QueryMessageHeader(RequestHeader):
    """QueryMessageRequestHeader; ``_UNIQUE_KEY_QUERY`` is set by Java clients looking a
    UNIQ_KEY up."""

    topic: str = text("topic")
    key: str = text("key")
    max_num: int = number("maxNum", bits=32)
    begin_timestamp: int = number("beginTimestamp")
    end_timestamp: int = number("endTimestamp")
    unique_key_query: bool = boolean("_UNIQUE_KEY_QUERY")


@dataclass(frozen=True, slots=True)
class ViewMessageHeader(RequestHeader):
    """ViewMessageRequestHeader: a message by its CommitLog offset."""

    offset: int = number("offset")


# ---------------------------------------------------------------------------- clients and groups


@dataclass(frozen=True, slots=True)
class UnregisterClientHeader(RequestHeader):
    """UnregisterClientRequestHeader."""

    client_id: str = text("clientID", "")
    producer_group: str | None = text("producerGroup", None)
    consumer_group: str | None = text("consumerGroup", None)


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeader(RequestHeader):
    """GetConsumerListByGroupRequestHeader, GetConsumerConnectionListRequestHeader: a group."""

    consumer_group: str = text("consumerGroup")


@dataclass(frozen=True, slots=True)
class ConsumeStatsHeader(RequestHeader):
    """GetConsumeStatsRequestHeader: a group, on one topic or on every topic it reads."""

    consumer_group: str = text("consumerGroup")
    topic: str | None = text("topic", None)


@dataclass(frozen=True, slots=True)
class ConsumerRunningInfoHeader(RequestHeader):
    """GetConsumerRunningInfoRequestHeader (relayed to the client it names)."""

    consumer_group: str = text("consumerGroup")
    client_id: str = text("clientId")
    jstack_enable: bool = boolean("jstackEnable")


@dataclass(frozen=True, slots=True)
class ResetOffsetHeader(RequestHeader):
    """ResetOffsetRequestHeader (INVOKE_BROKER_TO_RESET_OFFSET)."""

    topic: str = text("topic")
    group: str = text("group")
    timestamp: int = number("timestamp")
    is_force: bool = boolean("isForce")


# ---------------------------------------------------------------------------- operators


@dataclass(frozen=True, slots=True)
class CreateTopicHeader(RequestHeader):
    """CreateTopicRequestHeader; queue counts default to the broker's (``None`` here)."""

    topic: str = text("topic")
    read_queue_nums: int | None = number("readQueueNums", None, bits=32)
    write_queue_nums: int | None = number("writeQueueNums", None, bits=32)
    perm: int = number("perm", 6, bits=32)
    topic_sys_flag: int = number("topicSysFlag", 0, bits=32)
    order: bool = boolean("order")


@dataclass(frozen=True, slots=True)
class AllTopicConfigHeader(RequestHeader):
    """GET_ALL_TOPIC_CONFIG: RocketMQ's has no field; our slaves send the version they hold."""

    known_data_version: str | None = text(KNOWN_DATA_VERSION, None)


@dataclass(frozen=True, slots=True)
class DeleteSubscriptionGroupHeader(RequestHeader):
    """DeleteSubscriptionGroupRequestHeader."""

    group_name: str = text("groupName")


@dataclass(frozen=True, slots=True)
class TransferLeadershipHeader(RequestHeader):
    """mqctl's TRANSFER_LEADERSHIP: the node to hand the group's leadership to."""

    target: str = text("target")


HEADER_TYPES: Mapping[int, type[RequestHeader]] = MappingProxyType({
    RequestCode.SEND_MESSAGE: SendHeader,
    RequestCode.SEND_MESSAGE_V2: SendHeader,
    RequestCode.SEND_BATCH_MESSAGE: SendHeader,
    RequestCode.END_TRANSACTION: EndTransactionHeader,
    RequestCode.RECALL_MESSAGE: RecallMessageHeader,
    RequestCode.PULL_MESSAGE: PullHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackHeader,
    RequestCode.POP_MESSAGE: PopHeader,
    RequestCode.ACK_MESSAGE: AckHeader,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: AckHeader,
    RequestCode.NOTIFICATION: NotificationHeader,
    RequestCode.BATCH_ACK_MESSAGE: NoHeader,
    RequestCode.GET_MAX_OFFSET: QueueHeader,
    RequestCode.GET_MIN_OFFSET: QueueHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: QueueHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageHeader,
    RequestCode.HEART_BEAT: NoHeader,
    RequestCode.CHECK_CLIENT_CONFIG: NoHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: ConsumerGroupHeader,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: ConsumerGroupHeader,
    RequestCode.LOCK_BATCH_MQ: NoHeader,
    RequestCode.UNLOCK_BATCH_MQ: NoHeader,
    RequestCode.QUERY_ASSIGNMENT: NoHeader,
    RequestCode.SET_MESSAGE_REQUEST_MODE: NoHeader,
    RequestCode.GET_CONSUME_STATS: ConsumeStatsHeader,
    RequestCode.GET_CONSUMER_RUNNING_INFO: ConsumerRunningInfoHeader,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicHeader,
    RequestCode.GET_ALL_TOPIC_CONFIG: AllTopicConfigHeader,
    RequestCode.GET_ALL_CONSUMER_OFFSET: NoHeader,
    RequestCode.GET_BROKER_RUNTIME_INFO: NoHeader,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: NoHeader,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: NoHeader,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupHeader,
    RequestCode.TRANSFER_LEADERSHIP: TransferLeadershipHeader,
})


def wire_name(code: int, attribute: str) -> str:
    """The ext field request ``code`` carries header attribute ``attribute`` in (a V2 send's
    letter for its SEND_MESSAGE name)."""
    name = wire_names(HEADER_TYPES[code])[attribute]
    return _SHORT_NAMES.get(name, name) if code in V2_CODES else name
