"""PULL_MESSAGE with long polling (RocketMQ's PullMessageProcessor and DefaultMessageStore
.getMessage result table)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from core.broker.clients import ClientRegistry
from core.broker.consume.consumer_filters import MATCH_ALL, FilterRefused, MessageFilter
from core.broker.consume.long_polling import PullHold
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.meters import BrokerMeters
from core.broker.tables.topics import TopicConfig, TopicTable
from core.config import BrokerSettings
from core.node_specs import MASTER_ID
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.request_headers import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND, PullHeader
from core.store.message_store import MessageStore
from formats.errors import FormatError
from formats.record import record_properties

if TYPE_CHECKING:
    from core.filter.sql92 import Selector
    from core.store.message_store import MessageStore
    from formats.consume_queue import CQEntry


class PullingBroker(Protocol):
    """What a pull needs from its broker (``Broker`` is one)."""

    clients: ClientRegistry
    hold: PullHold
    meters: BrokerMeters
    offsets: ConsumerOffsets
    settings: BrokerSettings
    store: MessageStore
    topics: TopicTable

    def adopt_replicated_topic(self, topic: str) -> TopicConfig | None: ...

    def suggested_reader(self, lag_bytes: int) -> int: ...


@dataclass(frozen=True, slots=True)
class PullOutcome:
    code: int
    next_offset: int
    min_offset: int
    max_offset: int
    body: bytes = b""
    suggest_broker_id: int = MASTER_ID  # where the consumer should pull this queue next

    def response(self, request: RemotingCommand) -> RemotingCommand:
        # every value a string: the C++ client ignores numbers and would re-pull offset 0 forever
        return request.reply(self.code, ext_fields={
            "suggestWhichBrokerId": str(self.suggest_broker_id), "nextBeginOffset": str(self.next_offset),
            "minOffset": str(self.min_offset), "maxOffset": str(self.max_offset),
        }, body=self.body)


# ConsumeQueue entries a filtered pull reads looking for matches before it answers with what it
# found (RocketMQ reads up to 16000; fewer here, as one pull holds the node's only thread)
FILTER_SCAN_ENTRIES_MAX = 1024


def handle_pull(broker: PullingBroker, header: PullHeader,
                request: RemotingCommand, conn: Connection) -> Reply:
    config = broker.topics.get(header.topic) or broker.adopt_replicated_topic(header.topic)
    if config is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
    if not config.readable:
        return request.reply(ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling is forbidden")
    if not 0 <= header.queue_id < config.read_queue_nums:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"queueId[{header.queue_id}] is illegal, topic "
                             f"{header.topic} has {config.read_queue_nums} read queues")
    if header.sys_flag & PULL_COMMIT_OFFSET and header.commit_offset >= 0:
        broker.offsets.commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
    try:
        message_filter = _message_filter(broker, header)
    except FilterRefused as exc:
        return request.reply(exc.code, exc.remark)
    outcome = pull_once(broker, header, message_filter)
    if outcome.code == ResponseCode.PULL_NOT_FOUND and header.sys_flag & PULL_SUSPEND:
        return _held(broker, request, conn, header, message_filter)
    return outcome.response(request)


def _message_filter(broker: PullingBroker, header: PullHeader) -> MessageFilter:
    """The pull's own subscription when it carries one, else the one its group's heartbeat
    registered (everything when none did, as before any heartbeat); raises FilterRefused."""
    if header.sys_flag & PULL_SUBSCRIPTION and header.subscription is not None:
        return broker.clients.filters.filter_for(header.consumer_group, header.topic, header.expression_type,
                                                 header.subscription, header.sub_version)
    sub = broker.clients.subscription(header.consumer_group, header.topic)
    if sub is None:
        return MATCH_ALL
    return broker.clients.filters.filter_for(header.consumer_group, header.topic, sub.expression_type, sub.expression,
                                             sub.version)


def pull_once(broker: PullingBroker, header: PullHeader, message_filter: MessageFilter = MATCH_ALL) -> PullOutcome:
    store = broker.store
    topic, queue_id, offset = header.topic, header.queue_id, header.queue_offset
    low = store.min_queue_offset(topic, queue_id)
    high = store.max_queue_offset(topic, queue_id)
    if high == 0:
        return PullOutcome(ResponseCode.PULL_NOT_FOUND if offset == 0 else ResponseCode.PULL_OFFSET_MOVED, 0, low, high)
    if offset < low:
        return PullOutcome(ResponseCode.PULL_OFFSET_MOVED, low, low, high)
    if offset == high:
        return PullOutcome(ResponseCode.PULL_NOT_FOUND, offset, low, high)
    if offset > high:
        return PullOutcome(ResponseCode.PULL_OFFSET_MOVED, high, low, high)
    settings = broker.settings
    count = max(1, min(header.max_msg_nums, settings.pull_batch_max))
    scan = count if message_filter.passes_all else max(count, FILTER_SCAN_ENTRIES_MAX)
    parts: list[bytes] = []
    size = 0
    next_offset = offset
    last_phys = store.commitlog.write_offset
    for index, entry, data in matching_records(store, topic, queue_id, offset, scan, message_filter):
        if parts and (len(parts) >= count or size + entry.size > settings.pull_bytes_max):
            break
        next_offset = index + 1
        if data is None:
            continue
        parts.append(data)
        size += entry.size
        last_phys = entry.phys_offset
    if parts:
        broker.meters.delivered(topic, header.consumer_group, len(parts), size)
        return PullOutcome(ResponseCode.SUCCESS, next_offset, low, high, b"".join(parts),
                           broker.suggested_reader(store.commitlog.write_offset - last_phys))
    return PullOutcome(ResponseCode.PULL_RETRY_IMMEDIATELY, next_offset, low, high)


def matching_records(store: MessageStore, topic: str, queue_id: int, offset: int, scan: int,
                     message_filter: MessageFilter) -> Iterator[tuple[int, CQEntry, bytes | None]]:
    """Up to ``scan`` entries of a queue from ``offset``: each with its record's bytes, or None
    when the filter leaves it out (or its segment was retired under us). Pulls and POPs read so."""
    codes, selector = message_filter.codes, message_filter.selector
    for index, entry in store.iter_queue_entries(topic, queue_id, offset, scan):
        if codes is not None and entry.tags_code not in codes:
            yield index, entry, None
            continue
        try:
            data = store.commitlog.read(entry.phys_offset, entry.size)
        except KeyError:
            yield index, entry, None
            continue
        yield index, entry, data if selector is None or selected_by(selector, data) else None


def selected_by(selector: Selector, record: bytes) -> bool:
    try:
        return selector.matches(record_properties(record))
    except FormatError:
        return False  # a record the store cannot read back is skipped like one that does not match


async def _held(broker: PullingBroker, request: RemotingCommand, conn: Connection, header: PullHeader,
                message_filter: MessageFilter) -> RemotingCommand:
    settings = broker.settings
    wait_ms = min(header.suspend_timeout_millis, settings.long_poll_suspend_max_ms) if settings.long_polling \
        else settings.short_polling_ms
    deadline = trio.current_time() + max(0, wait_ms) / 1000
    with broker.hold.slot(conn.attributes, settings.held_pulls_per_connection_max) as slot:
        while True:
            arrival = broker.hold.waiter(header.topic, header.queue_id)
            outcome = pull_once(broker, header, message_filter)  # again, now that the waiter is registered
            if outcome.code != ResponseCode.PULL_NOT_FOUND or trio.current_time() >= deadline:
                return outcome.response(request)
            if (full := slot.take()) is not None:
                # not PULL_NOT_FOUND, which clients answer with another pull at once: a busy
                # answer makes them wait before pulling again
                return request.reply(ResponseCode.SYSTEM_BUSY, f"[REJECTREQUEST]system busy: {full}")
            with trio.move_on_at(deadline):
                await arrival.wait()
