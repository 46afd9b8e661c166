"""POP_MESSAGE and NOTIFICATION: RocketMQ 5's POP consumption over remoting (PopMessageProcessor,
NotificationProcessor); what consumers then say of the messages is :mod:`core.broker.pop.acks`.

A POP hands out up to 32 messages of a queue (or of every read queue), commits the group's
offset past them at once, and writes a checkpoint into the broker's revive topic saying which
messages went out and until when they stay invisible. An ack writes an ack record there; the
revive service (:mod:`core.broker.pop.revive`) later puts every message of a due checkpoint that
was not acked into the group's POP retry topic, with one more delivery attempt. Checkpoints and
acks are ordinary records of the CommitLog, so they are flushed, replicated and recovered like
messages; the answer waits for them as a send would.

NOTIFICATION says whether a POP would find something, long-polling like a POP.

FIFO POPs (``order``) write no checkpoint: the queue stays blocked for the group while its last
batch is out (:mod:`core.broker.pop.order`), the same ``attemptId`` gets the same batch again, an
ack moves the committed offset past the acked prefix, and a batch that becomes visible again
un-acked is handed out once more with its count raised (``orderCountInfo``).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Protocol

import trio

from core.broker.clients import ClientRegistry
from core.broker.consume.consumer_filters import MATCH_ALL, FilterRefused, MessageFilter
from core.broker.consume.long_polling import ANY_QUEUE, HeldSlot, PullHold
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.consume.pull import FILTER_SCAN_ENTRIES_MAX, matching_records
from core.broker.meters import BrokerMeters
from core.broker.pop.order import OrderBook, Turn
from core.broker.pop.revive import REVIVE_QUEUES, ReviveWriter, checkpoint_record, write_revive_records
from core.broker.replication import Replication
from core.clock import now_ms
from core.config import BrokerSettings
from core.node_specs import BrokerNode
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.pop_headers import (
    INIT_MAX,
    POLL_TIME_MAX_MS,
    POP_MESSAGES_MAX,
    NotificationHeader,
    PopHeader,
)
from core.store.message_store import MessageStore
from formats.pop import ORDER_REVIVE_QID, RETRY_NORMAL, RETRY_V1, CheckPoint, retry_topic

RETRY_FIRST_PERCENT = 20  # RocketMQ's popFromRetryProbability


class PoppingBroker(ReviveWriter, Protocol):
    """What POP and NOTIFICATION need from their broker, besides writing revive records
    (``Broker`` is one)."""

    clients: ClientRegistry
    cold_read_lag_bytes: int
    hold: PullHold
    meters: BrokerMeters
    node: BrokerNode
    offsets: ConsumerOffsets
    pop_order: OrderBook
    pop_revive_turns: itertools.count[int]
    replication: Replication
    settings: BrokerSettings
    store: MessageStore


@dataclass(slots=True)
class Popped:
    """What one POP found: the records, and per queue its checkpoint and new offset."""

    parts: list[bytes] = field(default_factory=list)
    checkpoints: list[tuple[int, CheckPoint]] = field(default_factory=list)  # (retry flag, checkpoint)
    ordered: list[tuple[int, list[int], dict[int, int]]] = field(default_factory=list)  # FIFO: (queue, offsets, counts)
    commits: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, queue, next offset)
    rest: int = 0


def handle_pop(broker: PoppingBroker, header: PopHeader, request: RemotingCommand, conn: Connection) -> Reply:
    if header.max_msg_nums > POP_MESSAGES_MAX or header.max_msg_nums < 1:
        return request.reply(ResponseCode.INVALID_PARAMETER, f"maxMsgNums {header.max_msg_nums} is not in [1, 32]")
    config = broker.topics.get(header.topic)
    if config is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
    if not config.readable or not broker.replication.writable:
        return request.reply(ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] is not readable here "
                             "(POP needs the group's master)")
    if header.queue_id >= config.read_queue_nums:
        return request.reply(ResponseCode.INVALID_PARAMETER, f"queueId {header.queue_id} is not below "
                             f"{config.read_queue_nums}, the topic's read queues")
    try:
        message_filter = broker.clients.filters.filter_for(header.group, header.topic, header.expression_type,
                                                           header.expression)
    except FilterRefused as exc:
        return request.reply(exc.code, exc.remark)
    queues = [header.queue_id] if header.queue_id >= 0 else list(range(config.read_queue_nums))
    return _pop(broker, request, conn, header, message_filter, queues)


def _slot(broker: PoppingBroker, conn: Connection) -> HeldSlot:
    return broker.hold.slot(conn.attributes, broker.settings.held_pulls_per_connection_max)


async def _pop(broker: PoppingBroker, request: RemotingCommand, conn: Connection, header: PopHeader,
               message_filter: MessageFilter, queues: list[int]) -> RemotingCommand:
    poll_s = min(max(header.poll_time_ms, 0), POLL_TIME_MAX_MS) / 1000
    deadline = trio.current_time() + poll_s
    with _slot(broker, conn) as slot:
        while True:
            arrival = broker.hold.waiter(header.topic, header.queue_id if header.queue_id >= 0 else ANY_QUEUE)
            popped = pop_once(broker, header, message_filter, queues)
            if popped.parts:
                answer = await _answer(broker, request, header, popped)
                if answer.code == ResponseCode.SUCCESS:
                    broker.meters.delivered(header.topic, header.group, len(popped.parts), sum(map(len, popped.parts)))
                return answer
            if trio.current_time() >= deadline:
                return request.reply(ResponseCode.POLLING_TIMEOUT, "no new message")
            if (full := slot.take()) is not None:
                return request.reply(ResponseCode.POLLING_FULL, full)
            with trio.move_on_at(deadline):
                await arrival.wait()


def pop_once(broker: PoppingBroker, header: PopHeader, message_filter: MessageFilter, queues: list[int]) -> Popped:
    """Read what one POP hands out; nothing is written yet."""
    popped = Popped()
    if header.order:  # FIFO: no retry topic, no checkpoint; one batch out per queue at a time
        for queue_id in queues:
            if len(popped.parts) < header.max_msg_nums:
                _pop_ordered(broker, header, message_filter, queue_id, popped)
        return popped
    retry = retry_topic(header.group, header.topic, RETRY_V1)
    sources = [(header.topic, q, RETRY_NORMAL) for q in _rotated(queues)]
    if broker.topics.get(retry) is not None:  # a retry topic has one queue; it is read with MATCH_ALL
        first = random.randrange(100) < RETRY_FIRST_PERCENT
        sources = [(retry, 0, RETRY_V1), *sources] if first else [*sources, (retry, 0, RETRY_V1)]
    for topic, queue_id, flag in sources:
        wanted = header.max_msg_nums - len(popped.parts)
        if wanted <= 0:
            popped.rest += max(0, broker.store.max_queue_offset(topic, queue_id) - _start(broker, header, topic, queue_id))
            continue
        _pop_queue(broker, header, message_filter if flag == RETRY_NORMAL else None, topic, queue_id, flag,
                   wanted, popped)
    return popped


def _pop_ordered(broker: PoppingBroker, header: PopHeader, message_filter: MessageFilter, queue_id: int,
                 popped: Popped) -> None:
    key = (header.group, header.topic, queue_id)
    now = now_ms()
    turn, batch = broker.pop_order.turn(key, now, header.attempt_id)
    if turn is Turn.BLOCKED:
        return
    if turn is Turn.NEW:
        found = Popped()
        _pop_queue(broker, header, message_filter, header.topic, queue_id, RETRY_NORMAL,
                   header.max_msg_nums - len(popped.parts), found)
        popped.rest += found.rest
        offsets = found.checkpoints[0][1].offsets if found.checkpoints else []
        if not offsets:
            popped.commits += found.commits  # read past what the filter left out
            return
        next_offset = found.commits[0][2]
        batch = broker.pop_order.hand_out(key, offsets, next_offset, now, header.invisible_time_ms, header.attempt_id)
        popped.parts += found.parts
    else:
        assert batch is not None
        if turn is Turn.AGAIN:
            batch = broker.pop_order.hand_out(key, batch.pending(), batch.next_offset, now,
                                              header.invisible_time_ms, header.attempt_id)
        for offset in batch.pending():
            found_entries = broker.store.queue_entries(header.topic, queue_id, offset, 1)
            if found_entries and found_entries[0][0] == offset:
                entry = found_entries[0][1]
                popped.parts.append(broker.store.commitlog.read(entry.phys_offset, entry.size))
    popped.ordered.append((queue_id, batch.pending(), batch.counts))


def _rotated(queues: list[int]) -> list[int]:
    if len(queues) < 2:
        return queues
    first = random.randrange(len(queues))
    return queues[first:] + queues[:first]


def _start(broker: PoppingBroker, header: PopHeader, topic: str, queue_id: int) -> int:
    """Where the group reads ``topic``/``queue_id`` next (initMode when it never did)."""
    committed = broker.offsets.get(header.group, topic, queue_id)
    store = broker.store
    low = store.min_queue_offset(topic, queue_id)
    if committed is not None:
        return max(committed, low)
    if (header.init_mode == INIT_MAX and not topic.startswith("%RETRY%")
            and not _whole_queue_in_memory(broker, topic, queue_id)):
        return max(low, store.max_queue_offset(topic, queue_id) - 1)
    return low


def _whole_queue_in_memory(broker: PoppingBroker, topic: str, queue_id: int) -> bool:
    """RocketMQ's exception to initMode MAX: a queue that still has its first message, near
    enough to the log's end to be read from memory, is read from the start (a new group of a
    new topic gets the messages sent before it came)."""
    store = broker.store
    if store.min_queue_offset(topic, queue_id) != 0:
        return False
    first = store.queue_entries(topic, queue_id, 0, 1)
    return bool(first) and store.commitlog.write_offset - first[0][1].phys_offset <= broker.cold_read_lag_bytes


def _pop_queue(broker: PoppingBroker, header: PopHeader, message_filter: MessageFilter | None, topic: str, queue_id: int,
               flag: int, wanted: int, popped: Popped) -> None:
    store = broker.store
    start = _start(broker, header, topic, queue_id)
    high = store.max_queue_offset(topic, queue_id)
    if start >= high:
        return
    offsets: list[int] = []
    next_offset = start
    scan = max(wanted, FILTER_SCAN_ENTRIES_MAX // 4)
    for index, _, data in matching_records(store, topic, queue_id, start, scan, message_filter or MATCH_ALL):
        if len(offsets) >= wanted:
            break
        next_offset = index + 1
        if data is None:
            continue
        popped.parts.append(data)
        offsets.append(index)
    popped.commits.append((topic, queue_id, next_offset))
    popped.rest += max(0, high - next_offset)
    if offsets:
        popped.checkpoints.append((flag, CheckPoint(
            topic=topic, group=header.group, queue_id=queue_id, start_offset=start, pop_time_ms=0,
            invisible_time_ms=header.invisible_time_ms, broker_name=broker.node.name,
            offset_deltas=[o - start for o in offsets])))


async def _answer(broker: PoppingBroker, request: RemotingCommand, header: PopHeader, popped: Popped) -> RemotingCommand:
    pop_time = now_ms()
    if header.order:
        return _answer_ordered(broker, request, header, popped, pop_time)
    revive_qid = next(broker.pop_revive_turns) % REVIVE_QUEUES
    records = []
    for _, ck in popped.checkpoints:
        ck.pop_time_ms = pop_time
        records.append(checkpoint_record(broker, revive_qid, ck))
    failed = await write_revive_records(broker, request, records, "checkpoint")
    if failed is not None:
        return failed
    for topic, queue_id, next_offset in popped.commits:  # offsets move at pop time, as RocketMQ's
        broker.offsets.commit(header.group, topic, queue_id, next_offset)
    start_info = ";".join(f"{flag} {ck.queue_id} {ck.start_offset}" for flag, ck in popped.checkpoints)
    msg_info = ";".join(f"{flag} {ck.queue_id} {','.join(map(str, ck.offsets))}" for flag, ck in popped.checkpoints)
    return request.reply(ResponseCode.SUCCESS, "FOUND", ext_fields={
        "popTime": str(pop_time), "invisibleTime": str(header.invisible_time_ms), "reviveQid": str(revive_qid),
        "restNum": str(popped.rest), "startOffsetInfo": start_info, "msgOffsetInfo": msg_info,
    }, body=b"".join(popped.parts))


def _answer_ordered(broker: PoppingBroker, request: RemotingCommand, header: PopHeader, popped: Popped,
                    pop_time: int) -> RemotingCommand:
    for topic, queue_id, next_offset in popped.commits:  # only queues whose messages were all filtered out
        broker.offsets.commit(header.group, topic, queue_id, next_offset)
    start_info = ";".join(f"0 {q} {offsets[0]}" for q, offsets, _ in popped.ordered)
    msg_info = ";".join(f"0 {q} {','.join(map(str, offsets))}" for q, offsets, _ in popped.ordered)
    counts = []
    for q, offsets, seen in popped.ordered:
        counts += [f"0 qo{q}%{o} {seen.get(o, 1) - 1}" for o in offsets]
        counts.append(f"0 {q} {min(seen.get(o, 1) for o in offsets) - 1}")
    return request.reply(ResponseCode.SUCCESS, "FOUND", ext_fields={
        "popTime": str(pop_time), "invisibleTime": str(header.invisible_time_ms), "reviveQid": str(ORDER_REVIVE_QID),
        "restNum": str(popped.rest), "startOffsetInfo": start_info, "msgOffsetInfo": msg_info,
        "orderCountInfo": ";".join(counts)}, body=b"".join(popped.parts))


def handle_notification(broker: PoppingBroker, asked: NotificationHeader, request: RemotingCommand,
                        conn: Connection) -> Reply:
    """NOTIFICATION: hasMsg at once when a POP would find a message, else after a long poll."""
    header = asked.as_pop()
    config = broker.topics.get(header.topic)
    if config is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
    if header.queue_id >= config.read_queue_nums:
        return request.reply(ResponseCode.INVALID_PARAMETER, f"queueId {header.queue_id} is not a read queue")
    queues = [header.queue_id] if header.queue_id >= 0 else list(range(config.read_queue_nums))
    return _notify(broker, request, conn, header, queues)


async def _notify(broker: PoppingBroker, request: RemotingCommand, conn: Connection, header: PopHeader,
                  queues: list[int]) -> RemotingCommand:
    deadline = trio.current_time() + min(max(header.poll_time_ms, 0), POLL_TIME_MAX_MS) / 1000
    retry = retry_topic(header.group, header.topic, RETRY_V1)
    with _slot(broker, conn) as slot:
        while True:
            arrival = broker.hold.waiter(header.topic, header.queue_id if header.queue_id >= 0 else ANY_QUEUE)
            sources = [(header.topic, q) for q in queues] + ([(retry, 0)] if broker.topics.get(retry) else [])
            has = any(_start(broker, header, t, q) < broker.store.max_queue_offset(t, q) for t, q in sources)
            if has or trio.current_time() >= deadline:
                return request.reply(ResponseCode.SUCCESS, ext_fields={"hasMsg": str(has).lower(), "pollingFull": "false"})
            if (full := slot.take()) is not None:
                return request.reply(ResponseCode.SUCCESS, full, ext_fields={"hasMsg": "false", "pollingFull": "true"})
            with trio.move_on_at(deadline):
                await arrival.wait()
