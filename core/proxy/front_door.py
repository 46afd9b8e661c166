"""The proxy's remoting front door: what it answers itself, and where it forwards the rest.

A request arriving on a group's door (or naming a group in ``bname``/``n``, as Java clients
since 4.9.5 do) goes to a member of that group:

- writes (sends, send-backs, end-transaction, queue locks, and every POP request: POPs write
  checkpoints) to the master. Under raft, while the group has no leader the request waits for
  one, up to ``failover_wait_s`` from its arrival; a send (or a POP or an ack) that fails on a
  member that died or stopped leading is sent again to the new leader in that window. A send that reached the old leader may have been stored there too, so a resent
  message can arrive twice (the same UNIQ_KEY): delivery is at least once. Master-slave groups
  do not elect: with no master, writes fail at once with SERVICE_NOT_AVAILABLE, naming why;
- heartbeats and unregistrations to every member (a slave serves pulls when its master is gone,
  and must know the consumers);
- everything else (pulls, offsets, queries) to the master, else a slave, else the next member.

On the proxy's own port it is the clients' name server: routes and the cluster table come from
the name servers with the doors in place of broker addresses; other name-server requests are
passed through.

With ACL on, every request for a broker is checked here against the same accounts file as the
brokers' (the client's own address counts for white lists), and forwarded with its signature
unchanged, so the brokers check it again: never white-list a proxy's address at the brokers, or
everyone behind it would pass there.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import trio

from core.acl.file import AclFile
from core.errors import RemotingError
from core.proxy.cluster_view import ClusterView
from core.proxy.doors import Doors
from core.proxy.session import ClientSession, RelayDown, copy_request, copy_response
from core.remoting.client import RemotingClient, split_address
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from formats.errors import RecordError
from formats.pull_body import with_store_host

log = logging.getLogger(__name__)

WRITES = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                    RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.END_TRANSACTION, RequestCode.RECALL_MESSAGE,
                    RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ, RequestCode.UPDATE_AND_CREATE_TOPIC,
                    # POP writes checkpoints and acks, and reads the master's offsets
                    RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.BATCH_ACK_MESSAGE,
                    RequestCode.CHANGE_MESSAGE_INVISIBLETIME, RequestCode.NOTIFICATION})
SENDS = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})
# what may go again to a new master after the old one died under it: sends (a copy may be stored
# twice), POPs (what the lost answer handed out comes back after its invisible time) and acks
# (the checkpoint they ack was replicated with the group's log)
RESENDABLE = SENDS | {RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.BATCH_ACK_MESSAGE}
EVERY_MEMBER = frozenset({RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT})
ROUTING = frozenset({RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO})

# requests a broker may hold (long polling): the field naming for how long, and its default
LONG_POLLS = {RequestCode.PULL_MESSAGE: ("suspendTimeoutMillis", 15_000), RequestCode.POP_MESSAGE: ("pollTime", 0),
              RequestCode.NOTIFICATION: ("pollTime", 0)}
REQUEST_TIMEOUT_S = 5.0
PULL_EXTRA_S = 5.0  # beyond a long poll's suspend time
NAMESRV_TIMEOUT_S = 3.0


class FrontDoor:
    """The processor of every listener of one proxy; ``door_group`` names the listener's group."""

    def __init__(self, nursery: trio.Nursery, doors: Doors, view: ClusterView, namesrv_client: RemotingClient,
                 namesrv: list[str], *, elects: bool, failover_wait_s: float, acl: AclFile | None = None) -> None:
        self._nursery = nursery
        self.doors = doors
        self.view = view
        self._namesrv_client = namesrv_client
        self._namesrv = list(namesrv)
        self._elects = elects
        self._failover_wait_s = failover_wait_s
        self.acl = acl
        self.forwarded = 0  # requests sent on to a broker
        self.resent = 0  # sends sent again on a new master after the first one failed
        self.sessions = 0  # client connections with upstream connections now
        self.grpc: Any = None  # the gRPC front door's service, when the proxy has one (its counters)

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
            session = conn.attributes["proxy_session"] = ClientSession(self._nursery, RelayDown(conn))
            self.sessions += 1
        return session

    def runtime_table(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO on the proxy's own port: what it forwarded, and the groups'
        masters as it sees them now (``mqctl status`` shows them)."""
        masters = {group: self.view.master(group) or "-" for group in sorted(self.view.groups)}
        return {"proxyForwarded": str(self.forwarded), "proxyResent": str(self.resent),
                "proxySessions": str(self.sessions), "proxyNameServerAnswers": str(self.view.refreshes),
                "proxyMasters": ",".join(f"{g}={m}" for g, m in masters.items()),
                **({} if self.grpc is None else self.grpc.runtime_table())}

    # ------------------------------------------------------------------ dispatch

    def process(self, request: RemotingCommand, conn: Connection, door_group: str | None) -> Reply:
        group = request.ext_fields.get("bname") or request.ext_fields.get("n") or door_group
        if log.isEnabledFor(logging.DEBUG):  # not on every request: naming the code costs an enum lookup
            log.debug("%s from %s for %s", _name(request), conn.remote, group or "the name servers")
        if group is None and request.code == RequestCode.GET_BROKER_RUNTIME_INFO:
            return request.reply(ResponseCode.SUCCESS, body=orjson.dumps({"table": self.runtime_table()}))
        if group is None or request.code in ROUTING:
            return self._as_name_server(request)
        if group not in self.view.groups and group not in self.doors.listens:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"proxy: no broker group named {group[:100]!r} "
                                 f"(groups: {', '.join(sorted(self.view.groups)) or 'none yet'})")
        if self.acl is not None:
            refused = self.acl.policy.check(request, split_address(conn.remote)[0] if ":" in conn.remote else "")
            if refused is not None:
                log.warning("refused request %d from %s: %s", request.code, conn.remote, refused)
                return request.reply(ResponseCode.NO_PERMISSION, refused)
        self.forwarded += 1
        session = self._session(conn)
        if request.code in EVERY_MEMBER:
            return self.to_every_member(request, session, group)
        if request.code in WRITES:
            return self.write(request, session, group)
        return self.read(request, session, group)

    # ------------------------------------------------------------------ the name server role

    async def ask_name_servers(self, request: RemotingCommand) -> RemotingCommand | None:
        """``request`` to the first name server that answers, its answer as it came; None for a
        oneway, a SYSTEM_ERROR answer when none answers."""
        last_error = "no name server configured"
        for address in self._namesrv:
            try:
                conn = await self._namesrv_client.connection(address)
                if request.is_oneway:
                    await conn.oneway(copy_request(request))
                    return None
                resp = await conn.request(copy_request(request), NAMESRV_TIMEOUT_S)
            except RemotingError as exc:
                last_error = f"{address}: {exc}"
                continue
            return copy_response(request, resp)
        return request.reply(ResponseCode.SYSTEM_ERROR, f"the proxy reaches no name server ({last_error})")

    async def _as_name_server(self, request: RemotingCommand) -> RemotingCommand | None:
        answer = await self.ask_name_servers(request)
        if answer is not None and answer.code == ResponseCode.SUCCESS and answer.body:
            if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                answer.body = self.doors.rewrite_route(answer.body)
            elif request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
                answer.body = self.doors.rewrite_cluster_info(answer.body)
        return answer

    # ------------------------------------------------------------------ forwarding

    async def write(self, request: RemotingCommand, session: ClientSession, group: str) -> RemotingCommand | None:
        """``request`` to ``group``'s master on ``session``'s connection: its answer (None: oneway)."""
        deadline = trio.current_time() + (self._failover_wait_s if self._elects else 0.0)
        tried: str | None = None
        while True:
            master = await self.view.wait_master(group, deadline)
            if master is None:
                return self._no_master(request, group)
            if tried is not None:
                self.resent += 1
            tried = master
            try:
                resp = await self._forward(session, group, master, request, self._timeout(request, deadline))
                if resp is None:
                    return None
            except RemotingError as exc:  # closed, refused or timed out: a dead or cut-off master
                if session.closed:  # the client left and its connections were closed here
                    return None if request.is_oneway else request.reply(ResponseCode.SYSTEM_ERROR, "client left")
                log.info("%s to %s (group %s) failed: %s", _name(request), master, group, exc)
                session.drop(master)
                self.view.suspect(group, master)
                if request.code in RESENDABLE and trio.current_time() < deadline:
                    continue
                return request.reply(ResponseCode.SYSTEM_ERROR, f"broker {group} ({master}) failed: {exc}")
            if (resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and request.code in RESENDABLE
                    and trio.current_time() < deadline and await self._master_moved(group, master)):
                continue  # it stopped leading: the new leader gets the send
            answer = copy_response(request, resp)
            if request.code == RequestCode.POP_MESSAGE:
                self._through_door(answer, group)
            return answer

    @staticmethod
    async def _forward(session: ClientSession, group: str, member: str, request: RemotingCommand,
                       timeout_s: float) -> RemotingCommand | None:
        """``request`` on the session's connection to ``member``: its answer (None: a oneway)."""
        upstream = await session.upstream(group, member)
        if request.is_oneway:
            await upstream.oneway(session.outgoing(request))
            return None
        return await upstream.request(session.outgoing(request), timeout_s)

    async def _master_moved(self, group: str, old: str) -> bool:
        await self.view.refresh()
        return self.view.master(group) != old

    def _no_master(self, request: RemotingCommand, group: str) -> RemotingCommand | None:
        if request.is_oneway:
            return None
        if self._elects:
            why = (f"broker group {group} has no raft leader after {self._failover_wait_s:g} s "
                   "(an election is running, or a majority is down)")
        else:
            why = f"broker group {group} has no master now (a master-slave group does not elect; its slaves serve reads)"
        return request.reply(ResponseCode.SERVICE_NOT_AVAILABLE, why)

    async def read(self, request: RemotingCommand, session: ClientSession, group: str) -> RemotingCommand | None:
        """``request`` to ``group``'s master, else a slave: its answer (None: oneway)."""
        members = self.view.members(group)
        if not members:
            await self.view.refresh()
            members = self.view.members(group)
        last_error = f"broker group {group} is not known to the name servers"
        for member in members:
            try:
                resp = await self._forward(session, group, member, request, self._timeout(request, None))
                if resp is None:
                    return None
            except RemotingError as exc:
                if session.closed:
                    return None if request.is_oneway else request.reply(ResponseCode.SYSTEM_ERROR, "client left")
                last_error = f"{member}: {exc}"
                session.drop(member)
                self.view.suspect(group, member)
                continue
            answer = copy_response(request, resp)
            if request.code == RequestCode.PULL_MESSAGE:
                self._through_door(answer, group)
            return answer
        return None if request.is_oneway else request.reply(ResponseCode.SYSTEM_ERROR, f"proxy: {last_error}")

    async def to_every_member(self, request: RemotingCommand, session: ClientSession,
                              group: str) -> RemotingCommand | None:
        """``request`` to every member of ``group``: the master's answer, else the first one's."""
        if request.code == RequestCode.HEART_BEAT:
            session.remember_heartbeat(group, request)
        members = self.view.members(group)
        answers: dict[str, RemotingCommand | Exception] = {}

        async def one(member: str) -> None:
            try:
                upstream = await session.upstream(group, member)
                answers[member] = await upstream.request(session.outgoing(request), REQUEST_TIMEOUT_S)
            except RemotingError as exc:
                answers[member] = exc

        async with trio.open_nursery() as nursery:
            for member in members:
                nursery.start_soon(one, member)
        if request.is_oneway:
            return None
        for member in members:  # the master's answer, else the first member's that answered
            answer = answers.get(member)
            if isinstance(answer, RemotingCommand):
                return copy_response(request, answer)
        return request.reply(ResponseCode.SYSTEM_ERROR, f"proxy: no member of broker group {group} answered")

    def _through_door(self, pulled: RemotingCommand, group: str) -> None:
        """A pull's answer as the client should see it: the proxy picks the member to read from
        (suggest id 0), and the records name the door as their store host (a failed message is
        sent back there)."""
        if "suggestWhichBrokerId" in pulled.ext_fields:
            pulled.ext_fields["suggestWhichBrokerId"] = "0"
        door = self.doors.advertised.get(group)
        if door is not None and pulled.code == ResponseCode.SUCCESS and pulled.body:
            host, port = split_address(door)
            try:
                pulled.body = with_store_host(pulled.body, host, port)
            except RecordError as exc:  # passed on as the broker sent it: the client decides
                log.warning("a pull answer from group %s does not walk as records: %s", group, exc)

    def _timeout(self, request: RemotingCommand, deadline: float | None) -> float:
        held = LONG_POLLS.get(request.code)
        if held is not None:  # the broker may hold it that long: waiting less would call it dead
            field, default_ms = held
            try:
                suspend_s = int(request.ext_fields.get(field, str(default_ms))) / 1000
            except ValueError:
                suspend_s = default_ms / 1000
            return min(max(suspend_s, 0.0), 60.0) + PULL_EXTRA_S
        if deadline is not None and request.code in SENDS:
            return max(deadline - trio.current_time(), REQUEST_TIMEOUT_S)
        return REQUEST_TIMEOUT_S


class _Listener:
    """A remoting processor bound to one listener of the proxy (a door, or the proxy's port)."""

    def __init__(self, door: FrontDoor, group: str | None) -> None:
        self._door = door
        self._group = group

    def process(self, request: RemotingCommand, conn: Connection) -> Reply:
        return self._door.process(request, conn, self._group)


def _name(request: RemotingCommand) -> str:
    try:
        return RequestCode(request.code).name
    except ValueError:
        return f"request {request.code}"
