"""The proxy's remoting front door for 4.x clients: what it answers itself, and what it hands to
the :class:`Forwarder`.

A request arriving on a group's door (or naming a group in ``bname``/``n``, as Java clients
since 4.9.5 do) goes to that group (core/proxy/forwarder.py says to which member). On the
proxy's own port it is the clients' name server: routes and the cluster table come from the name
servers with the doors in place of broker addresses; other name-server requests are passed
through. Each client connection gets a session of upstream connections of its own.

With ACL on, every request for a broker is checked here against the same accounts file as the
brokers' (the client's own address counts for white lists), and forwarded with its signature
unchanged, so the brokers check it again: never white-list a proxy's address at the brokers, or
everyone behind it would pass there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import orjson
import trio

from core.acl.file import AclFile
from core.addresses import split_address
from core.metrics.labels import request_label
from core.proxy.forwarder import EVERY_MEMBER, ROUTING, WRITES, Forwarder, request_name
from core.proxy.meters import ProxyMeters
from core.proxy.session import ClientSession, RelayDown
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import ANSWER_LATER, Connection, Reply

log = logging.getLogger(__name__)

# what one client connection may have asked the name servers through the proxy and not had
# answered (its routes and cluster table); past it SYSTEM_BUSY, so a client asking faster than it
# reads holds little here
NAMESRV_QUERIES_IN_FLIGHT_MAX = 64
_ASKING = "namesrv_queries_in_flight"


class RemotingDoor:
    """The processor of every remoting listener of one proxy; ``door_group`` names the
    listener's group (None: the proxy's own port)."""

    def __init__(self, nursery: trio.Nursery, forwarder: Forwarder, *, acl: AclFile | None = None,
                 more_counters: Callable[[], dict[str, str]] = dict, meters: ProxyMeters | None = None,
                 source_host: str | None = None) -> None:
        self._nursery = nursery
        self._source_host = source_host  # where upstream connections start
        self.forwarder = forwarder
        self.view = forwarder.view
        self.doors = forwarder.doors
        self.acl = acl
        self.more_counters = more_counters  # the gRPC door's, in the same runtime table
        self.meters = meters
        self.forwarded = 0  # requests sent on to a broker
        self.sessions = 0  # client connections with upstream connections now

    def listener(self, group: str | None) -> _Listener:
        return _Listener(self, group)

    def connection_closed(self, conn: Connection) -> None:
        session = conn.attributes.pop("proxy_session", None)
        if isinstance(session, ClientSession):
            session.close()
            self.sessions -= 1

    def _session(self, conn: Connection) -> ClientSession:
        session = conn.attributes.get("proxy_session")
        if not isinstance(session, ClientSession):
            session = conn.attributes["proxy_session"] = ClientSession(
                self._nursery, RelayDown(conn), passes_frames=True, source_host=self._source_host)
            self.sessions += 1
        return session

    def runtime_table(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO on the proxy's own port: what it forwarded, and the groups'
        masters as it sees them now (``mqctl status`` shows them)."""
        masters = {group: self.view.master(group) or "-" for group in sorted(self.view.groups)}
        return {"proxyForwarded": str(self.forwarded), "proxyResent": str(self.forwarder.resent),
                "proxySessions": str(self.sessions), "proxyNameServerAnswers": str(self.view.refreshes),
                "proxyMasters": ",".join(f"{g}={m}" for g, m in masters.items()), **self.more_counters()}

    # ------------------------------------------------------------------ dispatch

    def process(self, request: RemotingCommand, conn: Connection, door_group: str | None) -> Reply:
        group = request.ext_fields.get("bname") or request.ext_fields.get("n") or door_group
        if log.isEnabledFor(logging.DEBUG):  # not on every request: naming the code costs an enum lookup
            log.debug("%s from %s for %s", request_name(request), conn.remote, group or "the name servers")
        if group is None and request.code == RequestCode.GET_BROKER_RUNTIME_INFO:
            return request.reply(ResponseCode.SUCCESS, body=orjson.dumps({"table": self.runtime_table()}))
        if group is None or request.code in ROUTING:
            asking = conn.attributes.get(_ASKING, 0)
            assert isinstance(asking, int)
            if asking >= NAMESRV_QUERIES_IN_FLIGHT_MAX:  # a client asks routes every 30 s: this is a flood
                return request.reply(ResponseCode.SYSTEM_BUSY, f"[REJECTREQUEST]system busy: {asking} name server "
                                     "queries of this connection in flight")
            conn.attributes[_ASKING] = asking + 1
            if self.forwarder.ask_name_servers_then(request, partial(self._named, conn, request)):
                return ANSWER_LATER
            return self._as_name_server(request, conn)
        if group not in self.view.groups and group not in self.doors.listens:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"proxy: no broker group named {group[:100]!r} "
                                 f"(groups: {', '.join(sorted(self.view.groups)) or 'none yet'})")
        if self.acl is not None:
            refused = self.acl.policy.check(request, split_address(conn.remote)[0] if ":" in conn.remote else "")
            if refused is not None:
                log.warning("refused request %d from %s: %s", request.code, conn.remote, refused)
                if self.meters is not None:
                    self.meters.acl_refusals.row(request_label(request.code))[0] += 1
                return request.reply(ResponseCode.NO_PERMISSION, refused)
        self.forwarded += 1
        session = self._session(conn)
        if request.code in EVERY_MEMBER:
            return self.forwarder.to_every_member(request, session, group)
        if request.code in WRITES:
            if self.forwarder.relay(request, session, group, partial(conn.answer, request),
                                    partial(conn.answer_frame, request)):
                return ANSWER_LATER
            return self.forwarder.write(request, session, group)
        if self.forwarder.read_then(request, session, group, partial(conn.answer, request)):
            return ANSWER_LATER
        return self.forwarder.read(request, session, group)


    # ------------------------------------------------------------------ the name server role

    async def _as_name_server(self, request: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        try:
            answer = await self.forwarder.ask_name_servers(request)
        finally:
            conn.attributes[_ASKING] -= 1  # type: ignore[operator]
        return self._with_doors(request, answer) if answer is not None else None

    def _named(self, conn: Connection, request: RemotingCommand, answer: RemotingCommand) -> None:
        conn.attributes[_ASKING] -= 1  # type: ignore[operator]
        conn.answer(request, self._with_doors(request, answer))

    def _with_doors(self, request: RemotingCommand, answer: RemotingCommand) -> RemotingCommand:
        """A name server's answer with the proxy's doors where it names brokers."""
        if answer.code == ResponseCode.SUCCESS and answer.body:
            if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                answer.body = self.doors.rewrite_route(answer.body)
            elif request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
                answer.body = self.doors.rewrite_cluster_info(answer.body)
        return answer


class _Listener:
    """A remoting processor bound to one listener of the proxy (a door, or the proxy's port)."""

    def __init__(self, door: RemotingDoor, group: str | None) -> None:
        self._door = door
        self._group = group

    def process(self, request: RemotingCommand, conn: Connection) -> Reply:
        return self._door.process(request, conn, self._group)
