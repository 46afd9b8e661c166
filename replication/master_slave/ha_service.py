"""The master's side (RocketMQ's HAService): accept slaves on the HA port and run one
:class:`HAConnection` each; keep the slaves' links, their best ack for sync sends, and the log's
growth timeline that turns a lag in bytes into seconds. With ACL on, a peer first proves it is
a slave of this group (:mod:`replication.master_slave.handshake`); until then it is sent
nothing but the challenge, and it is disconnected when it fails or takes too long."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from core.addresses import split_address
from core.config import ReplicationConfig
from core.store.interfaces import ReplicatedStore
from replication.errors import ProtocolError
from replication.master_slave.acks import SlaveLink, WriteTimeline
from replication.master_slave.group_transfer import GroupTransferService
from replication.master_slave.ha_connection import HAConnection
from replication.master_slave.handshake import admit_slave
from replication.membership import HANDSHAKE_TIMEOUT_S, Acceptor, MembershipError

log = logging.getLogger(__name__)


class HAService:
    """Streams the master's CommitLog to every slave that connects."""

    def __init__(self, store: ReplicatedStore, settings: ReplicationConfig, sync_timeout_s: float, *,
                 gate: Callable[[], Acceptor] | None = None,
                 preface: Callable[[trio.SocketStream], Awaitable[str]] | None = None,
                 on_slave_news: Callable[[], None] | None = None) -> None:
        """``gate``: with ACL on, a fresh acceptor for each connection's handshake.
        ``preface``: what a link starts with before the stream (controller mode: the slave's
        broker id, returned, and this master's epochs). ``on_slave_news``: called when a
        slave connects (after its preface), acknowledges, or its link ends."""
        self.store = store
        self.settings = settings
        self._gate = gate
        self._preface = preface
        self._on_slave_news = on_slave_news or (lambda: None)
        self.rejected = 0  # connections that did not prove membership
        self.links: list[SlaveLink] = []
        self.transfers = GroupTransferService(self.links, lambda: store.log_end,
                                              fallbehind_max=settings.ha_slave_fallbehind_max,
                                              timeout_s=sync_timeout_s)
        self.timeline = WriteTimeline()

    async def serve(self, listen: str, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept slaves on ``listen`` (a free port when that one is taken) until cancelled."""
        host, port = split_address(listen)
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            log.warning("HA port %s unavailable (%s): using a free port (slaves learn it from the name servers)",
                        listen, exc)
            listeners = await trio.open_tcp_listeners(0, host=host)
        bound = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._note_growth)
            nursery.start_soon(self.transfers.run)
            task_status.started(f"{host}:{bound}")
            await trio.serve_listeners(self._serve_slave, listeners)

    def start_offset(self, requested: int) -> int:
        """Where a slave's stream begins: where it asked, or for an empty slave the start of
        the last segment (the whole log under ``full_sync``)."""
        store = self.store
        if requested > 0:
            return requested
        if self.settings.full_sync:
            return store.log_start
        end = store.log_end
        return max(store.log_start, end - end % store.log_segment_size)

    async def _note_growth(self) -> None:
        while True:
            self.timeline.note(self.store.log_end, trio.current_time())
            await trio.sleep(self.timeline.sample_s)

    async def _serve_slave(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            return
        member = ""
        if self._gate is not None:
            proven = await self._admit(stream, peer)
            if proven is None:
                return
            member = proven
        if self._preface is not None:
            named = await self._greet(stream, peer)
            if named is None or (member and named != member):
                if named is not None:
                    log.warning("HA port: %s proved broker id %s and named itself %s: dropped", peer, member, named)
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(stream)
                return
            member = named
        now = trio.current_time()
        link = SlaveLink(peer, now, now, member=member)
        self.links.append(link)
        self._on_slave_news()
        log.info("slave %s connected%s", peer, f" (broker id {member})" if member else "")
        connection = HAConnection(stream, link, self.store, self.settings, start_offset=self.start_offset,
                                  acked=self._slave_acked)
        try:
            await connection.run()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as broken:
            log.info("slave %s link broke: %s", peer, broken.exceptions[0])
        except* ProtocolError as bad:
            log.warning("slave %s dropped: %s", peer, bad.exceptions[0])
        finally:
            self.links.remove(link)
            self._on_slave_news()
            log.info("slave %s disconnected (acked %s)", peer, link.acked)
            with trio.CancelScope(shield=True):
                await stream.aclose()

    def _slave_acked(self) -> None:
        self.transfers.slave_acked()
        self._on_slave_news()

    async def _greet(self, stream: trio.SocketStream, peer: str) -> str | None:
        assert self._preface is not None
        try:
            return await self._preface(stream)
        except (ProtocolError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.warning("HA port: %s failed the handshake: %s", peer, exc or "too slow")
            return None

    async def _admit(self, stream: trio.SocketStream, peer: str) -> str | None:
        """The broker id a connecting slave proved, or None once a peer that did not prove
        membership is disconnected."""
        assert self._gate is not None
        why: object = None
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                admitted = await admit_slave(stream, self._gate())
            return admitted.peer.member
        except trio.TooSlowError:
            why = f"no membership proof within {HANDSHAKE_TIMEOUT_S:.0f} s"
        except MembershipError as exc:
            why = exc
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            why = f"the link broke during the membership handshake: {exc}"
        self.rejected += 1
        log.warning("HA port: %s disconnected before any data: %s", peer, why)
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)
        return None

    def status(self) -> list[dict[str, object]]:
        """Per connected slave: its address, acked offset, lag in bytes and seconds."""
        end = self.store.log_end
        now = trio.current_time()
        out: list[dict[str, object]] = []
        for link in self.links:
            acked = link.acked if link.acked is not None else 0
            row: dict[str, object] = {"addr": link.peer, "ackOffset": acked, "lagBytes": max(0, end - acked),
                                      "lagSeconds": round(self.timeline.lag_s(acked, end, now), 3),
                                      "connectedSeconds": round(now - link.connected_at, 1)}
            if link.member:  # proven in the membership handshake (ACL on)
                row["brokerId"] = link.member
            out.append(row)
        return out
