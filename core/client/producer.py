"""The producer: queue selection, retries within one timeout, TBW102 fallback for unknown
topics, batches, and zstd compression of large bodies with RocketMQ 5's sysflag bits."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import trio

from core.client.fault import FaultRow, FaultSettings
from core.client.route import MessageQueue, TopicRoute
from core.client.runtime import ClientError, ClientRuntime
from core.client.selection import QueueSelector, RoundRobinSelector
from core.client.send_attempts import SEND_STATUS, SendAttempts, Verdict
from core.clock import now_ms
from core.errors import RemotingError
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.topic_names import AUTO_CREATE_TOPIC, topic_problem
from formats.batch import BatchItem, encode_batch
from formats.compression import compress
from formats.msgid import UniqKeyGenerator
from formats.properties import DELAY, KEYS, TAGS, UNIQ_KEY, WAIT, encode_properties
from formats.sysflag import CompressionType, with_compression

log = logging.getLogger(__name__)

DEFAULT_TOPIC_QUEUE_NUMS = 4
# Auto-batching: messages a batch request holds at most. Measured with 1 KiB bodies and 256
# sends in flight (docs/benchmarks.md): 128 a batch gives ~20% more than 32, as the cost of a
# request (tasks, header, syscalls, reply) is shared by more messages.
BATCH_MESSAGES_MAX = 128

@dataclass(slots=True)
class Message:
    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0


class SendResult(NamedTuple):
    status: str
    msg_id: str  # the UNIQ_KEY
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int


MessageQueueSelector = Callable[[list[MessageQueue], "Message", Any], MessageQueue]


def select_by_hash(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """The selector most orderly producers want: the same ``arg`` (an order id, a user id)
    always picks the same queue (RocketMQ's SelectMessageQueueByHash, with a hash that does not
    change between processes for str and bytes keys)."""
    key = arg.encode() if isinstance(arg, str) else arg
    digest = zlib.crc32(key) if isinstance(key, bytes) else hash(key)
    return queues[digest % len(queues)]


def send_request(group: str, topic: str, queue_id: int, body: bytes, sysflag: int, flag: int,
                 props: dict[str, str], *, born_ms: int | None = None, batch: bool = False) -> RemotingCommand:
    """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) with its short header names, as stock clients send it."""
    born_ms = now_ms() if born_ms is None else born_ms
    ext = {"a": group, "b": topic, "c": AUTO_CREATE_TOPIC, "d": str(DEFAULT_TOPIC_QUEUE_NUMS),
           "e": str(queue_id), "f": str(sysflag), "g": str(born_ms), "h": str(flag),
           "i": encode_properties(props), "j": "0", "k": "false", "m": "true" if batch else "false"}
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code=code, ext_fields=ext, body=body)


class SendError(ClientError):
    """Every attempt failed; names each broker tried and why."""


class _Waiter:
    """A sender waiting for its batch: rescheduled directly (an Event per message cost more
    than the message's share of the batch request)."""

    __slots__ = ("task", "result")

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
        self.result: SendResult | Exception | None = None

    def done(self, result: SendResult | Exception) -> None:
        if self.result is None:
            self.result = result
        if self.task is not None:
            trio.lowlevel.reschedule(self.task)
            self.task = None


class _Callback:
    """A ``send_async`` waiting for its batch: the callback runs once, on the event loop."""

    __slots__ = ("on_done",)

    def __init__(self, on_done: Callable[[SendResult | Exception], None]) -> None:
        self.on_done: Callable[[SendResult | Exception], None] | None = on_done

    def done(self, result: SendResult | Exception) -> None:
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            try:
                on_done(result)
            except Exception:  # the caller's bug must not cost the rest of the batch its answers
                log.exception("a send_async callback failed")


class _Accumulator:
    """Auto-batching for one topic (RocketMQ 5's autoBatch, without a linger delay): sends
    queue up while earlier batches are in flight, and go out together as one batch request."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.queued: list[tuple[BatchItem, str, _Waiter | _Callback]] = []
        self.queued_bytes = 0
        self.inflight = 0
        self.launch_pending = False
        self.requests = 0  # batch requests sent, and the messages they held
        self.batched = 0

    def enqueue(self, item: BatchItem, uniq: str, waiter: _Waiter | _Callback) -> None:
        self.queued.append((item, uniq, waiter))
        self.queued_bytes += len(item.body)
        if not self.launch_pending and self.inflight < self.producer.batch_inflight_max:
            # launch after this scheduler round, so every sender woken together joins the batch
            self.launch_pending = True
            self.producer.runtime.nursery.start_soon(self._launch_soon)

    async def send(self, item: BatchItem, uniq: str) -> SendResult:
        waiter = _Waiter()
        self.enqueue(item, uniq, waiter)

        def abort(_: object) -> trio.lowlevel.Abort:
            waiter.task = None  # cancelled: a queued message is dropped, a sent one's result ignored
            self.queued = [entry for entry in self.queued if entry[2] is not waiter]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        assert waiter.result is not None
        if isinstance(waiter.result, Exception):
            raise waiter.result
        return waiter.result

    async def _launch_soon(self) -> None:
        await trio.lowlevel.cancel_shielded_checkpoint()
        self.launch_pending = False
        while self.queued and self.inflight < self.producer.batch_inflight_max:
            self._launch()

    def _launch(self) -> None:
        take, size = 0, 0
        for item, _, _ in self.queued:
            if take and (take >= self.producer.batch_messages_max or size + len(item.body) > self.producer.batch_bytes_max):
                break
            take += 1
            size += len(item.body)
        batch, self.queued = self.queued[:take], self.queued[take:]
        self.queued_bytes -= size
        self.inflight += 1
        self.requests += 1
        self.batched += take
        self.producer.runtime.nursery.start_soon(self._send_batch, batch)

    async def _send_batch(self, batch: list[tuple[BatchItem, str, _Waiter | _Callback]]) -> None:
        try:
            producer = self.producer
            retries = producer.retries if any(isinstance(b[2], _Waiter) for b in batch) else producer.retries_async
            result = await producer._send(self.topic, encode_batch([b[0] for b in batch]), 0, 0,
                                          {WAIT: "true"}, batch=True, retries=retries)
            ids = result.offset_msg_id.split(",")
            for i, (_, uniq, waiter) in enumerate(batch):
                waiter.done(SendResult(result.status, uniq, ids[i] if i < len(ids) else "", result.queue,
                                       result.queue_offset + i))
        except (ClientError, RemotingError) as exc:
            for _, _, waiter in batch:
                waiter.done(exc)
        finally:
            self.inflight -= 1
            for _, _, waiter in batch:
                waiter.done(SendError("the batch was abandoned"))  # no-op for those already answered
            if self.queued and self.inflight < self.producer.batch_inflight_max and not self.launch_pending:
                self.launch_pending = True
                self.producer.runtime.nursery.start_soon(self._launch_soon)


class Producer:
    """RocketMQ's DefaultMQProducer. ``retries`` and ``retries_async`` are its
    retryTimesWhenSendFailed and retryTimesWhenSendAsyncFailed (extra attempts, each on another
    broker when there is one, all within ``timeout_s``); ``retry_another_broker_when_not_store_ok``
    retries answers stored but not flushed or replicated as asked; ``latency_fault`` is
    sendLatencyFaultEnable. ``selector`` replaces the queue selection (the ``selection``
    plugin's, see :func:`core.hookspecs.mq_queue_selector`)."""

    def __init__(self, runtime: ClientRuntime, group: str, *, retries: int = 2, retries_async: int = 2,
                 timeout_s: float = 3.0, retry_another_broker_when_not_store_ok: bool = False,
                 latency_fault: bool = False, selector: QueueSelector | None = None,
                 compress_over_bytes: int = 4096, compression: CompressionType | None = CompressionType.ZSTD,
                 auto_batch: bool = False, batch_messages_max: int = BATCH_MESSAGES_MAX, batch_bytes_max: int = 512 * 1024,
                 batch_inflight_max: int = 8) -> None:
        self.runtime = runtime
        self.selector: QueueSelector = selector or RoundRobinSelector(FaultSettings(enabled=latency_fault))
        self._route_changes_seen = runtime.route_changes  # no listener: nothing keeps a dropped producer alive
        self.auto_batch = auto_batch
        self.batch_messages_max = batch_messages_max
        self.batch_bytes_max = batch_bytes_max
        self.batch_inflight_max = batch_inflight_max
        self._accumulators: dict[str, _Accumulator] = {}
        self.group = group
        self.retries = retries
        self.retries_async = retries_async
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.timeout_s = timeout_s
        self.compress_over_bytes = compress_over_bytes
        self.compression = compression
        self._ids = UniqKeyGenerator(runtime.local_ip)
        runtime.producer_groups.add(group)

    # ------------------------------------------------------------------ API

    async def send(self, msg: Message) -> SendResult:
        """Send and wait for the broker's answer (retrying on another queue on failure).

        With ``auto_batch``, concurrent sends to a topic share batch requests; delayed and
        compressed messages still go one by one."""
        body, sysflag = self._body(msg.body)
        if self.auto_batch and not sysflag and msg.delay_level <= 0:
            props = self._properties(msg, in_batch=True)
            return await self._accumulator(msg.topic).send(BatchItem(body, props, msg.flag), props[UNIQ_KEY])
        return await self._send_alone(msg, body, sysflag, self.retries)

    async def _send_alone(self, msg: Message, body: bytes, sysflag: int, retries: int) -> SendResult:
        return await self._send(msg.topic, body, sysflag, msg.flag, self._properties(msg), batch=False, retries=retries)

    def send_async(self, msg: Message, on_done: Callable[[SendResult | Exception], None]) -> None:
        """Send in the background; ``on_done`` gets the result or the exception, on the event
        loop. With ``auto_batch`` the message joins the topic's next batch without a task of
        its own (a task per message cost a third of a batched send)."""
        body, sysflag = self._body(msg.body)
        if self.auto_batch and not sysflag and msg.delay_level <= 0:
            props = self._properties(msg, in_batch=True)
            self._accumulator(msg.topic).enqueue(BatchItem(body, props, msg.flag), props[UNIQ_KEY],
                                                 _Callback(on_done))
            return

        async def run() -> None:
            try:
                result: SendResult | Exception = await self._send_alone(msg, body, sysflag, self.retries_async)
            except (ClientError, RemotingError) as exc:
                result = exc
            on_done(result)

        self.runtime.nursery.start_soon(run)

    async def send_orderly(self, msg: Message, selector: MessageQueueSelector, arg: Any = None) -> SendResult:
        """Send to the queue ``selector(queues, msg, arg)`` picks from the topic's writable
        queues (RocketMQ's MessageQueueSelector): messages that pick the same queue are stored,
        and consumed by an orderly consumer, in the order they were sent. Retries stay on that
        queue; there is no other queue to go to without breaking the order."""
        route, _ = await self._route(msg.topic)
        queues = list(route.write_queues)
        if not queues:
            raise SendError(f"No route info of this topic: {msg.topic}")
        queue = selector(queues, msg, arg)
        if queue not in queues:
            raise ClientError(f"the selector chose {queue}, which is not a writable queue of {msg.topic}")
        body, sysflag = self._body(msg.body)
        return await self._send(msg.topic, body, sysflag, msg.flag, self._properties(msg), batch=False, queue=queue)

    async def send_marked(self, msg: Message, properties: dict[str, str], sysflag: int) -> SendResult:
        """Send ``msg`` alone (never batched) with extra ``properties`` and ``sysflag`` bits:
        how a transaction half goes out."""
        body, body_flag = self._body(msg.body)
        props = {**self._properties(msg), **properties}
        return await self._send(msg.topic, body, body_flag | sysflag, msg.flag, props, batch=False)

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer."""
        body, sysflag = self._body(msg.body)
        route, default = await self._route(msg.topic)
        queue = self.selector.select(msg.topic, route.write_queues, None, trio.current_time())
        addr = route.master(queue.broker_name)
        if addr is None:
            raise SendError(f"broker {queue.broker_name} has no master")
        cmd = self._command(msg.topic, queue, body, sysflag, msg.flag, self._properties(msg), default, batch=False)
        await self.runtime.oneway(addr, cmd)

    async def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Send messages of one topic as one batch (one request, one queue)."""
        if not msgs:
            raise ClientError("empty batch")
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise ClientError("a batch holds messages of one topic")
        items = [BatchItem(m.body, self._properties(m, in_batch=True), m.flag) for m in msgs]
        return await self._send(topic, encode_batch(items), 0, 0, {WAIT: "true"}, batch=True)

    def batch_statistics(self) -> tuple[int, int]:
        """Auto-batching so far: batch requests sent, and the messages they held."""
        accs = self._accumulators.values()
        return sum(a.requests for a in accs), sum(a.batched for a in accs)

    # ------------------------------------------------------------------ internals

    def _accumulator(self, topic: str) -> _Accumulator:
        acc = self._accumulators.get(topic)
        if acc is None:
            acc = self._accumulators[topic] = _Accumulator(self, topic)
        return acc

    def _body(self, body: bytes) -> tuple[bytes, int]:
        if self.compression is not None and len(body) >= self.compress_over_bytes:
            return compress(body, self.compression), with_compression(0, self.compression)
        return body, 0

    def _properties(self, msg: Message, *, in_batch: bool = False) -> dict[str, str]:
        """The message's properties as sent. Batch items go without WAIT: the batch request
        carries it, and items without it are stored as they arrive (no re-encoding)."""
        props = dict(msg.properties)
        if msg.tags:
            props[TAGS] = msg.tags
        if msg.keys:
            props[KEYS] = " ".join(msg.keys)
        if msg.delay_level > 0:
            props[DELAY] = str(msg.delay_level)
        if in_batch:
            props.pop(WAIT, None)
        else:
            props.setdefault(WAIT, "true")
        props[UNIQ_KEY] = self._ids.next(now_ms())
        return props

    async def _route(self, topic: str) -> tuple[TopicRoute, bool]:
        problem = topic_problem(topic)
        if problem:  # refused here, as stock clients do, rather than by every broker in turn
            raise SendError(problem)
        route = await self.runtime.route(topic)
        if route is not None and not route.write_queues:
            # a cached route with nothing to write to (its masters were gone) is asked for again
            # on every send, as RocketMQ's tryToFindTopicPublishInfo does, not kept until the
            # periodic refresh: a master that registers again is written to at once
            route = await self.runtime.route(topic, refresh=True)
        if route is not None and route.write_queues:
            return route, False
        default = await self.runtime.route(AUTO_CREATE_TOPIC)
        if default is None or not default.write_queues:
            raise SendError(f"No route info of this topic: {topic} (and no {AUTO_CREATE_TOPIC} to auto-create it)")
        queues = tuple(MessageQueue(topic, q.broker_name, q.queue_id) for q in default.write_queues
                       if q.queue_id < DEFAULT_TOPIC_QUEUE_NUMS)
        return TopicRoute(topic, default.brokers, queues, queues), True

    def _command(self, topic: str, queue: MessageQueue, body: bytes, sysflag: int, flag: int,
                 props: dict[str, str], default: bool, *, batch: bool) -> RemotingCommand:
        return send_request(self.group, topic, queue.queue_id, body, sysflag, flag, props, batch=batch)

    async def _send(self, topic: str, body: bytes, sysflag: int, flag: int, props: dict[str, str], *,
                    batch: bool, queue: MessageQueue | None = None, retries: int | None = None) -> SendResult:
        """Send with retries within the timeout: on another broker's queue, or on ``queue``
        alone when one is given. Every attempt's latency goes to the selector."""
        attempts = SendAttempts(topic, self.retries if retries is None else retries, self.timeout_s,
                                trio.current_time(), retry_not_store_ok=self.retry_another_broker_when_not_store_ok)
        kept: SendResult | None = None
        while (left := attempts.next_attempt(trio.current_time())) is not None:
            started = trio.current_time()
            with trio.move_on_after(left) as scope:  # the route lookup spends from the timeout too
                route, default = await self._route(topic)
            if scope.cancelled_caught:
                attempts.note("no route within the send timeout")
                continue
            self._forget_brokers_gone()
            target = queue or self.selector.select(topic, route.write_queues, attempts.last_broker, started)
            broker = target.broker_name
            addr = route.master(broker)
            if addr is None:  # e.g. between a raft leader's death and its successor's registration
                attempts.failed(broker, "no master in the route")
                self.runtime.forget_route(topic)
                continue
            cmd = self._command(topic, target, body, sysflag, flag, props, default, batch=batch)
            try:
                resp = await self.runtime.invoke(addr, cmd, max(0.001, attempts.deadline - trio.current_time()))
            except RemotingError as exc:
                self._attempt_done(broker, started, failed=True)
                attempts.failed(broker, f"{exc} ({addr})")
                self.runtime.forget_route(topic)  # refreshed at once: the broker may have left
                continue
            result = SendResult(SEND_STATUS.get(resp.code, ""), props.get(UNIQ_KEY, ""), resp.ext_fields.get("msgId", ""),
                                MessageQueue(topic, broker, int(resp.ext_fields.get("queueId", target.queue_id))),
                                int(resp.ext_fields.get("queueOffset", -1)))
            verdict = attempts.answered(broker, addr, resp.code, resp.remark)
            self._attempt_done(broker, started, failed=attempts.broker_at_fault(resp.code))
            if verdict is Verdict.DONE:
                return result
            if result.status:
                kept = result
            if attempts.route_stale(resp.code):
                self.runtime.forget_route(topic)
            if verdict is Verdict.STOP:
                break
        if kept is not None:
            return kept  # stored somewhere, only not as durably as asked: RocketMQ returns it too
        raise SendError(attempts.error())

    def _attempt_done(self, broker: str, started: float, *, failed: bool) -> None:
        now = trio.current_time()
        self.selector.attempt_done(broker, (now - started) * 1000, now, failed=failed)

    def _forget_brokers_gone(self) -> None:
        """After a route changed, brokers that left every route leave the fault table."""
        if self._route_changes_seen != self.runtime.route_changes:
            self._route_changes_seen = self.runtime.route_changes
            self.selector.brokers_in_routes(self.runtime.broker_names())

    def fault_rows(self) -> list[FaultRow]:
        """The latency fault table as it stands (empty with fault tolerance off)."""
        self._forget_brokers_gone()
        return self.selector.fault_rows(trio.current_time())
