"""An orderly consumer's queue locks: LOCK_BATCH_MQ / UNLOCK_BATCH_MQ to each queue's master,
and the bookkeeping of which locks are still fresh (RocketMQ's ProcessQueue lock time).

The broker keeps a lock 60 s; clients renew every 20 s and stop consuming a queue whose lock
they have not renewed for 30 s, so two members never work on one queue at the same time."""

from __future__ import annotations

import logging
from collections import defaultdict

import orjson

from core.client.route import MessageQueue
from core.client.runtime import ClientRuntime
from core.errors import RemotingError
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

LOCK_RENEW_S = 20.0
LOCK_FRESH_S = 30.0  # RocketMQ's REBALANCE_LOCK_MAX_LIVE_TIME


def _body(group: str, client_id: str, queues: list[MessageQueue]) -> bytes:
    return orjson.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": [
        {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id} for mq in queues]})


async def _by_master(runtime: ClientRuntime, queues: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
    out: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in queues:
        route = await runtime.route(mq.topic)
        addr = route.master(mq.broker_name) if route is not None else None
        if addr is None:
            log.info("no master for %s: not locked", mq)
            continue
        out[addr].append(mq)
    return out


async def lock_queues(runtime: ClientRuntime, group: str, queues: list[MessageQueue]) -> set[MessageQueue]:
    """Lock (or renew) ``queues`` for this client; returns the ones the brokers granted."""
    granted: set[MessageQueue] = set()
    for addr, mqs in (await _by_master(runtime, queues)).items():
        cmd = RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, body=_body(group, runtime.client_id, mqs))
        try:
            resp = await runtime.invoke(addr, cmd, 3)
        except RemotingError as exc:
            log.info("locking %d queues at %s failed: %s", len(mqs), addr, exc)
            continue
        if resp.code != ResponseCode.SUCCESS:
            log.info("locking at %s refused: %s", addr, resp.remark)
            continue
        try:
            rows = orjson.loads(resp.body).get("lockOKMQSet", [])
            granted.update(MessageQueue(str(r["topic"]), str(r["brokerName"]), int(r["queueId"])) for r in rows)
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
            log.warning("unreadable LOCK_BATCH_MQ answer from %s: %s", addr, exc)
    return granted & set(queues)


async def unlock_queues(runtime: ClientRuntime, group: str, queues: list[MessageQueue]) -> None:
    """Release ``queues`` so another member can lock them now rather than after the expiry."""
    for addr, mqs in (await _by_master(runtime, queues)).items():
        cmd = RemotingCommand(code=RequestCode.UNLOCK_BATCH_MQ, body=_body(group, runtime.client_id, mqs))
        try:
            await runtime.invoke(addr, cmd, 3)
        except RemotingError as exc:
            log.info("unlocking at %s failed (the locks expire on their own): %s", addr, exc)


class HeldLocks:
    """When each queue's lock was last granted, by the clock given (sans-IO)."""

    def __init__(self) -> None:
        self.granted_at: dict[MessageQueue, float] = {}

    def granted(self, queues: set[MessageQueue], now: float) -> None:
        for mq in queues:
            self.granted_at[mq] = now

    def fresh(self, mq: MessageQueue, now: float) -> bool:
        at = self.granted_at.get(mq)
        return at is not None and now - at < LOCK_FRESH_S

    def drop(self, mq: MessageQueue) -> None:
        self.granted_at.pop(mq, None)
