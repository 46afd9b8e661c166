"""END_TRANSACTION: a producer commits or rolls back a half it sent (or answers a check).

Header (:class:`~core.remoting.request_headers.EndTransactionHeader`): ``producerGroup``
(required, as RocketMQ's @CFNotNull), ``tranStateTableOffset`` (the half's queue offset, the
send reply's ``queueOffset``), ``commitLogOffset`` (from the offset msgId), ``commitOrRollback``
(8 commit, 12 rollback, 0 still unknown). Stock producers send it oneway; a request that wants
an answer gets SUCCESS, or SYSTEM_ERROR naming why the decision was not applied.

The header names no topic: with ACL on, the half found at the two offsets is what is checked,
as a send to its real topic (PUB on ``REAL_TOPIC``), before anything else about it is said
(NO_PERMISSION, and the half stays open). The producer group must then be the half's: for a 5.x
client that group is the topic's name, which anyone knows, so the group alone protects nothing.
"""

from __future__ import annotations

import logging
from typing import Protocol

from core.acl.permissions import PUB
from core.acl.requests import Resource
from core.broker.timers.real_destination import real_destination
from core.broker.transactions.transaction_service import TransactionDecisionError, TransactionService
from core.broker.wire.responses import response_code
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.request_headers import EndTransactionHeader
from formats.record import MessageRecord
from formats.sysflag import TRANSACTION_COMMIT, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK

log = logging.getLogger(__name__)


class TransactionEndingBroker(Protocol):
    """What END_TRANSACTION needs from its broker (``Broker`` is one)."""

    transactions: TransactionService

    def acl_refusal(self, request: RemotingCommand, conn: Connection, resources: list[Resource]) -> str | None: ...


def handle_end_transaction(broker: TransactionEndingBroker, header: EndTransactionHeader, request: RemotingCommand,
                           conn: Connection) -> RemotingCommand:
    decision = header.commit_or_rollback
    if decision == TRANSACTION_NOT_TYPE:  # the producer does not know yet: a later check asks again
        return request.reply(ResponseCode.SUCCESS, "left open")
    if decision not in (TRANSACTION_COMMIT, TRANSACTION_ROLLBACK):
        return request.reply(ResponseCode.SYSTEM_ERROR, f"commitOrRollback must be 0, 8 or 12, not {decision}")
    try:
        entry, half = broker.transactions.open_half(header.tran_state_table_offset, header.commit_log_offset)
        refused = broker.acl_refusal(request, conn, [(real_topic(half), PUB)])
        if refused is not None:
            return request.reply(ResponseCode.NO_PERMISSION, refused)
        broker.transactions.apply(entry, half, header.producer_group, commit=decision == TRANSACTION_COMMIT)
    except TransactionDecisionError as exc:
        log.info("END_TRANSACTION from %s refused: %s", conn.remote, exc)
        return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    except Exception as exc:  # store errors, mapped in one place; the half stays open
        code, remark = response_code(exc)
        return request.reply(code, remark)
    return request.reply(ResponseCode.SUCCESS)


def real_topic(half: MessageRecord) -> str:
    """The topic a half is sent to (its REAL_TOPIC); a half without a valid one counts as the
    half topic itself, which only admin accounts may use."""
    where = real_destination(half.properties)
    return where[0] if where is not None else half.topic
