"""What the gRPC door's RPCs share: the forwarding, the clients, the settings, the accounts,
and the topics' queues as the name servers last told (kept ``ROUTE_KEEP_S``)."""

from __future__ import annotations

import trio

from core.acl.file import AclFile
from core.acl.policy import AclPolicy
from core.config import ProxySettings
from core.proxy.front_door import FrontDoor
from core.proxy.grpc_clients import GrpcClients
from core.proxy.grpc_messages import Refused
from core.proxy.grpc_routes import QueueSpan, queue_spans
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.rocketmq_v2 import messaging_pb2 as pb

ROUTE_KEEP_S = 3.0  # a topic's queues as last asked; new queues are used this much later at most
ROUTES_KEPT_MAX = 10_000


class DoorShared:
    """The state every RPC of the door reads (on the proxy's trio thread only)."""

    def __init__(self, front: FrontDoor, clients: GrpcClients, settings: ProxySettings, acl: AclFile | None) -> None:
        self.front = front
        self.clients = clients
        self.settings = settings
        self.acl = acl
        self._routes: dict[str, tuple[float, list[QueueSpan]]] = {}  # topic -> (when asked, its queues)

    def policy(self) -> AclPolicy | None:
        """The accounts as now (the file is re-read when it changes); None with ACL off."""
        return self.acl.policy if self.acl is not None else None

    async def spans(self, topic: str, *, fresh: bool = False) -> list[QueueSpan]:
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
