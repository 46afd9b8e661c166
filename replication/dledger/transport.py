"""Raft messages between nodes over loopback or the network: a remoting server on the node's
raft port, and per peer a bounded outbox drained by one sender task.

Raft tolerates lost messages, so the transport never blocks the core: a full outbox or a
peer that cannot be reached drops messages (counted), and the sender reconnects with a short
back-off. Frames that are not well-formed raft messages are logged and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from core.errors import RemotingError
from core.remoting.client import RemotingClient
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.server import serve_remoting
from replication.dledger.messages import Message
from replication.dledger.wire import RAFT_CODES, WireError, decode_message, encode_message

log = logging.getLogger(__name__)

OUTBOX_MAX = 4096  # messages queued for one peer before new ones are dropped
RECONNECT_S = 0.2


@dataclass
class TransportStats:
    sent: int = 0
    dropped_full: int = 0
    dropped_unreachable: int = 0
    received: int = 0
    rejected: int = 0


class _Inbound:
    """The remoting processor of the raft port."""

    def __init__(self, group: str, deliver: Callable[[Message], None], stats: TransportStats) -> None:
        self.group = group
        self.deliver = deliver
        self.stats = stats

    def process(self, request: RemotingCommand, conn: Connection) -> None:
        if request.code not in RAFT_CODES or request.ext_fields.get("group") != self.group:
            self.stats.rejected += 1
            log.warning("raft port: dropped a frame with code %s for group %r from %s", request.code,
                        request.ext_fields.get("group"), conn.remote)
            return
        try:
            msg = decode_message(request)
        except WireError as exc:
            self.stats.rejected += 1
            log.warning("raft port: dropped a malformed message from %s: %s", conn.remote, exc)
            return
        self.stats.received += 1
        self.deliver(msg)


class RaftTransport:
    """Sends to and receives from the other members of one raft group."""

    def __init__(self, group: str, peers: dict[str, str], deliver: Callable[[Message], None]) -> None:
        self.group = group
        self.peers = peers  # id -> "host:port" of its raft port
        self.stats = TransportStats()
        self._inbound = _Inbound(group, deliver, self.stats)
        self._outboxes = {peer: trio.open_memory_channel[Message](OUTBOX_MAX) for peer in peers}

    async def serve(self, listen: str, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``listen`` and run a sender per peer until cancelled."""
        host, _, port = listen.rpartition(":")
        async with trio.open_nursery() as nursery:
            client = RemotingClient(nursery)
            for peer, (_send, receive) in self._outboxes.items():
                nursery.start_soon(self._sender, client, peer, receive)
            bound = await nursery.start(serve_remoting, self._inbound, host, int(port))
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
        async for msg in outbox:
            try:
                await client.invoke_oneway(address, encode_message(msg, self.group))
                self.stats.sent += 1
            except (RemotingError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self.stats.dropped_unreachable += 1
                client.drop(address)
                await trio.sleep(RECONNECT_S)
                while True:  # what queued up meanwhile is stale: drop it
                    try:
                        outbox.receive_nowait()
                        self.stats.dropped_unreachable += 1
                    except trio.WouldBlock:
                        break
