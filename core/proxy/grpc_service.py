"""``apache.rocketmq.v2.MessagingService`` on trio: each RPC turned into the 4.x requests our
brokers serve, forwarded through the proxy's :class:`FrontDoor` (which follows masters and raft
leaders, and resends a send that died with its leader).

| RPC                      | upstream                                                    |
|--------------------------|-------------------------------------------------------------|
| QueryRoute/Assignment    | GET_ROUTEINFO_BY_TOPIC to a name server                     |
| SendMessage              | SEND_MESSAGE_V2 to the queue's group                        |
| ReceiveMessage           | POP_MESSAGE (queue -1, or the queue for a FIFO group)        |
| AckMessage               | ACK_MESSAGE, one per entry                                  |
| ChangeInvisibleDuration  | CHANGE_MESSAGE_INVISIBLETIME; the answer makes a new handle  |
| ForwardToDeadLetterQueue | CONSUMER_SEND_MSG_BACK (delay level -1), then ACK_MESSAGE     |
| EndTransaction           | END_TRANSACTION (oneway) to the group holding the half       |
| Heartbeat / Settings     | a producer's topics heartbeated as producer groups          |

Every failure is a ``Status`` in the answer with the proto's code (RocketMQ's proxy answers gRPC
OK with the code inside); the codes are listed in docs/grpc.md.
"""

from __future__ import annotations

import itertools
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from core.acl.file import AclFile
from core.acl.permissions import PUB, SUB
from core.broker.pop.headers import (
    INIT_MAX,
    INVISIBLE_TIME_MAX_MS,
    POLL_TIME_MAX_MS,
    POP_MESSAGES_MAX,
    AckHeader,
    PopHeader,
)
from core.client.producer import send_request
from core.client.transaction_producer import TransactionState, end_transaction_request
from core.config import ProxySettings
from core.errors import RemotingError
from core.proxy.front_door import FrontDoor
from core.proxy.grpc_auth import Caller, check_permission
from core.proxy.grpc_clients import GrpcClients, HalfMessage, Push
from core.proxy.grpc_messages import Refused, check_group, check_topic, duration_ms, incoming, outgoing
from core.proxy.grpc_routes import QueueSpan, assignments, message_queues, queue_spans, writable
from core.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.errors import FormatError
from formats.msgid import decode_offset_msg_id
from formats.pop import PopAnswer, PopRecordError, ReceiptHandle, retry_topic
from formats.record import decode_records
from formats.rocketmq_v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)
T = TypeVar("T")

CONSUMER_TYPES = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER})
AUTO_RENEW_INVISIBLE_MS = 60_000
LONG_POLL_DEFAULT_MS = 20_000
ROUTE_KEEP_S = 3.0  # a topic's queues as last asked; new queues are used this much later at most
ROUTES_KEPT_MAX = 10_000
# a remoting answer's code as a 5.x status code (RocketMQ's proxy's ResponseBuilder)
STATUS_OF = {
    ResponseCode.SUCCESS: pb.OK, ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN, ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.ILLEGAL_FILTER_EXPRESSION, ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.NO_MESSAGE: pb.INVALID_RECEIPT_HANDLE, ResponseCode.POLLING_FULL: pb.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.PROXY_TIMEOUT,
}
NOT_FOUND = frozenset({ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND, ResponseCode.NO_MESSAGE})


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=pb.OK, message=message)


def status_of(resp: RemotingCommand | None, what: str) -> pb.Status:
    if resp is None:
        return pb.Status(code=pb.INTERNAL_SERVER_ERROR, message=f"{what}: no answer")
    if resp.code == ResponseCode.SUCCESS:
        return ok()
    return pb.Status(code=STATUS_OF.get(resp.code, pb.INTERNAL_SERVER_ERROR),
                     message=f"{what}: {resp.remark or 'refused'} (code {resp.code})")


def overall(statuses: list[pb.Status]) -> pb.Status:
    """A request's status from its entries': theirs when they agree, else MULTIPLE_RESULTS."""
    if not statuses:
        return ok()
    return statuses[0] if len({s.code for s in statuses}) == 1 else \
        pb.Status(code=pb.MULTIPLE_RESULTS, message="results differ")


def refused(exc: Refused) -> pb.Status:
    return pb.Status(code=exc.code, message=exc.message)


class MessagingService:
    """The RPCs, each ``async (request, caller) -> response`` on trio."""

    def __init__(self, front: FrontDoor, clients: GrpcClients, settings: ProxySettings,
                 acl: AclFile | None) -> None:
        self.front = front
        self.clients = clients
        self.settings = settings
        self.acl = acl
        self._round_robin = itertools.count()
        self._routes: dict[str, tuple[float, list[QueueSpan]]] = {}  # topic -> (when asked, its queues)
        self.counts: dict[str, int] = {}
        self.door_stats: Callable[[], dict[str, str]] = dict  # the gRPC server's own counters, once it runs

    def _policy(self):  # the accounts as now (the file is re-read when it changes)
        return self.acl.policy if self.acl is not None else None

    def runtime_table(self) -> dict[str, str]:
        """The gRPC door's counters, in the proxy's GET_BROKER_RUNTIME_INFO table."""
        return {"grpcClients": str(len(self.clients)), "grpcCheckBacks": str(self.clients.check_backs),
                **self.door_stats(), **{f"grpc{rpc}": str(n) for rpc, n in sorted(self.counts.items())}}

    def count(self, rpc: str) -> None:
        """One more call of ``rpc``; on the trio thread only, as every counter here."""
        self.counts[rpc] = self.counts.get(rpc, 0) + 1

    async def serve(self, rpc: str, method: Callable[[Any, Caller], Awaitable[T]], request: Any, caller: Caller,
                    refuse: Callable[[pb.Status], T]) -> T:
        """One call: counted, the caller's client record claimed (made on its first call; its id
        must be its own account's, and new clients are bounded), then ``method``. A
        :class:`Refused` on the way is answered ``refuse(status)``."""
        self.count(rpc)
        try:
            self.clients.get(caller)
            return await method(request, caller)
        except Refused as exc:
            return refuse(refused(exc))

    # ------------------------------------------------------------------ routes

    async def _spans(self, topic: str, *, fresh: bool = False) -> list[QueueSpan]:
        """The topic's queues by group: from the name servers when ``fresh`` or when the copy
        kept is older than ``ROUTE_KEEP_S`` (a send per message must not cost a route query)."""
        kept = self._routes.get(topic)
        if not fresh and kept is not None and trio.current_time() - kept[0] < ROUTE_KEEP_S:
            return kept[1]
        spans = await self._ask_spans(topic)
        if len(self._routes) >= ROUTES_KEPT_MAX:
            self._routes.clear()
        self._routes[topic] = (trio.current_time(), spans)
        return spans

    async def _ask_spans(self, topic: str) -> list[QueueSpan]:
        request = RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
        resp = await self.front.ask_name_servers(request)
        if resp is None or resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise Refused(pb.TOPIC_NOT_FOUND, f"topic {topic!r} not found")
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            raise Refused(pb.INTERNAL_SERVER_ERROR, f"route of {topic!r}: {resp.remark} (code {resp.code})")
        try:
            return queue_spans(resp.body)
        except (ValueError, TypeError) as exc:
            raise Refused(pb.INTERNAL_SERVER_ERROR, f"route of {topic!r} does not parse: {exc}") from None

    async def query_route(self, req: pb.QueryRouteRequest, caller: Caller) -> pb.QueryRouteResponse:
        try:
            topic = check_topic(req.topic.name)
            check_permission(self._policy(), caller, topic=topic, topic_perm=PUB | SUB)  # either, as RocketMQ's
            spans = await self._spans(topic, fresh=True)
            if not req.endpoints.addresses:
                raise Refused(pb.ILLEGAL_ACCESS_POINT, "QueryRoute names no endpoints")
            return pb.QueryRouteResponse(status=ok(), message_queues=message_queues(topic, spans, req.endpoints))
        except Refused as exc:
            return pb.QueryRouteResponse(status=refused(exc))

    async def query_assignment(self, req: pb.QueryAssignmentRequest, caller: Caller) -> pb.QueryAssignmentResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
            found = assignments(topic, await self._spans(topic), req.endpoints, fifo=self.clients.fifo(group))
            if not found:
                raise Refused(pb.FORBIDDEN, "no readable queue")
            return pb.QueryAssignmentResponse(status=ok(), assignments=found)
        except Refused as exc:
            return pb.QueryAssignmentResponse(status=refused(exc))

    # ------------------------------------------------------------------ clients

    async def heartbeat(self, req: pb.HeartbeatRequest, caller: Caller) -> pb.HeartbeatResponse:
        client = self.clients.get(caller)
        if req.HasField("group") and req.client_type in CONSUMER_TYPES:
            try:
                check_permission(self._policy(), caller, group=check_group(req.group.name))
            except Refused as exc:
                return pb.HeartbeatResponse(status=refused(exc))
        if client.settings is None:
            return pb.HeartbeatResponse(status=pb.Status(code=pb.UNRECOGNIZED_CLIENT_TYPE,
                                                         message="no settings yet: open the telemetry stream first"))
        await self._producer_heartbeat(caller)
        return pb.HeartbeatResponse(status=ok())

    async def _producer_heartbeat(self, caller: Caller) -> None:
        client = self.clients.get(caller)
        beat = self.clients.producer_heartbeat(client)
        if beat is None:
            return
        for group in sorted(self.front.view.groups):
            client.session.remember_heartbeat(group, beat)
            try:
                await self.front.to_every_member(beat, client.session, group)
            except RemotingError as exc:  # the next heartbeat tries again
                log.debug("heartbeat of %s to %s: %s", caller.client_id, group, exc)

    async def apply_settings(self, command: pb.TelemetryCommand, caller: Caller) -> pb.TelemetryCommand:
        """A Settings command on the telemetry stream: the applied settings, status OK. A
        producer's topics need PUB (the proxy registers it as their producer, and brokers send
        it their transactions' check-backs, bodies included); a consumer's group and topics SUB."""
        client = self.clients.get(caller)
        settings = command.settings
        policy = self._policy()
        if settings.HasField("publishing"):
            for resource in settings.publishing.topics:
                check_permission(policy, caller, topic=check_topic(resource.name), topic_perm=PUB)
        elif settings.HasField("subscription"):
            group = check_group(settings.subscription.group.name)
            check_permission(policy, caller, group=group)
            for entry in settings.subscription.subscriptions:
                check_permission(policy, caller, topic=check_topic(entry.topic.name))
        else:
            raise Refused(pb.BAD_REQUEST, "settings name neither publishing nor subscription")
        reply = self.clients.settings_reply(client, settings)
        await self._producer_heartbeat(caller)
        return pb.TelemetryCommand(status=ok(), settings=reply)

    async def attach_stream(self, caller: Caller, push: Push) -> None:
        self.count("Telemetry")
        self.clients.attach(caller, push)

    def detach_stream(self, caller: Caller, push: Push) -> None:
        self.clients.detach(caller.client_id, push)

    async def notify_client_termination(self, req: pb.NotifyClientTerminationRequest,
                                        caller: Caller) -> pb.NotifyClientTerminationResponse:
        self.clients.terminate(caller)  # Refused when the client id is another account's
        return pb.NotifyClientTerminationResponse(status=ok())

    # ------------------------------------------------------------------ producing

    async def send_message(self, req: pb.SendMessageRequest, caller: Caller) -> pb.SendMessageResponse:
        if not req.messages:
            return pb.SendMessageResponse(status=pb.Status(code=pb.MESSAGE_CORRUPTED, message="no message to send"))
        topics = {m.topic.name for m in req.messages}
        if len(topics) > 1:
            return pb.SendMessageResponse(status=pb.Status(code=pb.MESSAGE_CORRUPTED,
                                                           message="the messages of one request name different topics"))
        try:
            topic = check_topic(topics.pop())
            check_permission(self._policy(), caller, topic=topic, topic_perm=PUB)
            queues = writable(await self._spans(topic))
            if not queues:
                raise Refused(pb.FORBIDDEN, f"topic {topic!r} has no writable queue")
        except Refused as exc:
            return pb.SendMessageResponse(status=refused(exc))
        entries = [await self._send_one(m, queues, caller) for m in req.messages]
        return pb.SendMessageResponse(status=overall([e.status for e in entries]), entries=entries)

    async def _send_one(self, msg: pb.Message, queues: list[tuple[str, int]], caller: Caller) -> pb.SendResultEntry:
        try:
            out = outgoing(msg, caller.peer_host)
        except Refused as exc:
            return pb.SendResultEntry(status=refused(exc), message_id=msg.system_properties.message_id)
        if out.message_group is not None:  # one group's messages go to one queue, in order
            group, queue_id = queues[zlib.crc32(out.message_group.encode()) % len(queues)]
        else:
            group, queue_id = queues[next(self._round_robin) % len(queues)]
        try:  # RocketMQ's proxy sends with the topic as the producer group
            request = send_request(out.topic, out.topic, queue_id, out.body, out.sysflag, 0, out.properties,
                                   born_ms=out.born_ms)
        except FormatError as exc:  # a property that would not decode as it was sent
            return pb.SendResultEntry(status=pb.Status(code=pb.BAD_REQUEST, message=str(exc)),
                                      message_id=msg.system_properties.message_id)
        client = self.clients.get(caller)
        resp = await self.front.write(request, client.session, group)
        message_id = msg.system_properties.message_id
        status = status_of(resp, "send")
        if resp is None or status.code != pb.OK:
            return pb.SendResultEntry(status=status, message_id=message_id)
        offset = int(resp.ext_fields.get("queueOffset", "-1"))
        transaction_id = resp.ext_fields.get("transactionId") or message_id
        if out.transactional:
            try:
                log_offset = decode_offset_msg_id(resp.ext_fields.get("msgId", "")).phys_offset
            except FormatError:
                log_offset = -1
            self.clients.transactions.keep(out.topic, transaction_id, HalfMessage(
                group, offset, log_offset, resp.ext_fields.get("msgId", "")))
        return pb.SendResultEntry(status=status, message_id=message_id, transaction_id=transaction_id, offset=offset)

    async def end_transaction(self, req: pb.EndTransactionRequest, caller: Caller) -> pb.EndTransactionResponse:
        if not req.transaction_id:
            return pb.EndTransactionResponse(status=pb.Status(code=pb.INVALID_TRANSACTION_ID, message="blank transaction_id"))
        try:
            topic = check_topic(req.topic.name)
            check_permission(self._policy(), caller, topic=topic, topic_perm=PUB)
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
        await self.front.write(request, self.clients.get(caller).session, half.group)
        return pb.EndTransactionResponse(status=ok())

    # ------------------------------------------------------------------ consuming

    def _invisible_ms(self, req: pb.ReceiveMessageRequest) -> int:
        if req.auto_renew:
            return AUTO_RENEW_INVISIBLE_MS
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
        fifo = self.clients.fifo(group)
        poll_ms = duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") else LONG_POLL_DEFAULT_MS
        pop = PopHeader(
            group=group, topic=topic, queue_id=req.message_queue.id if fifo else -1,
            max_msg_nums=max(1, min(req.batch_size or POP_MESSAGES_MAX, POP_MESSAGES_MAX)), invisible_time_ms=invisible,
            poll_time_ms=max(0, min(poll_ms, POLL_TIME_MAX_MS)), born_time_ms=int(time.time() * 1000),
            init_mode=INIT_MAX, expression_type="SQL92" if req.filter_expression.type == pb.SQL else "TAG",
            expression=req.filter_expression.expression or "*", order=fifo,
            attempt_id=req.attempt_id if req.HasField("attempt_id") else "")
        client = self.clients.get(caller)
        resp = await self.front.write(pop.request(), client.session, broker)
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
            out.append(incoming(record, topic, receipt_handle=handle.text(with_commit_log_offset=True),
                                delivery_attempt=attempt))
        return out

    def _consumer_of(self, topic_name: str, group_name: str, caller: Caller) -> tuple[str, str]:
        """(topic, group) of a consumer's call, checked, and allowed to the caller's account."""
        topic, group = check_topic(topic_name), check_group(group_name)
        check_permission(self._policy(), caller, topic=topic, group=group)
        return topic, group

    def _handle(self, text: str) -> ReceiptHandle:
        try:
            handle = ReceiptHandle.parse(text)
        except PopRecordError as exc:
            raise Refused(pb.INVALID_RECEIPT_HANDLE, str(exc)) from None
        if handle.visible_again_ms() <= time.time() * 1000:
            raise Refused(pb.INVALID_RECEIPT_HANDLE, "the receipt handle has expired: the message is visible again")
        return handle

    @staticmethod
    def _ack_request(group: str, topic: str, handle: ReceiptHandle, *, invisible_ms: int | None = None) -> RemotingCommand:
        header = AckHeader(group=group, topic=handle.real_topic(group, topic), queue_id=handle.queue_id, handle=handle,
                           offset=handle.queue_offset, invisible_time_ms=invisible_ms or 0)
        return header.request(change=invisible_ms is not None)

    async def ack_message(self, req: pb.AckMessageRequest, caller: Caller) -> pb.AckMessageResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
        except Refused as exc:
            return pb.AckMessageResponse(status=refused(exc))
        session = self.clients.get(caller).session
        entries = []
        for entry in req.entries:
            try:
                handle = self._handle(entry.receipt_handle)
                resp = await self.front.write(self._ack_request(group, topic, handle), session, handle.broker_name)
                status = status_of(resp, "ack")
            except Refused as exc:
                status = refused(exc)
            entries.append(pb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                                    status=status))
        return pb.AckMessageResponse(status=overall([e.status for e in entries]), entries=entries)

    async def change_invisible_duration(self, req: pb.ChangeInvisibleDurationRequest,
                                        caller: Caller) -> pb.ChangeInvisibleDurationResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
            handle = self._handle(req.receipt_handle)
            invisible = duration_ms(req.invisible_duration)
            if not 0 <= invisible <= INVISIBLE_TIME_MAX_MS:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"invisible_duration must be 0 to {INVISIBLE_TIME_MAX_MS} ms")
        except Refused as exc:
            return pb.ChangeInvisibleDurationResponse(status=refused(exc))
        resp = await self.front.write(self._ack_request(group, topic, handle, invisible_ms=invisible),
                                      self.clients.get(caller).session, handle.broker_name)
        status = status_of(resp, "change invisible duration")
        if resp is None or status.code != pb.OK:
            return pb.ChangeInvisibleDurationResponse(status=status)
        try:
            new = ReceiptHandle(
                handle.ck_start_offset if handle.ordered else handle.queue_offset,
                int(resp.ext_fields["popTime"]), int(resp.ext_fields["invisibleTime"]),
                int(resp.ext_fields.get("reviveQid", handle.revive_qid)), handle.retry_flag, handle.broker_name,
                handle.queue_id, handle.queue_offset, handle.commit_log_offset)
        except (KeyError, ValueError):
            return pb.ChangeInvisibleDurationResponse(status=pb.Status(
                code=pb.INTERNAL_SERVER_ERROR, message="the broker's answer lacks popTime or invisibleTime"))
        return pb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=new.text(with_commit_log_offset=True))

    async def forward_to_dead_letter_queue(self, req: pb.ForwardMessageToDeadLetterQueueRequest,
                                           caller: Caller) -> pb.ForwardMessageToDeadLetterQueueResponse:
        try:
            topic, group = self._consumer_of(req.topic.name, req.group.name, caller)
            handle = self._handle(req.receipt_handle)
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
        resp = await self.front.write(back, session, handle.broker_name)
        status = status_of(resp, "forward to the dead letter queue")
        if status.code != pb.OK:
            return status
        return status_of(await self.front.write(self._ack_request(group, topic, handle), session, handle.broker_name),
                         "ack after the dead letter queue")
