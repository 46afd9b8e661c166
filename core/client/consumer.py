"""The push consumer: rebalances queues across its group (or reads all of them, broadcasting),
long-polls each queue, hands messages to a callback in queue order and commits offsets.

The push consumer also answers what brokers ask of it: RESET_CONSUMER_CLIENT_OFFSET (its queues
jump to the offsets of the body, read by :mod:`core.client.offset_table`) and
GET_CONSUMER_RUNNING_INFO, answered as JSON:

```
{"properties": {"consumerGroup": ..., "messageModel": "CLUSTERING", ...},   strings, like Java's
 "subscriptionSet": [{"topic": ..., "subString": ..., ...}],
 "mqTable": [{"topic": ..., "brokerName": ..., "queueId": ..., "nextPullOffset": ...,
              "commitOffset": ...}]}                                         -1: nothing committed
```

(Java's ConsumerRunningInfo keys ``mqTable`` by queue objects, which is not JSON; we list them.)
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from core.client.allocation import ALLOCATORS
from core.client.offset_store import LocalOffsetStore, default_offsets_path
from core.client.offset_table import parse_offset_table
from core.client.pull import (
    PullStatus,
    SubscriptionRefusedError,
    check_subscription,
    commit_offset,
    committed_offset,
    group_members,
    max_offset,
    min_offset,
    pull,
)
from core.client.queue_locking import LOCK_RENEW_S, HeldLocks, lock_queues, unlock_queues
from core.client.route import MessageQueue
from core.client.runtime import ClientError, ClientRuntime
from core.client.subscription_data import subscription_data
from core.client.unconsumed import Unconsumed
from core.clock import now_ms
from core.errors import RemotingError
from core.filter.expression_types import SQL92, TAG
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Reply
from core.topic_names import RETRY_PREFIX
from formats.properties import RETRY_TOPIC
from formats.record import MessageRecord

log = logging.getLogger(__name__)

SUSPEND_MS = 15_000
ERROR_BACKOFF_S = 3.0
REBALANCE_S = 10.0
COMMIT_S = 5.0
RETRY_LOCALLY_S = 1.0  # a message kept here (suspended, or not taken back) is offered again after this
LOCK_RETRY_S = 1.0  # an orderly consumer asks again this soon for queues another member still holds


# A handler returns True (all consumed), False (none: RECONSUME_LATER, or for an orderly
# consumer SUSPEND_CURRENT_QUEUE_A_MOMENT), or how many of the batch, from its start, it consumed.
Handler = Callable[[list[MessageRecord]], Awaitable[bool | int]]


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"  # the group's members share the queues; the broker keeps offsets
    BROADCASTING = "BROADCASTING"  # every member reads every queue and keeps its own offsets


class PushConsumer:
    """A push consumer: clustering (queues shared among the group's members) or broadcasting
    (every member reads every queue), concurrent or orderly.

    Clustering: messages the handler does not consume (RECONSUME_LATER) are given back to the
    broker (CONSUMER_SEND_MSG_BACK) and come back later from ``%RETRY%<group>``, which every
    member also consumes, with their original topic restored; after ``max_reconsume_times``
    tries they go to ``%DLQ%<group>``. A message the broker cannot take back is offered again
    here after a pause, so nothing is skipped. With ``give_back=False`` unconsumed messages stay
    in their queue instead (its offset does not move) and are offered again after a pause: for
    readers that stop early, such as ``mqctl tail --count``.

    Orderly (``orderly=True``, clustering): a queue is consumed only while this member holds
    its broker lock (LOCK_BATCH_MQ, renewed every 20 s, released when the queue moves to
    another member), one batch at a time in queue order. A batch not consumed suspends the
    queue for ``suspend_s`` and is offered again, its reconsume times counted up; after
    ``max_reconsume_times`` the first message goes to ``%DLQ%<group>`` and the queue moves on.

    Broadcasting: offsets are kept in a local file (``offsets_path``, by default
    ``~/.mqctl/offsets/<instance>/<group>/offsets.json``); a message not consumed is offered
    again after ``suspend_s`` up to ``max_reconsume_times`` times, then skipped with a warning
    (RocketMQ's broadcasting consumers drop it at once).

    Clustering members share queues by ``allocation`` (``average`` or ``consistent-hash``, see
    :mod:`core.client.allocation`), again every 10 s, when a broker says the group changed, and
    when the route of a topic read changes. A queue whose master is gone is pulled from a slave
    of its group, and its offsets are committed there.
    """

    def __init__(self, runtime: ClientRuntime, group: str, handler: Handler, *, from_beginning: bool = False,
                 use_committed: bool = True, max_reconsume_times: int = 16, give_back: bool = True,
                 orderly: bool = False, message_model: MessageModel = MessageModel.CLUSTERING,
                 offsets_path: Path | None = None, suspend_s: float = RETRY_LOCALLY_S,
                 allocation: str = "average") -> None:
        if orderly and message_model is MessageModel.BROADCASTING:
            raise ClientError("an orderly consumer shares queues: it cannot be broadcasting")
        if allocation not in ALLOCATORS:
            raise ClientError(f"unknown allocation {allocation!r} (one of: {', '.join(ALLOCATORS)})")
        self.allocate = ALLOCATORS[allocation]
        self.runtime = runtime
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self.give_back = give_back and not orderly and message_model is MessageModel.CLUSTERING
        self.orderly = orderly
        self.message_model = message_model
        self.broadcasting = message_model is MessageModel.BROADCASTING
        self.suspend_s = suspend_s
        self.local_offsets = (LocalOffsetStore(offsets_path or default_offsets_path(
            runtime.client_id.split("#")[1] if "#" in runtime.client_id else "DEFAULT", group))
            if self.broadcasting else None)
        self._locks = HeldLocks()
        self._consuming: dict[MessageQueue, trio.Lock] = {}  # orderly: held while the handler runs
        self.unconsumed = Unconsumed(runtime, group, give_back=self.give_back, orderly=orderly,
                                     broadcasting=self.broadcasting, max_reconsume_times=max_reconsume_times)
        self._rebalance_wait_s = REBALANCE_S
        self.handler = handler
        self.from_beginning = from_beginning
        self.use_committed = use_committed
        self.subscriptions: dict[str, str] = {}
        self.expression_types: dict[str, str] = {}  # topic -> TAG or SQL92
        self._loops: dict[MessageQueue, trio.CancelScope] = {}
        self.offsets: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}
        self._rebalance = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._started = trio.Event()
        self._started_ms = 0
        self._sub_version = 0  # ms of the latest subscribe: the subscriptions' subVersion
        self.refused: SubscriptionRefusedError | None = None  # the latest pull a broker refused

    def subscribe(self, topic: str, expression: str = "*", *, sql: bool = False) -> None:
        """Read ``topic``: messages whose tag is in ``expression`` ("a || b", "*" for all), or
        with ``sql`` those whose properties satisfy the SQL92 selector ``expression`` (the
        brokers need ``broker.enable_property_filter``; :meth:`start` asks them first)."""
        if sql:
            if not expression.strip():
                raise ClientError(f"an SQL92 subscription to {topic} needs an expression")
            self.subscriptions[topic] = expression
        else:
            self.subscriptions[topic] = expression or "*"
        self.expression_types[topic] = SQL92 if sql else TAG
        self._sub_version = now_ms()

    def heartbeat_data(self) -> dict[str, Any]:
        subs = [subscription_data(topic, expression, self.expression_types.get(topic, TAG), self._sub_version)
                for topic, expression in self._topics().items()]
        return {"groupName": self.group, "consumeType": "CONSUME_PASSIVELY", "messageModel": self.message_model.value,
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET" if self.from_beginning else "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": subs, "unitMode": False}

    def _topics(self) -> dict[str, str]:
        """What this consumer reads: its subscriptions, and in clustering mode the group's retry topic."""
        if self.broadcasting:
            return dict(self.subscriptions)
        return {**self.subscriptions, RETRY_PREFIX + self.group: "*"}

    def rebalance_soon(self) -> None:
        self._rebalance.set()

    def _route_changed(self, topic: str, _route: object) -> None:
        if topic in self._topics():
            self.rebalance_soon()

    async def start(self) -> None:
        """Join the group and start consuming (runs in the runtime's nursery)."""
        if not self.subscriptions:
            raise ClientError("subscribe to a topic first")
        self.runtime.consumers[self.group] = self
        self.runtime.route_listeners.append(self._route_changed)
        self._started_ms = now_ms()
        for topic in self.subscriptions:
            await self.runtime.route(topic)
        await self._check_subscriptions()
        await self.runtime.heartbeat_all()
        await self.runtime.nursery.start(self._run)
        await self._started.wait()

    async def _check_subscriptions(self) -> None:
        """Every SQL92 subscription, checked with its topic's brokers; raises SubscriptionRefusedError."""
        for topic, kind in sorted(self.expression_types.items()):
            if kind != TAG:
                await check_subscription(self.runtime, self.group, topic, self.subscriptions[topic], kind,
                                         self._sub_version)

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                nursery.start_soon(self._commit_loop)
                if self.orderly:
                    nursery.start_soon(self._renew_locks_loop)
                while True:
                    try:
                        await self.rebalance()
                    except (ClientError, RemotingError) as exc:
                        log.warning("rebalance of %s failed: %s", self.group, exc)
                    self._started.set()
                    with trio.move_on_after(self._rebalance_wait_s):
                        await self._rebalance.wait()
                    self._rebalance = trio.Event()

    async def rebalance(self) -> None:
        wanted: set[MessageQueue] = set()
        for topic in self._topics():
            route = await self.runtime.route(topic, refresh=True)
            if route is None or not route.read_queues:
                continue
            queues = sorted(route.read_queues)
            if self.broadcasting:
                wanted.update(queues)
                continue
            members = await group_members(self.runtime, self.group, queues[0])
            wanted.update(self.allocate(queues, members, self.runtime.client_id))
        for mq in list(self._loops):
            if mq not in wanted:
                await self._drop(mq, unlock=True)
        new = sorted(wanted - set(self._loops))
        self._rebalance_wait_s = REBALANCE_S
        if self.orderly and new:
            granted = await lock_queues(self.runtime, self.group, new)
            self._locks.granted(granted, trio.current_time())
            if len(granted) < len(new):  # another member still holds some: ask again soon
                self._rebalance_wait_s = LOCK_RETRY_S
            new = [mq for mq in new if mq in granted]
        for mq in new:
            assert self._nursery is not None
            # where to start is settled here, so messages sent once start() returns are seen
            try:
                offset: int | None = await self._start_offset(mq)
            except (ClientError, RemotingError) as exc:
                log.info("no start offset for %s yet (%s); the pull loop asks again", mq, exc)
                offset = None
            scope = trio.CancelScope()
            self._loops[mq] = scope
            self._nursery.start_soon(self._pull_loop, mq, scope, offset)

    async def _drop(self, mq: MessageQueue, *, unlock: bool) -> None:
        """Stop consuming ``mq``: its loop ends, its offset is committed, its lock released
        (unless it was lost anyway)."""
        scope = self._loops.pop(mq, None)
        if scope is not None:
            if self.orderly:  # a batch in the handler finishes first (5 s at most), and no other starts
                with trio.move_on_after(5):
                    async with self._consuming.setdefault(mq, trio.Lock()):
                        scope.cancel()
            scope.cancel()  # done already, unless the handler outlasted the 5 s: then it is stopped
        self.unconsumed.forget(mq)
        self._locks.drop(mq)
        # shielded: the caller may be that queue's own loop, just cancelled
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await self._commit(mq)
            if self.orderly and unlock:
                await unlock_queues(self.runtime, self.group, [mq])
        self.offsets.pop(mq, None)

    async def _renew_locks_loop(self) -> None:
        while True:
            await trio.sleep(LOCK_RENEW_S)
            await self._renew_locks()

    async def _renew_locks(self, only: list[MessageQueue] | None = None) -> None:
        held = only if only is not None else sorted(self._loops)
        if not held:
            return
        granted = await lock_queues(self.runtime, self.group, held)
        self._locks.granted(granted, trio.current_time())
        for mq in held:
            if mq not in granted and not self._locks.fresh(mq, trio.current_time()):
                log.warning("consumer %s lost the lock of %s; another member consumes it now", self.group, mq)
                await self._drop(mq, unlock=False)

    async def _start_offset(self, mq: MessageQueue) -> int:
        if self.local_offsets is not None:
            kept = self.local_offsets.get(mq) if self.use_committed else None
            if kept is not None and kept >= 0:
                return kept
        elif self.use_committed:
            committed = await committed_offset(self.runtime, self.group, mq)
            if committed is not None and committed >= 0:
                return committed
        if self.from_beginning:
            return await min_offset(self.runtime, mq)
        return await max_offset(self.runtime, mq)

    def _advance(self, mq: MessageQueue, scope: trio.CancelScope, offset: int) -> None:
        """Record the next offset of ``mq`` -- unless the loop owning ``scope`` was replaced (a
        reset) or dropped (a rebalance) while it was still finishing a step."""
        if self._loops.get(mq) is scope:
            self.offsets[mq] = offset

    async def _pull_loop(self, mq: MessageQueue, scope: trio.CancelScope, start_offset: int | None = None) -> None:
        with scope:
            expression = self.subscriptions.get(mq.topic, "*")
            expression_type = self.expression_types.get(mq.topic, TAG)
            offset = start_offset
            if offset is not None:
                self._advance(mq, scope, offset)
            while True:
                try:
                    if offset is None:
                        offset = await self._start_offset(mq)
                        self._advance(mq, scope, offset)
                    result = await pull(self.runtime, self.group, mq, offset, expression=expression,
                                        expression_type=expression_type, suspend_ms=SUSPEND_MS,
                                        commit_offset=None if self.broadcasting else self._committed.get(mq))
                except SubscriptionRefusedError as exc:  # e.g. read from a slave that does not filter
                    log.warning("%s; retrying in %.0fs", exc, ERROR_BACKOFF_S)
                    self.refused = exc
                    await trio.sleep(ERROR_BACKOFF_S)
                    continue
                except (ClientError, RemotingError) as exc:
                    log.info("pull %s failed: %s; retrying in %.0fs", mq, exc, ERROR_BACKOFF_S)
                    await trio.sleep(ERROR_BACKOFF_S)
                    continue
                if result.messages:
                    if self.orderly and not await self._still_locked(mq):
                        return  # another member has the queue now; _drop ended this loop's turn
                    if self.orderly:
                        async with self._consuming.setdefault(mq, trio.Lock()):
                            consumed = await self._deliver(self.unconsumed.with_local_tries(mq, result.messages))
                    else:
                        consumed = await self._deliver(self.unconsumed.with_local_tries(mq, result.messages))
                    if consumed is not True:
                        later = result.messages[int(consumed):]
                        dealt = await self.unconsumed.settle(mq, later)
                        if dealt < len(later):  # kept here: offered again after a pause
                            offset = later[dealt].queue_offset
                            self._advance(mq, scope, offset)
                            await trio.sleep(self.suspend_s)
                            continue
                offset = result.next_offset
                self._advance(mq, scope, offset)
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    await self._commit(mq)

    async def _still_locked(self, mq: MessageQueue) -> bool:
        """Whether this member may consume ``mq`` now (renewing a lock that went stale)."""
        if self._locks.fresh(mq, trio.current_time()):
            return True
        await self._renew_locks([mq])
        return self._locks.fresh(mq, trio.current_time())

    async def _deliver(self, messages: list[MessageRecord]) -> bool | int:
        for rec in messages:  # a retry shows its original topic, as RocketMQ clients do
            original = rec.properties.get(RETRY_TOPIC)
            if original and rec.topic.startswith(RETRY_PREFIX):
                rec.topic = original
        try:
            consumed = await self.handler(messages)
        except Exception:
            log.exception("consumer %s handler failed", self.group)
            return False
        if isinstance(consumed, bool):
            return consumed
        return True if consumed >= len(messages) else max(0, int(consumed))

    async def _commit(self, mq: MessageQueue) -> None:
        offset = self.offsets.get(mq)
        if offset is None or self._committed.get(mq) == offset:
            return
        if self.local_offsets is not None:  # broadcasting: ours alone (saved by the commit loop)
            self.local_offsets.update(mq, offset)
            self._committed[mq] = offset
            return
        try:
            await commit_offset(self.runtime, self.group, mq, offset)
            self._committed[mq] = offset
        except (ClientError, RemotingError) as exc:
            log.info("committing %s@%d failed: %s", mq, offset, exc)

    async def _commit_loop(self) -> None:
        while True:
            await trio.sleep(COMMIT_S)
            for mq in list(self.offsets):
                await self._commit(mq)
            self._save_local_offsets()

    def _save_local_offsets(self) -> None:
        if self.local_offsets is not None:
            try:
                self.local_offsets.save()
            except OSError as exc:
                log.warning("saving %s failed: %s", self.local_offsets.path, exc)

    # ------------------------------------------------------------------ asked by brokers

    async def reset_offsets(self, table: dict[MessageQueue, int]) -> list[MessageQueue]:
        """Move the queues of ``table`` that we hold to their new offsets: what is being pulled
        or handled for them is dropped and pulling resumes at the new offset, which is committed
        at once (so a commit of ours crossing the reset cannot undo it). Returns the queues moved."""
        moved: list[MessageQueue] = []
        if self._nursery is None or (self._scope is not None and self._scope.cancel_called):
            return moved  # not started, or stopping
        for mq, offset in sorted(table.items()):
            old = self._loops.get(mq)
            if old is None:
                continue  # not ours: the member holding it was told too
            old.cancel()
            fresh = trio.CancelScope()
            self._loops[mq] = fresh
            self._committed.pop(mq, None)
            self._nursery.start_soon(self._pull_loop, mq, fresh, offset)
            self.offsets[mq] = offset
            moved.append(mq)
        for mq in moved:
            await self._commit(mq)
        log.info("consumer %s reset %s", self.group, {str(mq): table[mq] for mq in moved})
        return moved

    def reset_from_broker(self, request: RemotingCommand) -> Reply:
        """RESET_CONSUMER_CLIENT_OFFSET: the broker committed new offsets for the group."""
        try:
            table = parse_offset_table(request.body)
        except ValueError as exc:
            log.warning("ignoring a RESET_CONSUMER_CLIENT_OFFSET for %s: %s", self.group, exc)
            return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))

        async def reset() -> RemotingCommand:
            await self.reset_offsets(table)
            return request.reply(ResponseCode.SUCCESS)
        return reset()

    def running_info(self) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO's answer (see the module docstring)."""
        heartbeat = self.heartbeat_data()
        properties = {
            "consumerGroup": self.group, "clientId": self.runtime.client_id,
            "messageModel": heartbeat["messageModel"], "consumeType": heartbeat["consumeType"],
            "consumeFromWhere": heartbeat["consumeFromWhere"], "maxReconsumeTimes": str(self.max_reconsume_times),
            "giveBack": str(self.give_back).lower(), "consumeOrderly": str(self.orderly).lower(), "PROP_CONSUMER_START_TIMESTAMP": str(self._started_ms),
        }
        queues = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                   "nextPullOffset": self.offsets.get(mq, -1), "commitOffset": self._committed.get(mq, -1)}
                  for mq in sorted(self._loops)]
        return {"properties": properties, "subscriptionSet": heartbeat["subscriptionDataSet"], "mqTable": queues}

    async def stop(self) -> None:
        """Stop pulling, commit every offset, leave the group."""
        if self._route_changed in self.runtime.route_listeners:
            self.runtime.route_listeners.remove(self._route_changed)
        if self._scope is not None:
            self._scope.cancel()
        for mq in list(self.offsets):
            await self._commit(mq)
        self._save_local_offsets()
        if self.orderly and self._loops:
            await unlock_queues(self.runtime, self.group, sorted(self._loops))
        self.runtime.consumers.pop(self.group, None)
        for addr in sorted(self.runtime.broker_addresses()):
            try:
                await self.runtime.invoke(addr, RemotingCommand(code=RequestCode.UNREGISTER_CLIENT, ext_fields={
                    "clientID": self.runtime.client_id, "consumerGroup": self.group}), 3)
            except RemotingError:
                pass
