"""The revive service of POP consumption (RocketMQ's PopReviveService): on the group's master,
every second, read each revive queue on from its committed progress, feed the ledger
(:mod:`core.broker.pop.ledger`), and put every message of a due checkpoint that nobody acked
into the group's POP retry topic with one more delivery attempt, then commit the progress.

The progress is an ordinary consumer offset (group ``CID_RMQ_SYS_REVIVE_GROUP``): a restarted
broker, or a new raft leader, reads on from it, so an un-acked message is revived even if its
broker went down in between (at worst twice: delivery is at least once).

When a broker becomes writable (it starts as a master, or wins a raft election), every group's
POP offsets are first raised to the end of each checkpoint stored after the revive progress
(:func:`recover_pop_offsets`), and POP requests wait until that is done (:func:`when_pop_ready`).
Offsets move at pop time and are saved only now and then (RocketMQ's consumerOffset.json, a
follower's periodic copy), while every checkpoint is in the replicated log before its messages
are handed out: so a broker killed without saving, or a new raft leader, does not hand out again
from the topic what was already handed out (RocketMQ does, with the delivery attempt back at 1).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import trio

from core.broker.consume.offsets import ConsumerOffsets
from core.broker.meters import BrokerMeters
from core.broker.pop.ledger import ReviveLedger
from core.broker.produce.write_path import WritePath
from core.broker.replication import Replication
from core.broker.tables.topics import TopicTable
from core.broker.wire.responses import response_code
from core.clock import now_ms
from core.errors import StoreError
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.store.message_store import MessageStore
from formats.errors import FormatError
from formats.pop import RETRY_V1, Ack, CheckPoint, retry_topic
from formats.properties import TAGS, UNIQ_KEY
from formats.record import MessageRecord

log = logging.getLogger(__name__)

REVIVE_QUEUES = 8  # RocketMQ's reviveQueueNum
POP_READY_WAIT_S = 5.0  # how long a POP waits for a new master's offsets to be recovered
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
REVIVE_INTERVAL_S = 1.0
READ_BATCH = 512  # revive-queue entries read per queue and round
RECOVERY_SCAN_MAX = 200_000  # revive-queue entries read per queue to recover offsets
FIRST_POP_TIME = "1ST_POP_TIME"


class ReviveWriter(Protocol):
    """What writing checkpoints and acks into the revive topic needs from the broker (POP and
    acks write them too; ``Broker`` is one)."""

    cluster: str
    store_host: tuple[str, int]
    topics: TopicTable
    writes: WritePath

    def topics_changed(self) -> None: ...


class RevivingBroker(Protocol):
    """What the revive loop and the recovery of POP offsets need from the broker (``Broker`` is one)."""

    cluster: str
    meters: BrokerMeters
    offsets: ConsumerOffsets
    pop_ledgers: dict[int, ReviveLedger]
    pop_ready: trio.Event
    store: MessageStore
    store_host: tuple[str, int]
    topics: TopicTable
    writes: WritePath

    def topics_changed(self) -> None: ...


class PopGate(Protocol):
    """What holding POP requests until the offsets are recovered needs from the broker."""

    pop_ready: trio.Event
    replication: Replication


Gated = TypeVar("Gated", bound=PopGate)
# a POP handler, typed by the broker it takes: when_pop_ready hands it the same one
GatedHandler = Callable[[Gated, Any, RemotingCommand, Connection], Reply]



def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def _revive_record(broker: ReviveWriter, revive_qid: int, tag: str, body: bytes, uniq_key: str) -> MessageRecord:
    """A record of the revive topic (created on first use, one queue per revive queue id)."""
    topic = revive_topic(broker.cluster)
    if broker.topics.ensure(topic, REVIVE_QUEUES)[1]:
        broker.topics_changed()
    return MessageRecord(topic=topic, body=body, properties={TAGS: tag, UNIQ_KEY: uniq_key}, queue_id=revive_qid,
                         born_timestamp=now_ms(), born_host=broker.store_host, store_host=broker.store_host)


def checkpoint_record(broker: ReviveWriter, revive_qid: int, ck: CheckPoint) -> MessageRecord:
    return _revive_record(broker, revive_qid, "ck", ck.to_json(), f"{ck.topic}@{ck.queue_id}@{ck.start_offset}@"
                          f"{ck.group}@{ck.pop_time_ms}@{ck.broker_name}@ck")


def ack_record(broker: ReviveWriter, revive_qid: int, ack: Ack) -> MessageRecord:
    return _revive_record(broker, revive_qid, ack.tag, ack.to_json(), f"{ack.topic}@{ack.queue_id}@{ack.offsets[0]}@"
                          f"{ack.group}@{ack.pop_time_ms}@{ack.broker_name}@{ack.tag}")


async def write_revive_records(broker: ReviveWriter, request: RemotingCommand, records: list[MessageRecord],
                               what: str) -> RemotingCommand | None:
    """Store checkpoints or acks and wait for the flush and replicas as a send would; None when
    done, else the error answer (nothing was handed out or acked)."""
    groups: dict[tuple[str, int], list[MessageRecord]] = {}  # a put takes one queue's records
    for record in records:
        groups.setdefault((record.topic, record.queue_id), []).append(record)
    try:
        results = [result for group in groups.values() for result in broker.writes.put(group)]
    except Exception as exc:
        return request.reply(*response_code(exc))
    if broker.writes.waits:
        code, remark = await broker.writes.confirmed(results)
        if code != ResponseCode.SUCCESS:
            return request.reply(code, remark or f"the {what} was stored but not confirmed as asked")
    return None


def recover_pop_offsets(broker: RevivingBroker) -> int:
    """Raise POP offsets to the end of every checkpoint after the revive progress; returns how
    many offsets moved."""
    store = broker.store
    topic = revive_topic(broker.cluster)
    moved = 0
    for qid in range(REVIVE_QUEUES):
        start = broker.offsets.get(REVIVE_GROUP, topic, qid) or 0
        end = min(store.max_queue_offset(topic, qid), start + RECOVERY_SCAN_MAX)
        if end - start == RECOVERY_SCAN_MAX:
            log.warning("revive queue %d: recovering POP offsets from %d entries only", qid, RECOVERY_SCAN_MAX)
        for _, entry in store.iter_queue_entries(topic, qid, start, end - start):
            try:
                rec = store.read_record(entry.phys_offset)
                if rec.properties.get(TAGS) != "ck":
                    continue
                ck = CheckPoint.from_json(rec.body)
            except (KeyError, FormatError):
                continue
            if not ck.offset_deltas:
                continue
            after = ck.start_offset + max(ck.offset_deltas) + 1
            if after > (broker.offsets.get(ck.group, ck.topic, ck.queue_id) or 0):
                broker.offsets.commit(ck.group, ck.topic, ck.queue_id, after)
                moved += 1
    return moved


def make_pop_ready(broker: RevivingBroker) -> None:
    """A broker that just became writable: raise the POP offsets from the stored checkpoints,
    then let POP requests in. On the trio thread, before anything else runs: it commits offsets,
    and the checkpoints since the revive progress are few."""
    try:
        moved = recover_pop_offsets(broker)
    except StoreError as exc:
        log.warning("recovering POP offsets from the checkpoints failed: %s", exc)
    else:
        if moved:
            log.info("POP offsets of %d queues raised to their stored checkpoints", moved)
    broker.pop_ready.set()


def when_pop_ready(handler: GatedHandler[Gated]) -> GatedHandler[Gated]:
    """``handler`` for a POP request, run once a writable broker's POP offsets are recovered (at
    most :data:`POP_READY_WAIT_S` later: then SYSTEM_BUSY). A read-only broker answers at once."""
    def handle(broker: Gated, header: object, request: RemotingCommand, conn: Connection) -> Reply:
        if broker.pop_ready.is_set() or not broker.replication.writable:
            return handler(broker, header, request, conn)
        return _when_ready(handler, broker, header, request, conn)
    return handle


async def _when_ready(handler: GatedHandler[Gated], broker: Gated, header: object, request: RemotingCommand,
                      conn: Connection) -> RemotingCommand | None:
    with trio.move_on_after(POP_READY_WAIT_S):
        while broker.replication.writable and not broker.pop_ready.is_set():
            await broker.pop_ready.wait()  # set when ready, or when the role changes again
    if broker.replication.writable and not broker.pop_ready.is_set():
        return request.reply(ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST] POP offsets are still being recovered")
    reply = handler(broker, header, request, conn)
    return await reply if inspect.isawaitable(reply) else reply


async def revive_loop(broker: RevivingBroker) -> None:
    """Run while this broker is writable (the caller cancels it when the role changes)."""
    topic = revive_topic(broker.cluster)
    ledgers = broker.pop_ledgers  # the metrics read what is in flight from them
    ledgers.clear()  # a new term of leading reads every revive queue again
    while True:
        for qid in range(REVIVE_QUEUES):
            ledger = ledgers.get(qid)
            if ledger is None:
                ledger = ledgers[qid] = ReviveLedger()
                ledger.read_to = (broker.offsets.get(REVIVE_GROUP, topic, qid) or 0) - 1
            await revive_queue(broker, topic, qid, ledger)
        await trio.sleep(REVIVE_INTERVAL_S)


async def revive_queue(broker: RevivingBroker, topic: str, qid: int, ledger: ReviveLedger) -> int:
    """One round on one revive queue; returns how many messages went to retry topics."""
    store = broker.store
    if store.max_queue_offset(topic, qid) <= ledger.read_to + 1:
        entries = []
    else:
        entries = store.queue_entries(topic, qid, ledger.read_to + 1, READ_BATCH)
    for index, entry in entries:
        try:
            rec = store.read_record(entry.phys_offset)
            tag = rec.properties.get(TAGS)
            if tag == "ck":
                ledger.feed_checkpoint(index, CheckPoint.from_json(rec.body))
            elif tag in ("ack", "bAck"):
                ledger.feed_ack(index, Ack.from_json(rec.body))
            else:
                ledger.skip(index)
        except (KeyError, FormatError) as exc:  # an unreadable record is read past, and said so
            log.warning("revive queue %d offset %d skipped: %s", qid, index, exc)
            ledger.skip(index)
    revived = 0
    for ck in ledger.due(now_ms()):
        try:
            revived += await _revive(broker, ck)
        except StoreError as exc:  # tried again next round; the progress stays before it
            log.warning("reviving %s/%d from offset %d failed: %s", ck.topic, ck.queue_id, ck.start_offset, exc)
            ledger.put_back(ck)
    committed = ledger.committable() + 1
    if committed > (broker.offsets.get(REVIVE_GROUP, topic, qid) or 0):
        broker.offsets.commit(REVIVE_GROUP, topic, qid, committed)
    return revived


async def _revive(broker: RevivingBroker, ck: CheckPoint) -> int:
    """Put the un-acked messages of ``ck`` into the POP retry topic; how many."""
    store = broker.store
    target = ck.topic if ck.topic.startswith("%RETRY%") else retry_topic(ck.group, ck.topic, RETRY_V1)
    copies = []
    for offset in ck.unacked_offsets():
        found = store.queue_entries(ck.topic, ck.queue_id, offset, 1)
        if not found or found[0][0] != offset:
            continue  # retired by retention meanwhile
        try:
            rec = store.read_record(found[0][1].phys_offset)
        except (KeyError, FormatError):
            continue
        props = dict(rec.properties)
        props.setdefault(FIRST_POP_TIME, str(ck.pop_time_ms))
        copies.append(dataclasses.replace(
            rec, topic=target, queue_id=0, properties=props, properties_text=None,
            reconsume_times=rec.reconsume_times + 1, born_host=broker.store_host, store_host=broker.store_host))
    if not copies:
        return 0
    if broker.topics.ensure(target, 1)[1]:
        broker.topics_changed()
    results = broker.writes.put(copies)
    if broker.writes.waits:
        await broker.writes.confirmed(results)
    broker.meters.pop_revived.row((ck.group, ck.topic))[0] += len(copies)
    return len(copies)
