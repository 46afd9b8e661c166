"""PULL_MESSAGE with long polling (RocketMQ's PullMessageProcessor and DefaultMessageStore
.getMessage result table)."""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from core.broker.headers import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND, PullHeader
from core.config import MASTER_ID
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from formats.tags import subscription_codes

if TYPE_CHECKING:
    from core.broker.broker import Broker


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


HELD_PULLS = "held_pulls"  # the connection attribute counting its pulls held now


class HeldCount:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class HeldPull:
    """A held pull, counted against its connection from the moment it is handed back (the
    connection may start many before the first runs) until it answers or is cancelled."""

    def __init__(self, held: HeldCount, pull: Coroutine[Any, Any, RemotingCommand]) -> None:
        self._held, self._pull = held, pull
        held.count += 1

    def __await__(self) -> Generator[Any, Any, RemotingCommand]:
        try:
            return (yield from self._pull.__await__())
        finally:
            self._held.count -= 1


def handle_pull(broker: Broker, request: RemotingCommand, conn: Connection) -> Reply:
    try:
        header = PullHeader.of(request)
    except ValueError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    config = broker.topics.get(header.topic) or broker.adopt_replicated_topic(header.topic)
    if config is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
    if not config.readable:
        return request.reply(ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling is forbidden")
    if not 0 <= header.queue_id < config.read_queue_nums:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"queueId[{header.queue_id}] is illegal, topic "
                             f"{header.topic} has {config.read_queue_nums} read queues")
    if header.sysflag & PULL_COMMIT_OFFSET and header.commit_offset >= 0:
        broker.offsets.commit(header.group, header.topic, header.queue_id, header.commit_offset)
    if header.sysflag & PULL_SUBSCRIPTION and header.subscription is not None:
        codes = subscription_codes(header.subscription)
    else:
        sub = broker.clients.subscription(header.group, header.topic)
        codes = sub.codes if sub is not None else None
    outcome = pull_once(broker, header, codes)
    if outcome.code == ResponseCode.PULL_NOT_FOUND and header.sysflag & PULL_SUSPEND \
            and broker.hold.parked < broker.hold.parked_max:
        held = conn.attributes.setdefault(HELD_PULLS, HeldCount())
        assert isinstance(held, HeldCount)
        if held.count >= broker.settings.held_pulls_per_connection_max:
            # not PULL_NOT_FOUND, which clients answer with another pull at once: a busy answer
            # makes them wait before pulling again
            return request.reply(ResponseCode.SYSTEM_BUSY, f"[REJECTREQUEST]system busy: {held.count} pulls of "
                                 f"this connection held (broker.held_pulls_per_connection_max)")
        return HeldPull(held, _held(broker, request, header, codes))
    return outcome.response(request)


def pull_once(broker: Broker, header: PullHeader, codes: set[int] | None) -> PullOutcome:
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
    parts: list[bytes] = []
    size = 0
    next_offset = offset
    last_phys = store.commitlog.write_offset
    for index, entry in store.queue_entries(topic, queue_id, offset, count):
        if parts and size + entry.size > settings.pull_bytes_max:
            break
        next_offset = index + 1
        if codes is not None and entry.tags_code not in codes:
            continue
        try:
            data = store.commitlog.read(entry.phys_offset, entry.size)
        except KeyError:
            continue  # its segment was retired under us
        parts.append(data)
        size += entry.size
        last_phys = entry.phys_offset
    if parts:
        return PullOutcome(ResponseCode.SUCCESS, next_offset, low, high, b"".join(parts),
                           broker.suggested_reader(store.commitlog.write_offset - last_phys))
    return PullOutcome(ResponseCode.PULL_RETRY_IMMEDIATELY, next_offset, low, high)


async def _held(broker: Broker, request: RemotingCommand, header: PullHeader,
                codes: set[int] | None) -> RemotingCommand:
    settings = broker.settings
    wait_ms = min(header.suspend_timeout_ms, settings.long_poll_suspend_max_ms) if settings.long_polling \
        else settings.short_polling_ms
    deadline = trio.current_time() + max(0, wait_ms) / 1000
    broker.hold.parked += 1
    try:
        while True:
            arrival = broker.hold.waiter(header.topic, header.queue_id)
            outcome = pull_once(broker, header, codes)  # again, now that the waiter is registered
            if outcome.code != ResponseCode.PULL_NOT_FOUND or trio.current_time() >= deadline:
                return outcome.response(request)
            with trio.move_on_at(deadline):
                await arrival.wait()
    finally:
        broker.hold.parked -= 1
