"""The transactional producer (RocketMQ's TransactionMQProducer).

``send_in_transaction`` sends a half (``TRAN_MSG`` = true, sysflag PREPARED), runs the local
transaction, then tells the broker its outcome with a oneway END_TRANSACTION: commit makes the
message visible, rollback drops it, unknown leaves it open. For halves left open (unknown, or a
producer that died in between) the broker later sends CHECK_TRANSACTION_STATE to any producer of
the group — also one started after a restart — whose check listener answers from its own
records of the transaction.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import trio

from core.client.producer import Message, Producer, SendError, SendResult
from core.client.runtime import ClientError, ClientRuntime
from core.errors import RemotingError
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.topic_names import AUTO_CREATE_TOPIC
from formats.errors import FormatError
from formats.msgid import decode_offset_msg_id
from formats.properties import PGROUP, TRAN_MSG
from formats.record import MessageRecord, decode_record
from formats.sysflag import (
    TRANSACTION_COMMIT,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
)

log = logging.getLogger(__name__)

CHECKS_AT_ONCE = 16  # check listeners running at the same time, per producer


class TransactionState(enum.IntEnum):
    """A local transaction's outcome, valued as END_TRANSACTION's ``commitOrRollback``."""

    UNKNOWN = TRANSACTION_NOT_TYPE
    COMMIT = TRANSACTION_COMMIT
    ROLLBACK = TRANSACTION_ROLLBACK


def end_transaction_request(group: str, queue_offset: int, phys_offset: int, msg_id: str, state: TransactionState,
                            from_check: bool, transaction_id: str | None = None) -> RemotingCommand:
    """END_TRANSACTION for the half at (``queue_offset`` in the half topic, ``phys_offset``)."""
    return RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields={
        "producerGroup": group, "tranStateTableOffset": str(queue_offset),
        "commitLogOffset": str(phys_offset), "commitOrRollback": str(int(state)),
        "fromTransactionCheck": "true" if from_check else "false", "msgId": msg_id,
        "transactionId": transaction_id or msg_id})


StateOrAwaitable = TransactionState | Awaitable[TransactionState]
LocalTransaction = Callable[[Message, Any], StateOrAwaitable]
CheckListener = Callable[[MessageRecord], StateOrAwaitable]


class TransactionSendResult(NamedTuple):
    send: SendResult
    state: TransactionState  # what the local transaction decided (and the broker was told)


async def _outcome(value: StateOrAwaitable) -> TransactionState:
    if inspect.isawaitable(value):
        value = await value
    return TransactionState(value)


class TransactionProducer:
    def __init__(self, runtime: ClientRuntime, group: str, check: CheckListener, **producer_options: Any) -> None:
        self.runtime = runtime
        self.group = group
        self.check = check
        self.producer = Producer(runtime, group, **producer_options)
        self._limiter = trio.CapacityLimiter(CHECKS_AT_ONCE)
        self.checks_answered = 0
        dispatcher = runtime.request_handlers.get(RequestCode.CHECK_TRANSACTION_STATE)
        if not isinstance(dispatcher, _CheckDispatcher):
            dispatcher = _CheckDispatcher(runtime)
            runtime.request_handlers[RequestCode.CHECK_TRANSACTION_STATE] = dispatcher
        dispatcher.producers[group] = self

    async def start(self, topics: Sequence[str] = ()) -> None:
        """Make the group known to the brokers serving ``topics`` (and TBW102's) now, so checks
        for halves an earlier run left open reach this producer without waiting for the next
        periodic heartbeat."""
        for topic in (*topics, AUTO_CREATE_TOPIC):
            try:
                await self.runtime.route(topic)
            except ClientError as exc:
                log.debug("no route for %s yet: %s", topic, exc)
        await self.runtime.heartbeat_all()

    async def send_in_transaction(self, msg: Message, local: LocalTransaction, arg: Any = None) -> TransactionSendResult:
        """Send ``msg`` as a half, run ``local(msg, arg)`` (plain or async) and end the
        transaction with its outcome; an exception in ``local`` leaves it UNKNOWN (the broker
        checks later). Raises SendError when the half could not be sent (``local`` not run)."""
        sent = await self.producer.send_marked(msg, {TRAN_MSG: "true", PGROUP: self.group}, TRANSACTION_PREPARED)
        if sent.status != "SEND_OK":
            raise SendError(f"the half of {sent.msg_id} was stored with {sent.status}; not running the local transaction")
        try:
            state = await _outcome(local(msg, arg))
        except Exception:  # the application's own failure: the broker will ask later
            log.exception("local transaction of %s failed; left UNKNOWN", sent.msg_id)
            state = TransactionState.UNKNOWN
        await self._end(sent, state)
        return TransactionSendResult(sent, state)

    async def _end(self, sent: SendResult, state: TransactionState) -> None:
        route = await self.runtime.route(sent.queue.topic)
        address = route.master(sent.queue.broker_name) if route is not None else None
        if address is None:
            log.warning("no master for %s to end transaction %s; the broker will check", sent.queue.broker_name,
                        sent.msg_id)
            return
        try:
            offset = decode_offset_msg_id(sent.offset_msg_id).phys_offset
        except FormatError as exc:
            raise ClientError(f"the broker answered an unusable msgId for the half: {exc}") from exc
        try:
            await self.runtime.oneway(address, self._end_command(sent.queue_offset, offset, sent.msg_id, state, False))
        except RemotingError as exc:  # the broker's check recovers the decision
            log.warning("END_TRANSACTION of %s to %s failed: %s", sent.msg_id, address, exc)

    def _end_command(self, queue_offset: int, phys_offset: int, msg_id: str, state: TransactionState,
                     from_check: bool) -> RemotingCommand:
        return end_transaction_request(self.group, queue_offset, phys_offset, msg_id, state, from_check)

    async def answer_check(self, request: RemotingCommand, half: MessageRecord, conn: Connection) -> None:
        """Ask the check listener about ``half`` and send its answer on the connection the check
        came on (unknown is sent too, like stock producers: the broker asks again later)."""
        async with self._limiter:
            try:
                state = await _outcome(self.check(half))
            except Exception:
                log.exception("transaction check listener failed for %s; answering UNKNOWN", half.uniq_key)
                state = TransactionState.UNKNOWN
        ext = request.ext_fields
        try:
            queue_offset, phys_offset = int(ext["tranStateTableOffset"]), int(ext["commitLogOffset"])
        except (KeyError, ValueError):
            log.warning("CHECK_TRANSACTION_STATE without usable offsets: %s", ext)
            return
        cmd = self._end_command(queue_offset, phys_offset, ext.get("msgId", ""), state, True)
        cmd.language = "PYTHON"
        try:
            await conn.oneway(cmd)
            self.checks_answered += 1
        except RemotingError as exc:
            log.warning("answering the check of %s failed: %s", half.uniq_key, exc)


class _CheckDispatcher:
    """The runtime's CHECK_TRANSACTION_STATE handler: routes each check to the transaction
    producer of the half's group (PGROUP)."""

    def __init__(self, runtime: ClientRuntime) -> None:
        self.runtime = runtime
        self.producers: dict[str, TransactionProducer] = {}

    def __call__(self, request: RemotingCommand, conn: Connection) -> Reply:
        try:
            half = decode_record(request.body, 0, check_crc=False)
        except (FormatError, ValueError) as exc:
            log.warning("undecodable CHECK_TRANSACTION_STATE body from %s: %s", conn.remote, exc)
            return None
        producer = self.producers.get(half.properties.get(PGROUP, ""))
        if producer is None:
            log.warning("CHECK_TRANSACTION_STATE for group %r, which no transaction producer here serves",
                        half.properties.get(PGROUP))
            return None
        self.runtime.nursery.start_soon(producer.answer_check, request, half, conn)
        return None
