"""END_TRANSACTION: a producer commits or rolls back a half it sent (or answers a check).

Header: ``producerGroup``, ``tranStateTableOffset`` (the half's queue offset, the send reply's
``queueOffset``), ``commitLogOffset`` (from the offset msgId), ``commitOrRollback`` (8 commit,
12 rollback, 0 still unknown), ``fromTransactionCheck``, ``msgId``, ``transactionId``. Stock
producers send it oneway; a request that wants an answer gets SUCCESS, or SYSTEM_ERROR naming
why the decision was not applied.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.broker.headers import HeaderFieldError, as_int
from core.broker.responses import response_code
from core.broker.transaction_service import TransactionDecisionError
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from formats.sysflag import TRANSACTION_COMMIT, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK

if TYPE_CHECKING:
    from core.broker.broker import Broker

log = logging.getLogger(__name__)


def handle_end_transaction(broker: Broker, request: RemotingCommand, conn: Connection) -> RemotingCommand:
    ext = request.ext_fields
    try:
        queue_offset = as_int(ext, "tranStateTableOffset")
        phys_offset = as_int(ext, "commitLogOffset")
        decision = as_int(ext, "commitOrRollback", bits=32)
    except HeaderFieldError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    if decision == TRANSACTION_NOT_TYPE:  # the producer does not know yet: a later check asks again
        return request.reply(ResponseCode.SUCCESS, "left open")
    if decision not in (TRANSACTION_COMMIT, TRANSACTION_ROLLBACK):
        return request.reply(ResponseCode.SYSTEM_ERROR, f"commitOrRollback must be 0, 8 or 12, not {decision}")
    try:
        broker.transactions.decide(queue_offset, phys_offset, ext.get("producerGroup", ""),
                                   commit=decision == TRANSACTION_COMMIT)
    except TransactionDecisionError as exc:
        log.info("END_TRANSACTION from %s refused: %s", conn.remote, exc)
        return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    except Exception as exc:  # store errors, mapped in one place; the half stays open
        code, remark = response_code(exc)
        return request.reply(code, remark)
    return request.reply(ResponseCode.SUCCESS)
