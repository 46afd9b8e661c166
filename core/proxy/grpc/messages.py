"""RocketMQ 5 messages (``apache.rocketmq.v2.Message``) to and from the 4.x stored form.

On send (RocketMQ's proxy does the same mapping, so 4.x consumers read what 5.x producers
wrote and the reverse):

```
 system_properties.tag            -> TAGS                 keys -> KEYS (space-joined)
 message_id                        -> UNIQ_KEY             message_group -> __SHARDINGKEY
 message_type TRANSACTION          -> TRAN_MSG=true, sysflag prepared, PGROUP = the topic
 delivery_timestamp                -> TIMER_DELIVER_MS     trace_context -> TRACE_CONTEXT
 orphaned_transaction_recovery_duration -> CHECK_IMMUNITY_TIME_IN_SECONDS
 born_host                         -> __BORNHOST           user_properties -> as they are
```

Everything is checked where it enters, with the code RocketMQ's proxy answers (a
:class:`Refused`); a GZIP body is inflated here, bounded by the body limit, and stored as sent
by a 4.x client (4.x compression is zlib, not gzip). No text a client sends may hold a control
character (the property separators ``\x01``/``\x02`` among them): else it could plant reserved
properties such as ``UNIQ_KEY``, ``PGROUP``, ``DELAY`` or ``TIMER_DELIVER_MS``.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from core import clock
from core.topic_names import DLQ_PREFIX, RETRY_PREFIX, group_problem, send_forbidden, topic_problem
from formats import sysflag
from formats.properties import (
    DELAY,
    KEYS,
    ORIGIN_MESSAGE_ID,
    PGROUP,
    RETRY_TOPIC,
    TAGS,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    TRAN_MSG,
    UNIQ_KEY,
    message_keys,
)
from formats.record import MessageRecord
from formats.rocketmq_v2 import messaging_pb2 as pb

SHARDING_KEY = "__SHARDINGKEY"
BORN_HOST = "__BORNHOST"
TRACE_CONTEXT = "TRACE_CONTEXT"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"

BODY_SIZE_MAX = 4 * 1024 * 1024
USER_PROPERTIES_MAX = 128
PROPERTIES_BYTES_MAX = 16 * 1024
MESSAGE_GROUP_BYTES_MAX = 64
DELIVERY_AHEAD_MAX_MS = 24 * 3600 * 1000
BORN_HOST_LENGTH_MAX = 255  # a host name or an address
TRACE_CONTEXT_LENGTH_MAX = 1024  # a W3C traceparent is 55 characters
RECOVERY_SECONDS_MAX = 3600
# names the broker and the clients give meaning to: a user property may not use them
RESERVED_NAMES = frozenset({
    KEYS, TAGS, "WAIT", DELAY, RETRY_TOPIC, "REAL_TOPIC", "REAL_QID", TRAN_MSG, PGROUP, "MIN_OFFSET",
    "MAX_OFFSET", "BUYER_ID", ORIGIN_MESSAGE_ID, "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG",
    "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", UNIQ_KEY, "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "POP_CK", "1ST_POP_TIME", SHARDING_KEY, BORN_HOST, TRACE_CONTEXT, TIMER_DELIVER_MS, TIMER_DELAY_SEC,
    TIMER_DELAY_MS, TIMER_OUT_MS, "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", CHECK_IMMUNITY,
    "CLUSTER", "__STARTDELIVERTIME", "INNER_NUM", "INNER_BASE", "TRAN_PREPARED_QUEUE_OFFSET",
    "TRANSACTION_ID", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT",
    "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "MSG_TYPE",
})


class Refused(Exception):
    """A request the proxy answers with ``code`` (an ``apache.rocketmq.v2.Code``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A 5.x message in the form a broker stores."""

    topic: str
    body: bytes
    sysflag: int
    properties: dict[str, str]
    born_ms: int
    message_group: str | None
    transactional: bool


def check_topic(name: str) -> str:
    problem = topic_problem(name)
    if problem or send_forbidden(name) or name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
        raise Refused(pb.ILLEGAL_TOPIC, problem or f"topic {name!r} is a system topic")
    return name


def check_group(name: str) -> str:
    problem = group_problem(name)
    if problem or name.startswith("CID_RMQ_SYS_"):
        raise Refused(pb.ILLEGAL_CONSUMER_GROUP, problem or f"group {name!r} is a system group")
    return name


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _printable(text: str) -> bool:
    """No control character (the property separators among them); one regex scan, in C."""
    return _CONTROL.search(text) is None


def _inflate(body: bytes) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing
    try:
        out = inflater.decompress(body, BODY_SIZE_MAX + 1)
    except zlib.error as exc:
        raise Refused(pb.MESSAGE_CORRUPTED, f"the GZIP body does not inflate: {exc}") from None
    if len(out) > BODY_SIZE_MAX or inflater.unconsumed_tail:
        raise Refused(pb.MESSAGE_BODY_TOO_LARGE, f"the body inflates to more than {BODY_SIZE_MAX} bytes")
    return out


def outgoing(msg: pb.Message, peer_host: str, now_ms: int | None = None) -> Outgoing:
    """``msg`` as stored, or :class:`Refused` naming the first thing wrong with it."""
    now_ms = clock.now_ms() if now_ms is None else now_ms
    topic = check_topic(msg.topic.name)
    sp = msg.system_properties
    body = msg.body
    if sp.body_encoding == pb.GZIP:
        body = _inflate(body)
    if not body:
        raise Refused(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > BODY_SIZE_MAX:
        raise Refused(pb.MESSAGE_BODY_TOO_LARGE, f"the body has {len(body)} bytes; at most {BODY_SIZE_MAX}")
    if not sp.message_id:
        raise Refused(pb.ILLEGAL_MESSAGE_ID, "message_id is blank")
    if len(sp.message_id) > 128 or not _printable(sp.message_id) or " " in sp.message_id:
        raise Refused(pb.ILLEGAL_MESSAGE_ID, "message_id has control characters, a space or over 128 characters")
    props: dict[str, str] = {}
    if len(msg.user_properties) > USER_PROPERTIES_MAX:
        raise Refused(pb.MESSAGE_PROPERTIES_TOO_LARGE, f"{len(msg.user_properties)} user properties; at most 128")
    for key, value in msg.user_properties.items():
        if not key or key in RESERVED_NAMES or not _printable(key) or "\x01" in value or "\x02" in value:
            raise Refused(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {key[:64]!r} is reserved or not printable")
        props[key] = value
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag or not _printable(sp.tag):
            raise Refused(pb.ILLEGAL_MESSAGE_TAG, "the tag is blank or has a '|' or a control character")
        props[TAGS] = sp.tag
    if sp.keys:
        for key in sp.keys:
            if not key.strip() or not _printable(key) or " " in key:
                raise Refused(pb.ILLEGAL_MESSAGE_KEY, f"key {key[:64]!r} is blank or has a space or control character")
        props[KEYS] = " ".join(sp.keys)
    group = sp.message_group if sp.HasField("message_group") else None
    if group is not None:
        if not group.strip() or len(group.encode()) >= MESSAGE_GROUP_BYTES_MAX or not _printable(group):
            raise Refused(pb.ILLEGAL_MESSAGE_GROUP, "the message group is blank, has a control character or is "
                          f"{MESSAGE_GROUP_BYTES_MAX} bytes or more")
        props[SHARDING_KEY] = group
    if sp.HasField("delivery_timestamp"):
        due_ms = sp.delivery_timestamp.seconds * 1000 + sp.delivery_timestamp.nanos // 1_000_000
        if due_ms - now_ms > DELIVERY_AHEAD_MAX_MS:
            raise Refused(pb.ILLEGAL_DELIVERY_TIME, "the delivery timestamp is more than 24 hours ahead")
        props[TIMER_DELIVER_MS] = str(max(due_ms, 0))
    if sp.HasField("trace_context"):
        if len(sp.trace_context) > TRACE_CONTEXT_LENGTH_MAX or not _printable(sp.trace_context):
            raise Refused(pb.BAD_REQUEST, f"trace_context has a control character or over {TRACE_CONTEXT_LENGTH_MAX} "
                          "characters")
        props[TRACE_CONTEXT] = sp.trace_context
    flag = 0
    transactional = sp.message_type == pb.TRANSACTION
    if transactional:
        props[TRAN_MSG] = "true"
        flag |= sysflag.TRANSACTION_PREPARED
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = sp.orphaned_transaction_recovery_duration.seconds
            if not 0 <= seconds <= RECOVERY_SECONDS_MAX:
                raise Refused(pb.BAD_REQUEST, f"orphaned_transaction_recovery_duration over {RECOVERY_SECONDS_MAX} s")
            props[CHECK_IMMUNITY] = str(seconds)
    props[UNIQ_KEY] = sp.message_id
    props[PGROUP] = topic  # RocketMQ's proxy uses the topic as the producer group
    if len(sp.born_host) > BORN_HOST_LENGTH_MAX or not _printable(sp.born_host) or " " in sp.born_host:
        raise Refused(pb.BAD_REQUEST, f"born_host has a space, a control character or over {BORN_HOST_LENGTH_MAX} "
                      "characters")
    props[BORN_HOST] = sp.born_host or peer_host
    if sum(len(k) + len(v) for k, v in props.items()) > PROPERTIES_BYTES_MAX:
        raise Refused(pb.MESSAGE_PROPERTIES_TOO_LARGE, f"the properties take more than {PROPERTIES_BYTES_MAX} bytes")
    born_ms = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000 if sp.HasField(
        "born_timestamp") else now_ms
    return Outgoing(topic, body, flag, props, born_ms, group, transactional)


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(value: Duration) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_type(props: Mapping[str, str]) -> int:
    if props.get(TRAN_MSG) == "true":
        return pb.TRANSACTION
    if DELAY in props or TIMER_DELIVER_MS in props or TIMER_DELAY_SEC in props or TIMER_DELAY_MS in props:
        return pb.DELAY
    if SHARDING_KEY in props:
        return pb.FIFO
    return pb.NORMAL


def incoming(record: MessageRecord, topic: str, *, receipt_handle: str | None = None,
             delivery_attempt: int | None = None) -> pb.Message:
    """A stored message as a 5.x client receives it; ``topic`` is the one it was sent to (a
    redelivered message is read from a retry topic)."""
    props = record.properties
    body = record.payload()
    sp = pb.SystemProperties(
        keys=message_keys(props), message_id=props.get(UNIQ_KEY) or "",
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=pb.IDENTITY, message_type=message_type(props),
        born_timestamp=_timestamp(record.born_timestamp),
        born_host=props.get(BORN_HOST) or record.born_host[0],
        store_timestamp=_timestamp(record.store_timestamp),
        store_host=f"{record.store_host[0]}:{record.store_host[1]}",
        queue_id=record.queue_id, queue_offset=record.queue_offset,
        delivery_attempt=delivery_attempt if delivery_attempt is not None else record.reconsume_times + 1)
    if TAGS in props:
        sp.tag = props[TAGS]
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if SHARDING_KEY in props:
        sp.message_group = props[SHARDING_KEY]
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    due = props.get(TIMER_DELIVER_MS)
    if due is not None and due.isdigit():
        sp.delivery_timestamp.CopyFrom(_timestamp(int(due)))
    user = {k: v for k, v in props.items() if k not in RESERVED_NAMES}
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=sp, body=body)
