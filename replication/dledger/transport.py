"""Raft messages between nodes over loopback or the network: a remoting server on the node's
raft port, and per peer a bounded outbox drained by one sender task.

Raft tolerates lost messages, so the transport never blocks the core: a full outbox or a
peer that cannot be reached drops messages (counted), and the sender reconnects with a short
back-off. Frames that are not well-formed raft messages are logged and dropped.

With ACL on (a :class:`~replication.member_keys.Membership`), each connection proves
membership once, before its first raft message (:mod:`replication.dledger.wire`'s MEMBER_HELLO
and MEMBER_PROOF): the sender proves itself and checks that it reached the peer it dialed; the
receiver drops and counts every other frame of a connection that has not proven itself (logged
once per connection), closes it, and closes one that has not finished the handshake within
:data:`~replication.membership.HANDSHAKE_TIMEOUT_S`. Raft messages themselves carry no
signature: the hot path is the same as with ACL off.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from core.addresses import split_address
from core.errors import RemotingError
from core.remoting.client import RemotingClient
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.server import serve_remoting
from replication.dledger.messages import Message
from replication.dledger.wire import (
    MEMBER_HELLO,
    MEMBER_PROOF,
    RAFT_CODES,
    WireError,
    decode_message,
    encode_message,
)
from replication.member_keys import Membership
from replication.membership import (
    ACCEPT,
    CHALLENGE,
    HANDSHAKE_TIMEOUT_S,
    PROOF,
    Acceptor,
    Identity,
    MembershipError,
    split_frame,
)

log = logging.getLogger(__name__)

OUTBOX_MAX = 4096  # messages queued for one peer before new ones are dropped
RECONNECT_S = 0.2
PURPOSE = b"raft"
# what the raft port remembers per connection (Connection.attributes)
_CHALLENGED = "raft.challenged"  # the acceptor of a handshake under way
_MEMBER = "raft.member"  # the member id the connection proved
_REFUSED = "raft.refused"  # its refusal was logged
_DROPPING = "raft.dropping"  # a dropped frame of it was logged


@dataclass
class TransportStats:
    sent: int = 0
    dropped_full: int = 0
    dropped_unreachable: int = 0
    received: int = 0
    rejected: int = 0


class _Inbound:
    """The remoting processor of the raft port. ``gate``: with ACL on, a fresh acceptor for
    each connection's membership handshake."""

    def __init__(self, group: str, deliver: Callable[[Message], None], stats: TransportStats,
                 gate: Callable[[], Acceptor] | None = None) -> None:
        self.group = group
        self.deliver = deliver
        self.stats = stats
        self.gate = gate

    def process(self, request: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        if self.gate is not None and _MEMBER not in conn.attributes:
            return self._handshake(request, conn)
        if request.code not in RAFT_CODES or request.ext_fields.get("group") != self.group:
            self._drop(conn, f"a frame with code {request.code} for group {request.ext_fields.get('group')!r}")
            return None
        try:
            msg = decode_message(request)
        except WireError as exc:
            self._drop(conn, f"a malformed message: {exc}")
            return None
        self.stats.received += 1
        self.deliver(msg)
        return None

    def _drop(self, conn: Connection, what: str) -> None:
        """Count a frame that is not a raft message of this group; logged once per connection
        (a peer sending a stream of them would otherwise fill the disk with the log)."""
        self.stats.rejected += 1
        if not conn.attributes.get(_DROPPING):
            conn.attributes[_DROPPING] = True
            log.warning("raft port: dropped %s from %s (further ones from it are counted, not logged)", what,
                        conn.remote)

    def _handshake(self, request: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        """A frame of a connection that has not proven membership: the handshake's, else refused."""
        assert self.gate is not None
        attributes = conn.attributes
        try:
            if request.code == MEMBER_HELLO and _CHALLENGED not in attributes and not request.is_oneway:
                acceptor = attributes[_CHALLENGED] = self.gate()
                return request.reply(ResponseCode.SUCCESS, body=acceptor.challenge())
            challenged = attributes.pop(_CHALLENGED, None)
            if request.code == MEMBER_PROOF and isinstance(challenged, Acceptor) and not request.is_oneway:
                admitted = challenged.admit(split_frame(request.body, PROOF))
                attributes[_MEMBER] = admitted.peer.member
                log.info("raft port: %s proved membership as %s", conn.remote, admitted.peer)
                return request.reply(ResponseCode.SUCCESS, body=admitted.accept)
            raise MembershipError(f"request {request.code} before the membership handshake")
        except MembershipError as exc:
            self.refuse(conn, str(exc))
            return None

    def refuse(self, conn: Connection, why: str) -> None:
        """Count a frame (or a connection) that did not prove membership, log it once per
        connection, and close the connection."""
        self.stats.rejected += 1
        if not conn.attributes.get(_REFUSED):
            conn.attributes[_REFUSED] = True
            log.warning("raft port: %s did not prove membership: %s; closing it (its frames are dropped)",
                        conn.remote, why)
        conn.close()

    async def expire(self, conn: Connection) -> None:
        """Close ``conn`` unless it proved membership within the handshake's time."""
        with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
            await conn.closed.wait()
            return
        if _MEMBER not in conn.attributes:
            self.refuse(conn, f"no proof within {HANDSHAKE_TIMEOUT_S:.0f} s")


class RaftTransport:
    """Sends to and receives from the other members of one raft group."""

    def __init__(self, group: str, peers: dict[str, str], deliver: Callable[[Message], None], *,
                 me: str = "", membership: Membership | None = None, source_host: str | None = None) -> None:
        """``peers``: the other members; ``me``: this member's id; ``membership``: with ACL
        on, the keys connections prove membership with; ``source_host``: the local address
        connections to peers start from."""
        self.group = group
        self.source_host = source_host
        self.peers = peers  # id -> "host:port" of its raft port
        self.me = Identity(group, me or "?")
        self.stats = TransportStats()
        self._membership = membership
        gate = None
        if membership is not None:
            gate = functools.partial(membership.acceptor, PURPOSE, self.me, self._admits)
        self._inbound = _Inbound(group, deliver, self.stats, gate)
        self._outboxes = {peer: trio.open_memory_channel[Message](OUTBOX_MAX) for peer in peers}
        self._handshake_failed: dict[str, str] = {}  # peer -> why its last handshake failed (logged once)

    def _admits(self, peer: Identity) -> str | None:
        if peer.group != self.group:
            return f"it belongs to raft group {peer.group!r}, not {self.group!r}"
        if peer.member not in self.peers:
            return f"{peer.member!r} is not one of the group's other members ({', '.join(sorted(self.peers))})"
        return None

    async def serve(self, listen: str, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``listen`` and run a sender per peer until cancelled."""
        host, port = split_address(listen)
        async with trio.open_nursery() as nursery:
            client = RemotingClient(nursery, source_host=self.source_host)
            for peer, (_send, receive) in self._outboxes.items():
                nursery.start_soon(self._sender, client, peer, receive)
            opened = None
            if self._membership is not None:
                def opened(conn: Connection) -> None:
                    nursery.start_soon(self._inbound.expire, conn)
            bound = await nursery.start(functools.partial(serve_remoting, self._inbound, host, port,
                                                          on_open=opened))
            task_status.started(bound)

    def send(self, peer: str, msg: Message) -> None:
        """Queue ``msg`` for ``peer``; never blocks."""
        channel = self._outboxes.get(peer)
        if channel is None:
            return
        try:
            channel[0].send_nowait(msg)
        except trio.WouldBlock:
            self.stats.dropped_full += 1

    async def _sender(self, client: RemotingClient, peer: str, outbox: trio.MemoryReceiveChannel[Message]) -> None:
        address = self.peers[peer]
        proven: Connection | None = None  # the connection to the peer that passed the handshake
        async for msg in outbox:
            try:
                if self._membership is None:
                    await client.invoke_oneway(address, encode_message(msg, self.group))
                else:
                    conn = await client.connection(address)
                    if conn is not proven:
                        await self._prove(conn, peer)
                        proven = conn
                    await conn.oneway(encode_message(msg, self.group))
                self.stats.sent += 1
            except (RemotingError, MembershipError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self.stats.dropped_unreachable += 1
                client.drop(address)
                await trio.sleep(RECONNECT_S)
                while True:  # what queued up meanwhile is stale: drop it
                    try:
                        outbox.receive_nowait()
                        self.stats.dropped_unreachable += 1
                    except trio.WouldBlock:
                        break

    async def _prove(self, conn: Connection, peer: str) -> None:
        """The membership handshake on a new connection to ``peer``: this member proves itself,
        and checks that it reached ``peer`` (which holds the same keys). Raises when it fails."""
        assert self._membership is not None
        try:
            connector = self._membership.connector(PURPOSE, self.me, Identity(self.group, peer))
            hello = await conn.request(RemotingCommand(code=MEMBER_HELLO), HANDSHAKE_TIMEOUT_S)
            if hello.code != ResponseCode.SUCCESS:
                raise MembershipError(f"answered the handshake with code {hello.code}: {hello.remark}")
            proof = RemotingCommand(code=MEMBER_PROOF, body=connector.prove(split_frame(hello.body, CHALLENGE)))
            accepted = await conn.request(proof, HANDSHAKE_TIMEOUT_S)
            if accepted.code != ResponseCode.SUCCESS:
                raise MembershipError(f"answered the proof with code {accepted.code}: {accepted.remark}")
            connector.check_accept(split_frame(accepted.body, ACCEPT))
        except (MembershipError, RemotingError) as exc:
            why = str(exc)
            if isinstance(exc, RemotingError):
                why += " (a peer with [acl] enabled closes a connection whose proof it refuses: its log says why)"
            if self._handshake_failed.get(peer) != why:  # once per reason, not at every retry
                log.warning("raft: membership handshake with %s failed: %s", peer, why)
                self._handshake_failed[peer] = why
            raise
        if self._handshake_failed.pop(peer, None) is not None:
            log.info("raft: membership handshake with %s succeeded", peer)
