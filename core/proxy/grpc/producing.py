"""The producing RPCs of the gRPC door: SendMessage (merged into batch requests upstream by
core/proxy/grpc/send_batches.py), EndTransaction and RecallMessage."""

from __future__ import annotations

import itertools
import zlib

import trio

from core.acl.permissions import PUB
from core.client.transaction_producer import TransactionState, end_transaction_request
from core.proxy.batching import Lines, Ticket
from core.proxy.grpc.auth import Caller, check_permission
from core.proxy.grpc.clients import HalfMessage
from core.proxy.grpc.messages import Outgoing, Refused, check_topic, outgoing
from core.proxy.grpc.routes import writable
from core.proxy.grpc.send_batches import (
    BATCH_BYTES_MAX,
    BATCH_MESSAGES_MAX,
    Send,
    SendAnswer,
    SendLine,
    send_batch_request,
)
from core.proxy.grpc.shared import DoorShared
from core.proxy.grpc.status import ok, overall, refused, status_of
from core.remoting.codes import FLAG_ONEWAY, RequestCode
from core.remoting.command import RemotingCommand
from formats.errors import FormatError
from formats.msgid import decode_offset_msg_id
from formats.properties import DELAY, TIMER_DELIVER_MS, encode_properties
from formats.recall import RecallHandle, RecallHandleError
from formats.rocketmq_v2 import messaging_pb2 as pb

UNBATCHABLE = frozenset({DELAY, TIMER_DELIVER_MS})  # the broker refuses delayed messages in batches


class Producing:
    """SendMessage and EndTransaction for a :class:`DoorShared`."""

    def __init__(self, service: DoorShared, nursery: trio.Nursery) -> None:
        self.shared = service
        self.forwarder = service.forwarder
        self.clients = service.clients
        self.batches: Lines[Send, SendAnswer] = Lines(nursery, self._flush, items_max=BATCH_MESSAGES_MAX,
                                                      bytes_max=BATCH_BYTES_MAX)
        self._round_robin = itertools.count()

    async def send_message(self, req: pb.SendMessageRequest, caller: Caller) -> pb.SendMessageResponse:
        if not req.messages:
            return pb.SendMessageResponse(status=pb.Status(code=pb.MESSAGE_CORRUPTED, message="no message to send"))
        topics = {m.topic.name for m in req.messages}
        if len(topics) > 1:
            return pb.SendMessageResponse(status=pb.Status(code=pb.MESSAGE_CORRUPTED,
                                                           message="the messages of one request name different topics"))
        try:
            topic = check_topic(topics.pop())
            check_permission(self.shared.policy(), caller, topic=topic, topic_perm=PUB)
            queues = writable(await self.shared.spans(topic))
            if not queues:
                raise Refused(pb.FORBIDDEN, f"topic {topic!r} has no writable queue")
        except Refused as exc:
            return pb.SendMessageResponse(status=refused(exc))
        submitted = [self._submit(m, queues, caller) for m in req.messages]  # in order: a group's stays in order
        entries = [await self._sent(m, ticket, caller) for m, ticket in zip(req.messages, submitted, strict=True)]
        return pb.SendMessageResponse(status=overall([e.status for e in entries]), entries=entries)

    def _submit(self, msg: pb.Message, queues: list[tuple[str, int]], caller: Caller
                ) -> tuple[Outgoing, str, Ticket[Send, SendAnswer]] | pb.SendResultEntry:
        """The message checked and put on its line (core/proxy/grpc/send_batches.py), or its refusal."""
        try:
            out = outgoing(msg, caller.peer_host)
            encode_properties(out.properties)  # a property that would not decode as it was sent
        except Refused as exc:
            return pb.SendResultEntry(status=refused(exc), message_id=msg.system_properties.message_id)
        except FormatError as exc:
            return pb.SendResultEntry(status=pb.Status(code=pb.BAD_REQUEST, message=str(exc)),
                                      message_id=msg.system_properties.message_id)
        session = self.clients.get(caller).session
        if out.message_group is not None:  # one group's messages go to one queue, in order
            group, queue_id = queues[zlib.crc32(out.message_group.encode()) % len(queues)]
            line = SendLine(session, group, out.topic, (queue_id,), True)
        else:
            group = queues[next(self._round_robin) % len(queues)][0]
            line = SendLine(session, group, out.topic, tuple(q for g, q in queues if g == group), False)
        mergeable = not out.sysflag and not out.transactional and not (out.properties.keys() & UNBATCHABLE)
        ticket = self.batches.submit(Send(out.topic, out.body, out.sysflag, out.properties, out.born_ms), line,
                                     ordered=line.ordered, mergeable=mergeable, size=len(out.body))
        return out, group, ticket

    async def _flush(self, line: SendLine, sends: list[Send]) -> list[SendAnswer]:
        """A line's batch to its group, on its client's session, to the line's next queue."""
        queue_id = line.queue_ids[next(self._round_robin) % len(line.queue_ids)]
        response = await self.forwarder.write(send_batch_request(sends, queue_id), line.session, line.group)
        return [SendAnswer(response, i) for i in range(len(sends))]

    async def _sent(self, msg: pb.Message, submitted: tuple[Outgoing, str, Ticket[Send, SendAnswer]] | pb.SendResultEntry,
                    caller: Caller) -> pb.SendResultEntry:
        if isinstance(submitted, pb.SendResultEntry):
            return submitted
        out, group, ticket = submitted
        answer = await ticket.answer() or SendAnswer(None)
        resp = answer.response
        message_id = msg.system_properties.message_id
        status = status_of(resp, "send")
        if resp is None or status.code != pb.OK:
            return pb.SendResultEntry(status=status, message_id=message_id)
        offset = answer.offset()
        transaction_id = resp.ext_fields.get("transactionId") or message_id
        if out.transactional:
            try:
                log_offset = decode_offset_msg_id(answer.msg_id()).phys_offset
            except FormatError:
                log_offset = -1
            self.clients.transactions.keep(out.topic, transaction_id, HalfMessage(
                group, offset, log_offset, answer.msg_id()))
        return pb.SendResultEntry(status=status, message_id=message_id, transaction_id=transaction_id, offset=offset,
                                  recall_handle=resp.ext_fields.get("recallHandle", "") if not answer.index else "")

    async def recall_message(self, req: pb.RecallMessageRequest, caller: Caller) -> pb.RecallMessageResponse:
        """RECALL_MESSAGE to the group the handle names: the timer message is not delivered."""
        try:
            topic = check_topic(req.topic.name)
            check_permission(self.shared.policy(), caller, topic=topic, topic_perm=PUB)
            try:
                handle = RecallHandle.parse(req.recall_handle)
            except RecallHandleError as exc:
                raise Refused(pb.BAD_REQUEST, str(exc)) from None
            if handle.broker_name not in self.forwarder.view.groups or handle.topic != topic:
                raise Refused(pb.BAD_REQUEST, "the recall handle names another topic or no broker group of the cluster")
        except Refused as exc:
            return pb.RecallMessageResponse(status=refused(exc))
        request = RemotingCommand(code=RequestCode.RECALL_MESSAGE, language="PYTHON", ext_fields={
            "producerGroup": topic, "topic": topic, "recallHandle": req.recall_handle})
        resp = await self.forwarder.write(request, self.clients.get(caller).session, handle.broker_name)
        status = status_of(resp, "recall")
        if resp is None or status.code != pb.OK:
            return pb.RecallMessageResponse(status=status)
        return pb.RecallMessageResponse(status=status, message_id=resp.ext_fields.get("msgId", handle.uniq_key))

    async def end_transaction(self, req: pb.EndTransactionRequest, caller: Caller) -> pb.EndTransactionResponse:
        if not req.transaction_id:
            return pb.EndTransactionResponse(status=pb.Status(code=pb.INVALID_TRANSACTION_ID, message="blank transaction_id"))
        try:
            topic = check_topic(req.topic.name)
            check_permission(self.shared.policy(), caller, topic=topic, topic_perm=PUB)
        except Refused as exc:
            return pb.EndTransactionResponse(status=refused(exc))
        half = self.clients.transactions.take(topic, req.transaction_id)
        if half is None:
            return pb.EndTransactionResponse(status=pb.Status(
                code=pb.INTERNAL_SERVER_ERROR, message="the proxy knows no half message with that transaction id "
                "(it answers the broker's check-back in time)"))
        outcome = {pb.COMMIT: TransactionState.COMMIT, pb.ROLLBACK: TransactionState.ROLLBACK}.get(
            req.resolution, TransactionState.UNKNOWN)
        request = end_transaction_request(topic, half.tran_state_offset, half.commit_log_offset, req.message_id,
                                          outcome, req.source == pb.SOURCE_SERVER_CHECK, req.transaction_id)
        request.flag |= FLAG_ONEWAY  # RocketMQ's proxy sends it oneway too: the check-back settles a lost one
        await self.forwarder.write(request, self.clients.get(caller).session, half.group)
        return pb.EndTransactionResponse(status=ok())
