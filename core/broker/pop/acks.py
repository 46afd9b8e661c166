"""ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME and BATCH_ACK_MESSAGE: what a POP consumer says of
the messages it was handed (RocketMQ 5's AckMessageProcessor and ChangeInvisibleTimeProcessor).

An ack writes an ack record into the revive topic, so the revive service
(:mod:`core.broker.pop.revive`) does not put the message into the retry topic; a change of
invisible time writes a one-message checkpoint for the new time, then acks the old one.
BATCH_ACK_MESSAGE acks many messages at once: its body names, per checkpoint, a bitset of the
acked offsets. FIFO messages (revive queue 999) write nothing: the group's offset moves past the
acked prefix of the queue's batch (:mod:`core.broker.pop.order`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Protocol

import orjson

from core.broker.consume.long_polling import PullHold
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.pop.order import OrderBook
from core.broker.pop.revive import (
    REVIVE_QUEUES,
    ReviveWriter,
    ack_record,
    checkpoint_record,
    write_revive_records,
)
from core.clock import now_ms
from core.node_specs import BrokerNode
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.header_fields import HeaderFieldError
from core.remoting.pop_headers import AckHeader
from core.remoting.request_headers import NoHeader
from core.store.message_store import MessageStore
from formats.pop import (
    CHECKPOINT_MESSAGES_MAX,
    ORDER_REVIVE_QID,
    Ack,
    CheckPoint,
    PopRecordError,
    retry_topic,
)


class AckingBroker(ReviveWriter, Protocol):
    """What acks and changes of invisible time need from their broker, besides writing revive
    records (``Broker`` is one)."""

    hold: PullHold
    node: BrokerNode
    offsets: ConsumerOffsets
    pop_order: OrderBook
    store: MessageStore


def handle_batch_ack(broker: AckingBroker, header: NoHeader,
                     request: RemotingCommand, conn: Connection) -> Reply:
    """BATCH_ACK_MESSAGE: per checkpoint, the acked offsets as a bitset over (offset - start)."""
    try:
        acks = batch_acks(request.body)
    except HeaderFieldError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    return _write_batch_acks(broker, request, acks)


def batch_acks(body: bytes) -> list[tuple[int, Ack]]:
    """BatchAckMessageRequestBody as (revive queue, ack) pairs; HeaderFieldError when malformed."""
    try:
        doc = orjson.loads(body)
        broker_name = doc["brokerName"]
        entries = doc["acks"]
        if not isinstance(entries, list) or len(entries) > 1024:
            raise ValueError("acks must be a list of at most 1024 entries")
        out = []
        for entry in entries:
            bits = int.from_bytes(base64.b64decode(entry["b"], validate=True), "little")
            if bits.bit_length() > CHECKPOINT_MESSAGES_MAX:
                raise ValueError(f"an ack bitset of {bits.bit_length()} bits (a checkpoint has at most 32)")
            start = int(entry["so"])
            topic = retry_topic(entry["c"], entry["t"], int(entry["r"]))
            offsets = tuple(start + i for i in range(bits.bit_length()) if bits >> i & 1)
            if offsets:
                ack = Ack(topic=topic, group=entry["c"], queue_id=int(entry["q"]), start_offset=start,
                          pop_time_ms=int(entry["pt"]), broker_name=broker_name, offsets=offsets)
                out.append((int(entry["rq"]), Ack.from_json(ack.to_json())))  # every field checked
        return out
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, binascii.Error, PopRecordError) as exc:
        raise HeaderFieldError(f"the batch ack body: {exc}") from None


async def _write_batch_acks(broker: AckingBroker, request: RemotingCommand, acks: list[tuple[int, Ack]]) -> RemotingCommand:
    records = []
    for revive_qid, ack in acks:
        if not 0 <= revive_qid < REVIVE_QUEUES:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"revive queue {revive_qid} is not one of this broker's")
        records.append(ack_record(broker, revive_qid, ack))
    failed = await write_revive_records(broker, request, records, "acks") if records else None
    return failed or request.reply(ResponseCode.SUCCESS)


def handle_ack(broker: AckingBroker, header: AckHeader, request: RemotingCommand, conn: Connection) -> Reply:
    return _ack_or_change(broker, header, request, change=False)


def handle_change_invisible(broker: AckingBroker, header: AckHeader,
                            request: RemotingCommand, conn: Connection) -> Reply:
    return _ack_or_change(broker, header, request, change=True)


def _ack_or_change(broker: AckingBroker, header: AckHeader, request: RemotingCommand, *, change: bool) -> Reply:
    config = broker.topics.get(header.topic)
    if config is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
    if not 0 <= header.queue_id < config.read_queue_nums:
        return request.reply(ResponseCode.MESSAGE_ILLEGAL, f"queueId {header.queue_id} is not a read queue of "
                             f"{header.topic}")
    low, high = broker.store.min_queue_offset(header.topic, header.queue_id), \
        broker.store.max_queue_offset(header.topic, header.queue_id)
    if not low <= header.offset < high:
        return request.reply(ResponseCode.NO_MESSAGE, f"offset {header.offset} is not in [{low}, {high}) of "
                             f"{header.topic}/{header.queue_id}")
    if header.handle.ordered:
        return _ordered_ack(broker, request, header, change)
    return _write_ack(broker, request, header, change)


def _ordered_ack(broker: AckingBroker, request: RemotingCommand, header: AckHeader, change: bool) -> RemotingCommand:
    """A FIFO message acked (the group's offset moves past the acked prefix, waiting POPs wake)
    or given a new invisible time; nothing is written to the revive topic."""
    key = (header.group, header.topic, header.queue_id)
    if change:
        now = now_ms()
        visible_at = broker.pop_order.change_invisible(key, header.offset, now, header.invisible_time_ms)
        if visible_at is None:
            return request.reply(ResponseCode.NO_MESSAGE, f"offset {header.offset} is not out on this queue")
        return request.reply(ResponseCode.SUCCESS, ext_fields={
            "popTime": str(header.handle.pop_time_ms), "invisibleTime": str(visible_at - header.handle.pop_time_ms),
            "reviveQid": str(ORDER_REVIVE_QID)})
    committed = broker.pop_order.ack(key, header.offset)
    if committed is not None:
        broker.offsets.commit(header.group, header.topic, header.queue_id, committed)
        broker.hold.wake([(header.topic, header.queue_id)])
    return request.reply(ResponseCode.SUCCESS)


async def _write_ack(broker: AckingBroker, request: RemotingCommand, header: AckHeader, change: bool) -> RemotingCommand:
    handle = header.handle
    records = []
    reply_fields: dict[str, str] = {}
    if change:  # a one-message checkpoint for the new time, then the old one acked
        pop_time = now_ms()
        ck = CheckPoint(topic=header.topic, group=header.group, queue_id=header.queue_id,
                        start_offset=header.offset, pop_time_ms=pop_time, invisible_time_ms=header.invisible_time_ms,
                        broker_name=broker.node.name, offset_deltas=[0])
        records.append(checkpoint_record(broker, handle.revive_qid, ck))
        reply_fields = {"popTime": str(pop_time), "invisibleTime": str(header.invisible_time_ms),
                        "reviveQid": str(handle.revive_qid)}
    ack = Ack(topic=header.topic, group=header.group, queue_id=header.queue_id, start_offset=handle.ck_start_offset,
              pop_time_ms=handle.pop_time_ms, broker_name=handle.broker_name, offsets=(header.offset,))
    records.append(ack_record(broker, handle.revive_qid, ack))
    failed = await write_revive_records(broker, request, records, "ack")
    return failed or request.reply(ResponseCode.SUCCESS, ext_fields=reply_fields)
