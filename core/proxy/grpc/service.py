"""``apache.rocketmq.v2.MessagingService`` on trio: each RPC turned into the 4.x requests our
brokers serve, forwarded through the proxy's :class:`Forwarder` (which follows masters and raft
leaders, and resends a send that died with its leader).

| RPC                      | upstream                                                    |
|--------------------------|-------------------------------------------------------------|
| QueryRoute/Assignment    | GET_ROUTEINFO_BY_TOPIC to a name server                     |
| SendMessage              | SEND_MESSAGE_V2, or concurrent sends merged into SEND_BATCH_MESSAGE |
| ReceiveMessage           | POP_MESSAGE (queue -1, or the queue for a FIFO group)        |
| AckMessage               | ACK_MESSAGE, one per entry                                  |
| ChangeInvisibleDuration  | CHANGE_MESSAGE_INVISIBLETIME; the answer makes a new handle  |
| ForwardToDeadLetterQueue | CONSUMER_SEND_MSG_BACK (delay level -1), then ACK_MESSAGE     |
| EndTransaction           | END_TRANSACTION (oneway) to the group holding the half       |
| Heartbeat / Settings     | a producer's topics heartbeated as producer groups          |

The producing RPCs are in core/proxy/grpc/producing.py, the consuming ones in
core/proxy/grpc/consuming.py; this class keeps what both share (routes, clients, settings,
telemetry). Every failure is a ``Status`` in the answer with the proto's code (RocketMQ's proxy answers gRPC
OK with the code inside); the codes are listed in docs/grpc.md.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any, TypeVar

import trio

from core.acl.file import AclFile
from core.acl.permissions import PUB, SUB
from core.config import ProxySettings
from core.errors import RemotingError
from core.proxy.forwarder import Forwarder
from core.proxy.grpc.auth import Caller, check_permission
from core.proxy.grpc.clients import GrpcClients, Push
from core.proxy.grpc.consuming import Consuming
from core.proxy.grpc.messages import (
    Refused,
    check_group,
    check_topic,
)
from core.proxy.grpc.producing import Producing
from core.proxy.grpc.routes import message_queues
from core.proxy.grpc.shared import DoorShared
from core.proxy.grpc.status import ok, refused
from core.proxy.meters import ProxyMeters
from formats.rocketmq_v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)
T = TypeVar("T")

CONSUMER_TYPES = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER})


class MessagingService(DoorShared):
    """The RPCs, each ``async (request, caller) -> response`` on trio: routes, clients and
    telemetry here, the producer's in :attr:`producing`, the consumer's in :attr:`consuming`."""

    def __init__(self, forwarder: Forwarder, clients: GrpcClients, settings: ProxySettings,
                 acl: AclFile | None, nursery: trio.Nursery) -> None:
        super().__init__(forwarder, clients, settings, acl)
        self.producing = Producing(self, nursery)
        self.consuming = Consuming(self, nursery)
        self.counts: dict[str, int] = {}
        self.meters: ProxyMeters | None = None  # the proxy's, once it serves metrics
        self.door_stats: Callable[[], dict[str, str]] = dict  # the gRPC server's own counters, once it runs

    def runtime_table(self) -> dict[str, str]:
        """The gRPC door's counters, in the proxy's GET_BROKER_RUNTIME_INFO table."""
        batches, acks, renewals = self.producing.batches, self.consuming.acks, self.consuming.renewals
        return {"grpcClients": str(len(self.clients)), "grpcCheckBacks": str(self.clients.check_backs),
                "grpcSendRequests": str(batches.batches), "grpcSendMessages": str(batches.items),
                "grpcAckRequests": str(acks.batches), "grpcAcks": str(acks.items),
                "grpcRenewing": str(renewals.count()), "grpcRenewed": str(renewals.renewed),
                "grpcRenewSkipped": str(renewals.skipped),
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
        started = perf_counter()
        try:
            self.clients.get(caller)
            answer = await method(request, caller)
        except Refused as exc:
            answer = refuse(refused(exc))
        if self.meters is not None:
            self.meters.grpc_answered(rpc, answer, started)
        return answer

    async def query_route(self, req: pb.QueryRouteRequest, caller: Caller) -> pb.QueryRouteResponse:
        try:
            topic = check_topic(req.topic.name)
            check_permission(self.policy(), caller, topic=topic, topic_perm=PUB | SUB)  # either, as RocketMQ's
            spans = await self.spans(topic, fresh=True)
            if not req.endpoints.addresses:
                raise Refused(pb.ILLEGAL_ACCESS_POINT, "QueryRoute names no endpoints")
            return pb.QueryRouteResponse(status=ok(), message_queues=message_queues(topic, spans, req.endpoints))
        except Refused as exc:
            return pb.QueryRouteResponse(status=refused(exc))

    # ------------------------------------------------------------------ clients

    async def heartbeat(self, req: pb.HeartbeatRequest, caller: Caller) -> pb.HeartbeatResponse:
        client = self.clients.get(caller)
        if req.HasField("group") and req.client_type in CONSUMER_TYPES:
            try:
                check_permission(self.policy(), caller, group=check_group(req.group.name))
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
        for group in sorted(self.forwarder.view.groups):
            client.session.remember_heartbeat(group, beat)
            try:
                await self.forwarder.to_every_member(beat, client.session, group)
            except RemotingError as exc:  # the next heartbeat tries again
                log.debug("heartbeat of %s to %s: %s", caller.client_id, group, exc)

    async def apply_settings(self, command: pb.TelemetryCommand, caller: Caller) -> pb.TelemetryCommand:
        """A Settings command on the telemetry stream: the applied settings, status OK. A
        producer's topics need PUB (the proxy registers it as their producer, and brokers send
        it their transactions' check-backs, bodies included); a consumer's group and topics SUB."""
        client = self.clients.get(caller)
        settings = command.settings
        policy = self.policy()
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
        fifo = settings.HasField("subscription") and await self.fifo(settings.subscription.group.name, client.session)
        reply = self.clients.settings_reply(client, settings, fifo=fifo)
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

    # ------------------------------------------------------------------ consuming

