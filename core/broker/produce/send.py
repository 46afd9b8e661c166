"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (and the C++ client's batch flag); the
broker hands each its :class:`~core.remoting.request_headers.SendHeader`."""

from __future__ import annotations

import random
import struct
from typing import Protocol

from core.addresses import split_address
from core.broker.meters import BrokerMeters
from core.broker.produce.batch_send import BATCH_DELAY_REFUSED, batch_records, record_batch
from core.broker.produce.write_path import WritePath
from core.broker.tables.topics import TopicTable
from core.broker.timers.schedule import ScheduleService
from core.broker.transactions.transaction_service import TransactionService
from core.broker.transactions.transactions import is_half
from core.broker.wire.responses import response_code
from core.node_specs import BrokerNode
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.request_headers import SendHeader
from core.topic_names import RETRY_PREFIX, SCHEDULE_TOPIC, send_refusal
from formats.compression import decompress
from formats.msgid import encode_offset_msg_id
from formats.properties import CLUSTER, DELAY, TIMER_OUT_MS, UNIQ_KEY, WAIT, decode_properties
from formats.recall import RecallHandle
from formats.record import MessageRecord
from formats.record_batch import BatchFields
from formats.sysflag import COMPRESSED, COMPRESSION_TYPE_MASK, compression_type


class SendingBroker(Protocol):
    """What a send needs from its broker (``Broker`` is one)."""

    cluster: str
    store_host: tuple[str, int]
    topics: TopicTable
    transactions: TransactionService
    schedule: ScheduleService
    writes: WritePath
    node: BrokerNode
    meters: BrokerMeters

    def topics_changed(self) -> None: ...


def handle_send(broker: SendingBroker, header: SendHeader, request: RemotingCommand, conn: Connection, *,
                batch: bool = False) -> Reply:
    # the topic's name was checked before the handler (request_names); only the broker writes
    # its system topics
    refusal = send_refusal(header.topic)
    if refusal:
        return request.reply(ResponseCode.NO_PERMISSION, refusal)
    config, created = broker.topics.for_send(header.topic, header.default_topic, header.default_topic_queue_nums)
    if config is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
    if created:
        broker.topics_changed()
    if not config.writable:
        return request.reply(ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] sending is forbidden")
    queue_id = header.queue_id
    if queue_id < 0:
        queue_id = random.randrange(config.write_queue_nums)
    if queue_id >= config.write_queue_nums:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"request queueId[{queue_id}] is illegal, "
                             f"topic {header.topic} has {config.write_queue_nums} write queues")
    born_host = _host(conn.remote)
    half: MessageRecord | None = None
    base_props = decode_properties(header.properties)
    if batch or header.batch:
        return _send_batch(broker, request, header, queue_id, born_host, _delayed(base_props))
    base_props.pop(WAIT, None)
    base_props[CLUSTER] = broker.cluster
    try:
        rec = MessageRecord(
            topic=header.topic, body=request.body, properties=base_props, queue_id=queue_id,
            flag=header.flag, sysflag=header.sys_flag, born_timestamp=header.born_timestamp,
            born_host=born_host, store_host=broker.store_host, reconsume_times=header.reconsume_times,
        )
        # a half waits in the half topic, a delayed one in the schedule topic; the reply
        # still names the queue asked for
        if is_half(rec):
            half = broker.transactions.half_of(rec)
            records = [half]
            if broker.topics.ensure(half.topic, 1)[1]:  # a system topic, readable by operators
                broker.topics_changed()
        else:
            records = [broker.schedule.hold_if_delayed(rec)]
        size_max = broker.writes.body_size_max
        if any(len(rec.body) > size_max for rec in records):
            return _too_large(request, size_max)
        results = broker.writes.put(records)
        broker.meters.sent(header.topic, len(records), len(request.body))
        if half is not None:
            broker.transactions.opened(half, results[0])
    except Exception as exc:  # store, format and size errors, mapped in one place
        code, remark = response_code(exc)
        return request.reply(code, remark)
    extra = _recall_field(broker, records[0], header.topic)
    put = results[0]
    return _answer(broker, request, queue_id, [put.phys_offset], put.queue_offset, put.phys_offset + put.size, extra)


def _send_batch(broker: SendingBroker, request: RemotingCommand, header: SendHeader, queue_id: int,
                born_host: tuple[str, int], delayed: bool) -> Reply:
    """A batch request's items stored back to back in one queue, answered once."""
    if delayed:
        return request.reply(ResponseCode.MESSAGE_ILLEGAL, BATCH_DELAY_REFUSED)
    size_max = broker.writes.body_size_max
    try:
        body, item_sysflag = _inflated_batch(request.body, header.sys_flag, size_max)
        fields = BatchFields(header.topic, queue_id, item_sysflag, header.born_timestamp, born_host,
                             broker.store_host, header.reconsume_times)
        fast = record_batch(fields, broker.cluster, body)
        if fast is not None:
            if max(map(len, fast.bodies)) > size_max:
                return _too_large(request, size_max)
            put = broker.writes.put_batch(fast)
            offsets, queue_offset, end = put.offsets, put.queue_offset, put.end
        else:  # the per-record path: it refuses, re-encodes or names what is malformed
            records = batch_records(fields, broker.cluster, body)
            if isinstance(records, str):
                return request.reply(ResponseCode.MESSAGE_ILLEGAL, records)
            if any(len(rec.body) > size_max for rec in records):
                return _too_large(request, size_max)
            results = broker.writes.put(records)
            offsets, queue_offset = [r.phys_offset for r in results], results[0].queue_offset
            end = results[-1].phys_offset + results[-1].size
        broker.meters.sent(header.topic, len(offsets), len(request.body))
    except Exception as exc:  # store, format and size errors, mapped in one place
        code, remark = response_code(exc)
        return request.reply(code, remark)
    return _answer(broker, request, queue_id, offsets, queue_offset, end, {})


def _too_large(request: RemotingCommand, size_max: int) -> RemotingCommand:
    return request.reply(ResponseCode.MESSAGE_ILLEGAL, f"the message body size over max value, MAX: {size_max}")  # as RocketMQ


def _answer(broker: SendingBroker, request: RemotingCommand, queue_id: int, offsets: list[int], queue_offset: int,
            end: int, extra: dict[str, str]) -> Reply:
    """The reply to records put at ``offsets``, now or once the waits the config asks for end."""
    if broker.writes.waits:
        return _after_waits(broker, request, queue_id, offsets, queue_offset, end, extra)
    return _sent(broker, request, queue_id, offsets, queue_offset, ResponseCode.SUCCESS, extra)


def _recall_field(broker: SendingBroker, stored: MessageRecord, topic: str) -> dict[str, str]:
    """``recallHandle`` for a timer message held for later (not for retries), as RocketMQ 5 answers."""
    if stored.topic != SCHEDULE_TOPIC:  # every plain send leaves here
        return {}
    due, uniq = stored.properties.get(TIMER_OUT_MS), stored.properties.get(UNIQ_KEY)
    if not due or not uniq or topic.startswith(RETRY_PREFIX):
        return {}
    return {"recallHandle": RecallHandle(topic, broker.node.name, int(due), uniq).text()}


async def _after_waits(broker: SendingBroker, request: RemotingCommand, queue_id: int, offsets: list[int],
                       queue_offset: int, end: int, extra: dict[str, str]) -> RemotingCommand:
    """Answer once the sync flush and the replicas (whichever apply) confirm the records."""
    code, remark = await broker.writes.confirmed_through(offsets[-1], end)
    if remark is not None:
        return request.reply(code, remark)
    return _sent(broker, request, queue_id, offsets, queue_offset, code, extra)


def _sent(broker: SendingBroker, request: RemotingCommand, queue_id: int, offsets: list[int], queue_offset: int,
          code: int, extra: dict[str, str]) -> RemotingCommand:
    host, port = broker.store_host
    if len(offsets) == 1:
        msg_ids = encode_offset_msg_id(host, port, offsets[0])
    else:  # one host prefix, then each offset as 16 hex digits (all offsets hexed at once)
        prefix = encode_offset_msg_id(host, port, 0)[:-16]
        digits = struct.pack(f">{len(offsets)}q", *offsets).hex().upper()
        msg_ids = ",".join([prefix + digits[i : i + 16] for i in range(0, len(digits), 16)])
    return request.reply(code, ext_fields={
        "msgId": msg_ids, "queueId": str(queue_id), "queueOffset": str(queue_offset), **extra,
    })


def _inflated_batch(body: bytes, sysflag: int, size_max: int) -> tuple[bytes, int]:
    """A batch body and the sysflag its items are stored with. The C++ client compresses a
    whole batch body over 4 KiB and flags the request; its items are stored inflated. A whole
    batch is one message to RocketMQ's size limit, so it may inflate to ``size_max`` at most."""
    kind = compression_type(sysflag)
    if kind is None:
        return body, sysflag
    return decompress(body, kind, size_max), sysflag & ~(COMPRESSED | COMPRESSION_TYPE_MASK)


def _delayed(props: dict[str, str]) -> bool:
    return props.get(DELAY, "0") not in ("", "0")


def _host(remote: str) -> tuple[str, int]:
    try:
        host, port = split_address(remote)
    except ValueError:
        return "127.0.0.1", 0
    return host or "127.0.0.1", port
