"""The proxy's forwarding, which both doors use: a request for a broker group goes to a member
of that group on the client's session (core/proxy/session.py).

- writes (sends, send-backs, end-transaction, recalls, queue locks, and every POP request: POPs
  write checkpoints) to the master. Under raft or a controller, while the group has no leader
  (master) the request waits for one, up to ``failover_wait_s`` from its arrival; a send (or a
  POP or an ack) that fails on a member that died or stopped leading is sent again to the new
  leader in that window. A send
  that reached the old leader may have been stored there too, so a resent message can arrive
  twice (the same UNIQ_KEY): delivery is at least once. Master-slave groups do not elect: with no
  master, writes fail at once with SERVICE_NOT_AVAILABLE, naming why;
- heartbeats and unregistrations to every member (a slave serves pulls when its master is gone,
  and must know the consumers);
- everything else (pulls, offsets, queries) to the master, else a slave, else the next member;
- name-server requests to the first name server that answers.

Pull and POP answers are rewritten as a client of the 4.x door must see them (the proxy picks
the member: suggest id 0; records name the group's door as their store host).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType

import trio

from core.addresses import split_address
from core.errors import RemotingError
from core.proxy.cluster_view import ClusterView
from core.proxy.doors import Doors
from core.proxy.session import ClientSession, copy_request, copy_response
from core.remoting.client import RemotingClient
from core.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Outcome
from formats.errors import RecordError
from formats.pull_body import with_store_host

log = logging.getLogger(__name__)

WRITES = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                    RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.END_TRANSACTION, RequestCode.RECALL_MESSAGE,
                    RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ, RequestCode.UPDATE_AND_CREATE_TOPIC,
                    RequestCode.SET_MESSAGE_REQUEST_MODE,
                    # POP writes checkpoints and acks, and reads the master's offsets
                    RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.BATCH_ACK_MESSAGE,
                    RequestCode.CHANGE_MESSAGE_INVISIBLETIME, RequestCode.NOTIFICATION})
SENDS = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})
# what may go again to a new master after the old one died under it: sends (a copy may be stored
# twice), POPs (what the lost answer handed out comes back after its invisible time) and acks
# (the checkpoint they ack was replicated with the group's log)
RESENDABLE = SENDS | {RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.BATCH_ACK_MESSAGE}
# writes whose answers go back as they came (a POP's is rewritten): relayed without a task
RELAYED = WRITES - {RequestCode.POP_MESSAGE, RequestCode.NOTIFICATION}
EVERY_MEMBER = frozenset({RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT})
ROUTING = frozenset({RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO})

# requests a broker may hold (long polling): the field naming for how long, and its default
LONG_POLLS: Mapping[int, tuple[str, int]] = MappingProxyType({
    RequestCode.PULL_MESSAGE: ("suspendTimeoutMillis", 15_000), RequestCode.POP_MESSAGE: ("pollTime", 0),
    RequestCode.NOTIFICATION: ("pollTime", 0)})
REQUEST_TIMEOUT_S = 5.0
PULL_EXTRA_S = 5.0  # beyond a long poll's suspend time
NAMESRV_TIMEOUT_S = 3.0


class Forwarder:
    """Requests to broker groups (see the module's docstring), for both doors."""

    def __init__(self, nursery: trio.Nursery, doors: Doors, view: ClusterView, namesrv_client: RemotingClient,
                 namesrv: list[str], *, elects: bool, failover_wait_s: float) -> None:
        self._nursery = nursery  # where a relay that failed goes on
        self.doors = doors
        self.view = view
        self._namesrv_client = namesrv_client
        self._namesrv = list(namesrv)
        self._elects = elects
        self._failover_wait_s = failover_wait_s
        self.resent = 0  # sends sent again on a new master after the first one failed
        self._writers: weakref.WeakSet[ClientSession] = weakref.WeakSet()  # sessions that wrote

    def master_moved(self, group: str, old: str) -> None:
        """``group``'s master is another now: close every session's connection to the old one,
        so that writes still waiting there fail at once and go to the new master (a master cut
        off by a partition would hold them until their timeout)."""
        for session in list(self._writers):
            if session.connected(old) is not None:
                session.drop(old)

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

    def ask_name_servers_then(self, request: RemotingCommand, then: Callable[[RemotingCommand], None]) -> bool:
        """:meth:`ask_name_servers` for a request that wants an answer, without a task: the
        answer goes to ``then`` (a name server that fails passes the request to the next).
        False, and nothing sent, when no name server's connection is open yet: the caller
        awaits :meth:`ask_name_servers` then. A client asking faster than it reads holds a
        callback a request here, not a task."""
        addresses = [a for a in self._namesrv if self._namesrv_client.connected(a) is not None]
        if not addresses or request.is_oneway:
            return False

        def ask(i: int, last_error: str) -> None:
            for j in range(i, len(addresses)):
                conn = self._namesrv_client.connected(addresses[j])
                if conn is None:
                    continue
                try:
                    conn.request_then(copy_request(request), NAMESRV_TIMEOUT_S, partial(answered, j))
                    return
                except RemotingError as exc:
                    last_error = f"{addresses[j]}: {exc}"
            then(request.reply(ResponseCode.SYSTEM_ERROR, f"the proxy reaches no name server ({last_error})"))

        def answered(i: int, outcome: Outcome) -> None:
            if isinstance(outcome, RemotingCommand):
                then(copy_response(request, outcome))
            else:
                ask(i + 1, f"{addresses[i]}: {outcome}")

        ask(0, "no name server connected")
        return True



    async def write(self, request: RemotingCommand, session: ClientSession, group: str, *,
                    deadline: float | None = None, tried: str | None = None) -> RemotingCommand | None:
        """``request`` to ``group``'s master on ``session``'s connection: its answer (None: oneway).
        ``deadline`` and ``tried`` continue a relay that failed on master ``tried``."""
        if deadline is None:
            deadline = trio.current_time() + (self._failover_wait_s if self._elects else 0.0)
        self._writers.add(session)
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
                if self._failed(request, session, group, master, exc, deadline):
                    continue
                return self._failure_answer(request, session, group, master, exc)
            if await self._resend_after(request, resp, group, master, deadline):
                continue  # it stopped leading: the new leader gets the send
            answer = copy_response(request, resp)
            if request.code == RequestCode.POP_MESSAGE:
                self._through_door(answer, group)
            return answer

    def relay(self, request: RemotingCommand, session: ClientSession, group: str,
              answer: Callable[[RemotingCommand | None], None],
              answer_frame: Callable[[RemotingCommand], None] | None = None) -> bool:
        """:meth:`write` without a task, event or re-read for the common case: the group's master
        is known, the session has a connection to it, and the answer goes back as it came. Sends
        ``request`` now and hands its answer to ``answer``; a failure continues as :meth:`write`
        does, in a task. With ``answer_frame``, and a session that passes frames, the request's
        frame goes up as it came (its opaque kept, when free upstream) and the answer's frame
        comes down as it came: nothing is encoded again. False: not relayable, use :meth:`write`."""
        if request.code not in RELAYED or request.flag & FLAG_ONEWAY:
            return False
        master = self.view.master(group)
        upstream = session.connected(master) if master is not None else None
        if upstream is None:
            return False
        assert master is not None
        self._writers.add(session)
        deadline = trio.current_time() + (self._failover_wait_s if self._elects else 0.0)
        timeout_s = self._timeout(request, deadline)

        def passed(outcome: Outcome) -> None:
            if isinstance(outcome, RemotingCommand) and outcome.frame and not _may_resend(request, outcome, deadline):
                assert answer_frame is not None
                answer_frame(outcome)
            else:
                settled(outcome)

        def settled(outcome: Outcome) -> None:
            if isinstance(outcome, RemotingCommand) and not _may_resend(request, outcome, deadline):
                answer(copy_response(request, outcome))
            else:
                self._nursery.start_soon(self._write_after, request, session, group, master, outcome, deadline,
                                         answer)

        if answer_frame is not None and session.passes_frames and upstream.pass_then(request, timeout_s, passed):
            return True
        try:
            upstream.request_then(session.outgoing(request), timeout_s, settled)
        except RemotingError:
            return False
        return True

    async def _write_after(self, request: RemotingCommand, session: ClientSession, group: str, master: str,
                           outcome: Outcome, deadline: float,
                           answer: Callable[[RemotingCommand | None], None]) -> None:
        """What :meth:`write` does after its try on ``master`` ended in ``outcome``."""
        if isinstance(outcome, RemotingError):
            if not self._failed(request, session, group, master, outcome, deadline):
                answer(self._failure_answer(request, session, group, master, outcome))
                return
        elif not await self._resend_after(request, outcome, group, master, deadline):
            answer(copy_response(request, outcome))
            return
        answer(await self.write(request, session, group, deadline=deadline, tried=master))

    def _failed(self, request: RemotingCommand, session: ClientSession, group: str, master: str,
                exc: RemotingError, deadline: float) -> bool:
        """Note that ``master`` failed under ``request``: True when it goes to the next master."""
        if session.closed:  # the client left and its connections were closed here
            return False
        log.info("%s to %s (group %s) failed: %s", request_name(request), master, group, exc)
        session.drop(master)
        self.view.suspect(group, master)
        return request.code in RESENDABLE and trio.current_time() < deadline

    @staticmethod
    def _failure_answer(request: RemotingCommand, session: ClientSession, group: str, master: str,
                        exc: RemotingError) -> RemotingCommand | None:
        if request.is_oneway:
            return None
        if session.closed:
            return request.reply(ResponseCode.SYSTEM_ERROR, "client left")
        return request.reply(ResponseCode.SYSTEM_ERROR, f"broker {group} ({master}) failed: {exc}")

    async def _resend_after(self, request: RemotingCommand, resp: RemotingCommand, group: str, master: str,
                            deadline: float) -> bool:
        """Whether an answer of ``master`` says it stopped leading, so the request goes again."""
        return _may_resend(request, resp, deadline) and await self._master_moved(group, master)

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
            why = (f"broker group {group} has no raft leader or elected master after {self._failover_wait_s:g} s "
                   "(an election is running, or too few members are up)")
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

    def read_then(self, request: RemotingCommand, session: ClientSession, group: str,
                  answer: Callable[[RemotingCommand | None], None]) -> bool:
        """:meth:`read` without a task when the session has a connection to the member it would
        ask first: the answer goes to ``answer``; a failure goes on as :meth:`read` does, in a
        task. False, and nothing sent: use :meth:`read` (a client asking faster than it reads
        then holds a callback a request here, not a task)."""
        members = self.view.members(group)
        upstream = session.connected(members[0]) if members and not request.is_oneway else None
        if upstream is None:
            return False
        member = members[0]

        def settled(outcome: Outcome) -> None:
            if isinstance(outcome, RemotingCommand):
                reply = copy_response(request, outcome)
                if request.code == RequestCode.PULL_MESSAGE:
                    self._through_door(reply, group)
                answer(reply)
                return
            if session.closed:  # the client left and its connections were closed here: nothing to ask again
                answer(request.reply(ResponseCode.SYSTEM_ERROR, "client left"))
                return
            session.drop(member)
            self.view.suspect(group, member)
            self._nursery.start_soon(self._read_after, request, session, group, answer)

        try:
            upstream.request_then(session.outgoing(request), self._timeout(request, None), settled)
        except RemotingError:
            return False
        return True

    async def _read_after(self, request: RemotingCommand, session: ClientSession, group: str,
                          answer: Callable[[RemotingCommand | None], None]) -> None:
        answer(await self.read(request, session, group))

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





def _may_resend(request: RemotingCommand, resp: RemotingCommand, deadline: float) -> bool:
    """A resendable request answered SERVICE_NOT_AVAILABLE in its failover window: the member may
    have stopped leading, so the request may go to the new one."""
    return (resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and request.code in RESENDABLE
            and trio.current_time() < deadline)


def request_name(request: RemotingCommand) -> str:
    """The request's code by name, for logs."""
    try:
        return RequestCode(request.code).name
    except ValueError:
        return f"request {request.code}"
