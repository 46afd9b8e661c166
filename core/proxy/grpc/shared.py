"""What the gRPC door's RPCs share: the forwarding, the clients, the settings, the accounts,
the topics' queues as the name servers last told (kept ``ROUTE_KEEP_S``), and which consumer
groups consume in order, as the brokers' subscription groups say (``consumeMessageOrderly``,
set with ``mqctl group set NAME --orderly``; kept ``GROUPS_KEEP_S``)."""

from __future__ import annotations

import logging

import orjson
import trio

from core.acl.file import AclFile
from core.acl.policy import AclPolicy
from core.config import ProxySettings
from core.errors import RemotingError
from core.proxy.forwarder import Forwarder
from core.proxy.grpc.clients import GrpcClients
from core.proxy.grpc.messages import Refused
from core.proxy.grpc.routes import QueueSpan, queue_spans
from core.proxy.session import ClientSession
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.rocketmq_v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

ROUTE_KEEP_S = 3.0  # a topic's queues as last asked; new queues are used this much later at most
ROUTES_KEPT_MAX = 10_000
GROUPS_KEEP_S = 3.0  # a group made orderly is consumed in order this much later at most


class DoorShared:
    """The state every RPC of the door reads (on the proxy's trio thread only)."""

    def __init__(self, forwarder: Forwarder, clients: GrpcClients, settings: ProxySettings, acl: AclFile | None) -> None:
        self.forwarder = forwarder
        self.clients = clients
        self.settings = settings
        self.acl = acl
        self._routes: dict[str, tuple[float, list[QueueSpan]]] = {}  # topic -> (when asked, its queues)
        self._orderly: dict[str, tuple[float, frozenset[str]]] = {}  # broker group -> (when asked, orderly groups)

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
        resp = await self.forwarder.ask_name_servers(request)
        if resp is None or resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise Refused(pb.TOPIC_NOT_FOUND, f"topic {topic!r} not found")
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            raise Refused(pb.INTERNAL_SERVER_ERROR, f"route of {topic!r}: {resp.remark} (code {resp.code})")
        try:
            return queue_spans(resp.body)
        except (ValueError, TypeError) as exc:
            raise Refused(pb.INTERNAL_SERVER_ERROR, f"route of {topic!r} does not parse: {exc}") from None

    async def fifo(self, group: str, session: ClientSession) -> bool:
        """Whether consumer ``group`` consumes in order: declared so on any broker group (asked on
        ``session``; an answer kept ``GROUPS_KEEP_S``, the last one kept while a broker does not
        answer), or named in the deprecated ``[proxy] fifo_groups``."""
        if group in self.settings.fifo_groups:
            return True
        now = trio.current_time()
        for broker in sorted(self.forwarder.view.groups):
            kept = self._orderly.get(broker)
            if kept is None or now - kept[0] >= GROUPS_KEEP_S:
                self._orderly[broker] = (now, kept[1] if kept else frozenset())  # one asks; the others use this
                self._orderly[broker] = (now, await self._ask_orderly(broker, session, kept))
            if group in self._orderly[broker][1]:
                return True
        return False

    async def _ask_orderly(self, broker: str, session: ClientSession,
                           kept: tuple[float, frozenset[str]] | None) -> frozenset[str]:
        request = RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, language="PYTHON")
        try:
            resp = await self.forwarder.read(request, session, broker)
            if resp is None or resp.code != ResponseCode.SUCCESS:
                raise ValueError(resp.remark if resp is not None else "no answer")
            table = orjson.loads(resp.body or b"{}").get("subscriptionGroupTable") or {}
            return frozenset(str(name) for name, doc in table.items()
                             if isinstance(doc, dict) and doc.get("consumeMessageOrderly") is True)
        except (RemotingError, ValueError, AttributeError) as exc:  # orjson's errors are ValueErrors
            log.info("subscription groups of %s: %s; the last answer stands", broker, exc)
            return kept[1] if kept else frozenset()
