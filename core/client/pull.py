"""Single pulls, the offset calls of pull-style consumers (and of the push consumer), and the
send-back of messages a consumer did not consume."""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import orjson

from core.client.route import MASTER_ID, MessageQueue
from core.client.runtime import ClientError, ClientRuntime
from core.client.subscription_data import subscription_data
from core.errors import RemotingError
from core.filter.expression_types import TAG, is_tag_type
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.errors import FormatError
from formats.record import MessageRecord, decode_records
from formats.tags import subscription_codes

log = logging.getLogger(__name__)

PULL_BATCH = 32
PULL_TIMEOUT_S = 30.0
SYSFLAG_COMMIT, SYSFLAG_SUSPEND, SYSFLAG_SUBSCRIPTION = 1, 2, 4


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS: Mapping[int, PullStatus] = MappingProxyType({
    ResponseCode.SUCCESS: PullStatus.FOUND, ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG, ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL})


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageRecord]


class SubscriptionRefusedError(ClientError):
    """A broker will not serve the subscription: a malformed expression, or SQL92 on a broker
    whose property filtering is off. Pulling again will not help."""


# what brokers answer a subscription they cannot serve (RocketMQ's codes)
REFUSED_SUBSCRIPTION_CODES = frozenset({ResponseCode.SUBSCRIPTION_PARSE_FAILED})
FILTER_UNSUPPORTED_REMARK = "does not support consumer to filter message by"


def refused_subscription(resp: RemotingCommand) -> bool:
    return resp.code in REFUSED_SUBSCRIPTION_CODES or (
        resp.code == ResponseCode.SYSTEM_ERROR and FILTER_UNSUPPORTED_REMARK in (resp.remark or ""))


async def check_subscription(runtime: ClientRuntime, group: str, topic: str, expression: str,
                             expression_type: str, version: int = 0) -> None:
    """Ask every broker of ``topic``'s route whether it can serve the subscription
    (CHECK_CLIENT_CONFIG, as RocketMQ's Java consumer does before it starts); raises
    SubscriptionRefusedError with the first refusal. A broker that cannot be reached is skipped:
    its pulls will say."""
    route = await runtime.route(topic)
    addresses = sorted({a for ids in route.brokers.values() for a in ids.values()}) if route else []
    body = orjson.dumps({"clientId": runtime.client_id, "group": group,
                         "subscriptionData": subscription_data(topic, expression, expression_type, version)})
    for address in addresses:
        try:
            resp = await runtime.invoke(address, RemotingCommand(code=RequestCode.CHECK_CLIENT_CONFIG, body=body), 5)
        except RemotingError:
            continue
        if resp.code != ResponseCode.SUCCESS:
            raise SubscriptionRefusedError(f"broker {address} refused the {expression_type} subscription "
                                           f"{expression!r} of {topic}: {resp.remark}")


def _tag_matches(codes: set[int] | None, expression: str, rec: MessageRecord) -> bool:
    if codes is None:
        return True
    wanted = {t.strip() for t in expression.split("||")}
    return rec.tags in wanted


async def broker_address(runtime: ClientRuntime, mq: MessageQueue, broker_id: int = MASTER_ID) -> str:
    """The address of ``mq``'s broker ``broker_id``, or of any node of its group when that one
    is not in the route (a slave while the master is gone)."""
    route = await runtime.route(mq.topic)
    addr = route.any_address(mq.broker_name, broker_id) if route is not None else None
    if addr is None:
        raise ClientError(f"no address for broker {mq.broker_name} of {mq.topic}")
    return addr


async def pull(runtime: ClientRuntime, group: str, mq: MessageQueue, offset: int, *, expression: str = "*",
               expression_type: str = TAG, max_nums: int = PULL_BATCH, suspend_ms: int = 0, commit_offset: int | None = None,
               timeout_s: float = PULL_TIMEOUT_S) -> PullResult:
    """One PULL_MESSAGE; messages are filtered by exact tag on our side too (hashes collide).
    ``expression_type`` SQL92: ``expression`` is a selector over properties, applied by the
    broker only (as RocketMQ's clients do); raises SubscriptionRefusedError when the broker
    cannot serve it."""
    sysflag = SYSFLAG_SUBSCRIPTION | (SYSFLAG_SUSPEND if suspend_ms > 0 else 0)
    if commit_offset is not None:
        sysflag |= SYSFLAG_COMMIT
    cmd = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "sysFlag": str(sysflag),
        "commitOffset": str(commit_offset if commit_offset is not None else 0),
        "suspendTimeoutMillis": str(suspend_ms), "subscription": expression, "subVersion": "0",
        "expressionType": expression_type})
    try:
        resp = await runtime.invoke(await broker_address(runtime, mq, runtime.pull_from.get(mq, MASTER_ID)),
                                    cmd, timeout_s)
    except RemotingError:
        runtime.forget_route(mq.topic)  # the node may be gone: ask the name servers next time
        raise
    suggested = int(resp.ext_fields.get("suggestWhichBrokerId", MASTER_ID) or MASTER_ID)
    if suggested == MASTER_ID:  # the table holds only the queues sent elsewhere: bounded by the route
        runtime.pull_from.pop(mq, None)
    else:
        runtime.pull_from[mq] = suggested
    status = _PULL_STATUS.get(resp.code)
    if refused_subscription(resp):
        raise SubscriptionRefusedError(f"broker {mq.broker_name} refused the {expression_type} subscription "
                                       f"{expression!r} of {mq.topic}: {resp.remark}")
    if status is None:
        raise ClientError(f"pull {mq.topic}/{mq.broker_name}/{mq.queue_id}@{offset}: code {resp.code} {resp.remark}")
    ext = resp.ext_fields
    messages: list[MessageRecord] = []
    if status is PullStatus.FOUND:
        codes = subscription_codes(expression) if is_tag_type(expression_type) else None
        try:
            # the broker checked each body's CRC when it stored it (stock clients skip it too)
            messages = [m for m in decode_records(resp.body, check_crc=False) if _tag_matches(codes, expression, m)]
        except FormatError as exc:
            raise ClientError(f"undecodable pull body from {mq.broker_name}: {exc}") from exc
    return PullResult(status, int(ext.get("nextBeginOffset", offset)), int(ext.get("minOffset", 0)),
                      int(ext.get("maxOffset", 0)), messages)


async def _offset_call(runtime: ClientRuntime, code: int, mq: MessageQueue, **extra: str) -> RemotingCommand:
    ext = {"topic": mq.topic, "queueId": str(mq.queue_id), **extra}
    return await runtime.invoke(await broker_address(runtime, mq), RemotingCommand(code=code, ext_fields=ext), 5)


async def group_members(runtime: ClientRuntime, group: str, mq: MessageQueue) -> list[str]:
    """GET_CONSUMER_LIST_BY_GROUP at ``mq``'s broker: the group's client ids, sorted (just this
    client when the broker cannot say)."""
    resp = await runtime.invoke(await broker_address(runtime, mq), RemotingCommand(
        code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": group}), 5)
    if resp.code != ResponseCode.SUCCESS:
        return [runtime.client_id]
    return sorted(orjson.loads(resp.body).get("consumerIdList", []))


async def max_offset(runtime: ClientRuntime, mq: MessageQueue) -> int:
    resp = await _offset_call(runtime, RequestCode.GET_MAX_OFFSET, mq)
    return int(resp.ext_fields.get("offset", 0))


async def min_offset(runtime: ClientRuntime, mq: MessageQueue) -> int:
    resp = await _offset_call(runtime, RequestCode.GET_MIN_OFFSET, mq)
    return int(resp.ext_fields.get("offset", 0))


async def committed_offset(runtime: ClientRuntime, group: str, mq: MessageQueue) -> int | None:
    resp = await _offset_call(runtime, RequestCode.QUERY_CONSUMER_OFFSET, mq, consumerGroup=group)
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS and "offset" in resp.ext_fields else None


async def commit_offset(runtime: ClientRuntime, group: str, mq: MessageQueue, offset: int) -> None:
    cmd = RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
        "consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "commitOffset": str(offset)})
    await runtime.invoke(await broker_address(runtime, mq), cmd, 5)


async def send_back(runtime: ClientRuntime, group: str, mq: MessageQueue, messages: list[MessageRecord], *,
                    max_reconsume_times: int, dead_letter: bool = False) -> int:
    """CONSUMER_SEND_MSG_BACK: give ``messages`` back for a later retry (or, ``dead_letter``,
    straight to the group's DLQ); returns how many the broker took, in order."""
    try:
        addr = await broker_address(runtime, mq)
    except ClientError:
        return 0
    for i, rec in enumerate(messages):
        cmd = RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields={
            "group": group, "offset": str(rec.phys_offset), "delayLevel": "-1" if dead_letter else "0",
            "originMsgId": rec.uniq_key or "", "originTopic": rec.topic, "unitMode": "false",
            "maxReconsumeTimes": str(max_reconsume_times)})
        try:
            resp = await runtime.invoke(addr, cmd, 3)
        except RemotingError as exc:
            log.info("send back of %s@%d failed: %s", mq, rec.queue_offset, exc)
            return i
        if resp.code != ResponseCode.SUCCESS:
            log.info("send back of %s@%d refused: %s", mq, rec.queue_offset, resp.remark)
            return i
    return len(messages)
