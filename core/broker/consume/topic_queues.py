"""A topic's readable queues across the cluster, as QUERY_ASSIGNMENT needs them: asked of the
name servers and kept ``ROUTE_TTL_S`` (RocketMQ's AssignmentManager refreshes every 30 s)."""

from __future__ import annotations

import trio

from core.client.route import MessageQueue, parse_route
from core.errors import RemotingError
from core.remoting.client import RemotingClient
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand

ROUTE_TTL_S = 30.0
ROUTES_MAX = 10_000
NAMESRV_TIMEOUT_S = 3.0
TOPIC_NOT_EXIST = 17


class TopicQueues:
    """A topic's readable queues across the cluster, from the name servers, kept a while."""

    def __init__(self, client: RemotingClient, namesrv: list[str]) -> None:
        self._client = client
        self._namesrv = list(namesrv)
        self._known: dict[str, tuple[float, list[MessageQueue]]] = {}

    async def readable(self, topic: str) -> list[MessageQueue] | None:
        """The queues (None: no such topic); raises RemotingError when no name server answers."""
        now = trio.current_time()
        kept = self._known.get(topic)
        if kept is not None and now - kept[0] < ROUTE_TTL_S:
            return kept[1]
        queues = await self._ask(topic)
        if queues is not None:  # a topic not there yet is asked for again next time
            if len(self._known) >= ROUTES_MAX:
                self._known.pop(next(iter(self._known)))
            self._known[topic] = (now, queues)
        return queues

    async def _ask(self, topic: str) -> list[MessageQueue] | None:
        last = "no name server configured"
        for address in self._namesrv:
            try:
                resp = await self._client.invoke(address, RemotingCommand(
                    code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}), NAMESRV_TIMEOUT_S)
            except RemotingError as exc:
                last = f"{address}: {exc}"
                continue
            if resp.code == TOPIC_NOT_EXIST:
                return None
            if resp.code != ResponseCode.SUCCESS:
                last = f"{address}: {resp.remark}"
                continue
            try:
                return list(parse_route(topic, resp.body).read_queues)
            except (ValueError, KeyError, TypeError) as exc:
                last = f"{address}: an unreadable route: {exc}"
        raise RemotingError(f"no name server gave the route of {topic}: {last}")
