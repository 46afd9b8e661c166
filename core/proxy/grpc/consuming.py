"""The consuming RPCs of the gRPC door: QueryAssignment, ReceiveMessage (POP), AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue."""

from __future__ import annotations

import trio

from core.broker.pop.headers import (
    INIT_MAX,
    INVISIBLE_TIME_MAX_MS,
    POLL_TIME_MAX_MS,
    POP_MESSAGES_MAX,
    PopHeader,
)
from core.clock import now_ms
from core.proxy.batching import Lines, Ticket
from core.proxy.grpc.ack_batches import ACKS_MAX, AckOf, ack_request, batch_ack_request, changed_handle
from core.proxy.grpc.auth import Caller, check_permission
from core.proxy.grpc.messages import Refused, check_group, check_topic, duration_ms, incoming
from core.proxy.grpc.renewals import Renewals
from core.proxy.grpc.routes import assignments
from core.proxy.grpc.shared import DoorShared
from core.proxy.grpc.status import NOT_FOUND, ok, overall, refused, status_of
from core.proxy.session import ClientSession
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.errors import FormatError
from formats.pop import PopAnswer, PopRecordError, ReceiptHandle, retry_topic
from formats.record import decode_records
from formats.rocketmq_v2 import messaging_pb2 as pb

LONG_POLL_DEFAULT_MS = 20_000


class Consuming:
    """The consumer's RPCs for a :class:`DoorShared`."""

    def __init__(self, service: DoorShared, nursery: trio.Nursery) -> None:
        self.shared = service
        self.forwarder = service.forwarder
        self.clients = service.clients
        self.settings = service.settings
        # acks lined up per (session, broker group): core/proxy/grpc/ack_batches.py
        self.acks: Lines[AckOf, RemotingCommand | None] = Lines(nursery, self._flush_acks, items_max=ACKS_MAX,
                                                                bytes_max=ACKS_MAX)  # acks carry no size
        self.renewals = Renewals(service.clients, service.forwarder, service.settings)

    async def query_assignment(self, req: pb.QueryAssignmentRequest, caller: Caller) -> pb.QueryAssignmentResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
            fifo = await self.shared.fifo(group, self.clients.get(caller).session)
            found = assignments(topic, await self.shared.spans(topic), req.endpoints, fifo=fifo)
            if not found:
                raise Refused(pb.FORBIDDEN, "no readable queue")
            return pb.QueryAssignmentResponse(status=ok(), assignments=found)
        except Refused as exc:
            return pb.QueryAssignmentResponse(status=refused(exc))

    def _invisible_ms(self, req: pb.ReceiveMessageRequest) -> int:
        if req.auto_renew:
            return self.settings.auto_renew_slice_ms  # renewed while the client works (grpc_renewals.py)
        if not req.HasField("invisible_duration"):
            raise Refused(pb.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew")
        value = duration_ms(req.invisible_duration)
        if not self.settings.min_invisible_ms <= value <= INVISIBLE_TIME_MAX_MS:
            raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"invisible_duration must be {self.settings.min_invisible_ms} ms"
                                                     f" to {INVISIBLE_TIME_MAX_MS} ms, not {value} ms")
        return value

    async def receive_message(self, req: pb.ReceiveMessageRequest, caller: Caller) -> list[pb.ReceiveMessageResponse]:
        """The frames of the answer stream: a status, the messages, a delivery timestamp."""
        try:
            messages = await self._receive(req, caller)
            head = [pb.ReceiveMessageResponse(status=ok())] if messages else \
                [pb.ReceiveMessageResponse(status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message="no new message"))]
        except Refused as exc:
            messages, head = [], [pb.ReceiveMessageResponse(status=refused(exc))]
        tail = pb.ReceiveMessageResponse()
        tail.delivery_timestamp.GetCurrentTime()
        return head + [pb.ReceiveMessageResponse(message=m) for m in messages] + [tail]

    async def _receive(self, req: pb.ReceiveMessageRequest, caller: Caller) -> list[pb.Message]:
        topic, group = self._consumer_of(req.message_queue.topic.name, req.group.name, caller)
        broker = req.message_queue.broker.name
        if not broker:
            raise Refused(pb.BAD_REQUEST, "the message queue names no broker")
        invisible = self._invisible_ms(req)
        fifo = await self.shared.fifo(group, self.clients.get(caller).session)
        poll_ms = duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") else LONG_POLL_DEFAULT_MS
        pop = PopHeader(
            group=group, topic=topic, queue_id=req.message_queue.id if fifo else -1,
            max_msg_nums=max(1, min(req.batch_size or POP_MESSAGES_MAX, POP_MESSAGES_MAX)), invisible_time_ms=invisible,
            poll_time_ms=max(0, min(poll_ms, POLL_TIME_MAX_MS)), born_time_ms=now_ms(),
            init_mode=INIT_MAX, expression_type="SQL92" if req.filter_expression.type == pb.SQL else "TAG",
            expression=req.filter_expression.expression or "*", order=fifo,
            attempt_id=req.attempt_id if req.HasField("attempt_id") else "")
        client = self.clients.get(caller)
        resp = await self.forwarder.write(pop.request(), client.session, broker)
        if resp is not None and resp.code in NOT_FOUND:
            return []
        if resp is None or resp.code != ResponseCode.SUCCESS:
            status = status_of(resp, "receive")
            raise Refused(status.code, status.message)
        try:
            answer = PopAnswer.parse(resp.ext_fields)
            records = decode_records(resp.body or b"")
        except (FormatError, PopRecordError) as exc:
            raise Refused(pb.INTERNAL_SERVER_ERROR, f"the broker's POP answer does not parse: {exc}") from None
        out = []
        for record in records:
            handle = answer.handle(record.topic, record.queue_id, record.queue_offset, broker, record.phys_offset)
            attempt = answer.deliveries_before(record.queue_id, record.queue_offset) + 1 if fifo \
                else record.reconsume_times + 1
            if attempt > self.settings.max_delivery_attempts:
                await self._to_dead_letters(client.session, group, topic, handle, record.uniq_key or "")
                continue
            text = handle.text(with_commit_log_offset=True)
            if req.auto_renew:
                self.renewals.keep(client, text, group, topic, handle)
            out.append(incoming(record, topic, receipt_handle=text,
                                delivery_attempt=attempt))
        return out

    def _consumer_of(self, topic_name: str, group_name: str, caller: Caller) -> tuple[str, str]:
        """(topic, group) of a consumer's call, checked, and allowed to the caller's account."""
        topic, group = check_topic(topic_name), check_group(group_name)
        check_permission(self.shared.policy(), caller, topic=topic, group=group)
        return topic, group

    def _handle(self, text: str) -> ReceiptHandle:
        try:
            handle = ReceiptHandle.parse(text)
        except PopRecordError as exc:
            raise Refused(pb.INVALID_RECEIPT_HANDLE, str(exc)) from None
        if handle.visible_again_ms() <= now_ms():
            raise Refused(pb.INVALID_RECEIPT_HANDLE, "the receipt handle has expired: the message is visible again")
        return handle

    async def ack_message(self, req: pb.AckMessageRequest, caller: Caller) -> pb.AckMessageResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
        except Refused as exc:
            return pb.AckMessageResponse(status=refused(exc))
        client = self.clients.get(caller)
        session = client.session
        lined: list[Ticket[AckOf, RemotingCommand | None] | pb.Status] = []
        for entry in req.entries:  # every entry lined up first: those of one request share a batch
            try:
                ack = AckOf(group, topic, self._handle(await self.renewals.latest(client, entry.receipt_handle)))
            except Refused as exc:
                lined.append(refused(exc))
                continue
            lined.append(self.acks.submit(ack, (session, ack.handle.broker_name), ordered=False,
                                          mergeable=ack.mergeable))
        entries = []
        for entry, ticket in zip(req.entries, lined, strict=True):
            status = ticket if isinstance(ticket, pb.Status) else status_of(await ticket.answer(), "ack")
            entries.append(pb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                                    status=status))
        return pb.AckMessageResponse(status=overall([e.status for e in entries]), entries=entries)

    async def _flush_acks(self, line: tuple[ClientSession, str], acks: list[AckOf]) -> list[RemotingCommand | None]:
        """One ACK_MESSAGE, or one BATCH_ACK_MESSAGE for several; every ack gets the batch's answer."""
        session, broker = line
        request = ack_request(acks[0]) if len(acks) == 1 else batch_ack_request(acks)
        return [await self.forwarder.write(request, session, broker)] * len(acks)

    async def change_invisible_duration(self, req: pb.ChangeInvisibleDurationRequest,
                                        caller: Caller) -> pb.ChangeInvisibleDurationResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
            handle = self._handle(await self.renewals.latest(self.clients.get(caller), req.receipt_handle))
            invisible = duration_ms(req.invisible_duration)
            if not 0 <= invisible <= INVISIBLE_TIME_MAX_MS:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"invisible_duration must be 0 to {INVISIBLE_TIME_MAX_MS} ms")
        except Refused as exc:
            return pb.ChangeInvisibleDurationResponse(status=refused(exc))
        resp = await self.forwarder.write(ack_request(AckOf(group, topic, handle), invisible_ms=invisible),
                                      self.clients.get(caller).session, handle.broker_name)
        status = status_of(resp, "change invisible duration")
        if resp is None or status.code != pb.OK:
            return pb.ChangeInvisibleDurationResponse(status=status)
        new = changed_handle(handle, resp)
        if new is None:
            return pb.ChangeInvisibleDurationResponse(status=pb.Status(
                code=pb.INTERNAL_SERVER_ERROR, message="the broker's answer lacks popTime or invisibleTime"))
        return pb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=new.text(with_commit_log_offset=True))

    async def forward_to_dead_letter_queue(self, req: pb.ForwardMessageToDeadLetterQueueRequest,
                                           caller: Caller) -> pb.ForwardMessageToDeadLetterQueueResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
            handle = self._handle(await self.renewals.latest(self.clients.get(caller), req.receipt_handle))
        except Refused as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=refused(exc))
        status = await self._to_dead_letters(self.clients.get(caller).session, group, topic, handle, req.message_id)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status)

    async def _to_dead_letters(self, session, group: str, topic: str, handle: ReceiptHandle,
                               message_id: str) -> pb.Status:
        """Copy the message to ``%DLQ%{group}`` (CONSUMER_SEND_MSG_BACK, delay level -1), then ack it."""
        if handle.commit_log_offset < 0:
            return pb.Status(code=pb.INVALID_RECEIPT_HANDLE, message="the receipt handle has no commit log offset")
        back = RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, language="PYTHON", ext_fields={
            "offset": str(handle.commit_log_offset), "group": group, "delayLevel": "-1", "originMsgId": message_id,
            "originTopic": retry_topic(group, topic, handle.retry_flag) if handle.retry_flag else topic,
            "unitMode": "false", "maxReconsumeTimes": "0"})
        resp = await self.forwarder.write(back, session, handle.broker_name)
        status = status_of(resp, "forward to the dead letter queue")
        if status.code != pb.OK:
            return status
        return status_of(await self.forwarder.write(ack_request(AckOf(group, topic, handle)), session, handle.broker_name),
                         "ack after the dead letter queue")
