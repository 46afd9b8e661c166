"""The master's side: HAService (accept loop) and one HAConnection per slave (a reader of
acks, a writer of transfer batches and heartbeats, and a housekeeper dropping silent links)."""

from __future__ import annotations

import logging

import trio

from core.config import ReplicationConfig
from core.remoting.client import split_address
from core.store.message_store import MessageStore
from replication.errors import ProtocolError
from replication.master_slave.acks import SlaveLink, WriteTimeline, best_ack
from replication.master_slave.protocol import ReportParser, encode_transfer_header
from replication.watermark_waiters import AckWaiters

log = logging.getLogger(__name__)

RECEIVE_BYTES = 4096


class HAService:
    """Streams the master's CommitLog to every slave that connects."""

    def __init__(self, store: MessageStore, settings: ReplicationConfig) -> None:
        self.store = store
        self.settings = settings
        self.links: list[SlaveLink] = []
        self.acks = AckWaiters()
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
            nursery.start_soon(self.acks.tick)
            task_status.started(f"{host}:{bound}")
            await trio.serve_listeners(self._serve_slave, listeners)

    def start_offset(self, requested: int) -> int:
        """Where a slave's stream begins: where it asked, or for an empty slave the start of
        the last segment (the whole log under ``full_sync``)."""
        log_ = self.store.commitlog
        if requested > 0:
            return requested
        if self.settings.full_sync:
            return log_.min_offset
        end = log_.write_offset
        return max(log_.min_offset, end - end % log_.segment_size)

    async def _note_growth(self) -> None:
        while True:
            self.timeline.note(self.store.commitlog.write_offset, trio.current_time())
            await trio.sleep(self.timeline.sample_s)

    async def _serve_slave(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            return
        now = trio.current_time()
        link = SlaveLink(peer, now, now)
        self.links.append(link)
        log.info("slave %s connected", peer)
        try:
            async with trio.open_nursery() as nursery:
                first_report = trio.Event()
                nursery.start_soon(self._read_reports, stream, link, first_report, nursery.cancel_scope)
                nursery.start_soon(self._transfer, stream, link, first_report)
                nursery.start_soon(self._drop_when_silent, link, nursery.cancel_scope)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as broken:
            log.info("slave %s link broke: %s", peer, broken.exceptions[0])
        except* ProtocolError as bad:
            log.warning("slave %s dropped: %s", peer, bad.exceptions[0])
        finally:
            self.links.remove(link)
            log.info("slave %s disconnected (acked %s)", peer, link.acked)
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _read_reports(self, stream: trio.SocketStream, link: SlaveLink, first_report: trio.Event,
                            scope: trio.CancelScope) -> None:
        parser = ReportParser()
        while True:
            data = await stream.receive_some(RECEIVE_BYTES)
            if not data:
                scope.cancel()
                return
            link.last_heard = trio.current_time()
            offset = parser.feed(data)
            if offset is None:
                continue
            end = self.store.commitlog.write_offset
            if offset > end:
                # tell the slave where this log ends (a heartbeat), then drop it: RocketMQ
                # drops such a slave; ours then looks further back for where the logs agree
                log.warning("slave %s reports offset %d beyond this log's end %d: its log is ahead of "
                            "(forked from) this one", link.peer, offset, end)
                await stream.send_all(encode_transfer_header(end, 0))
                scope.cancel()
                return
            link.acked = offset
            if not first_report.is_set():
                first_report.set()
            best = best_ack(self.links)
            if best is not None:
                self.acks.advance(best)

    async def _transfer(self, stream: trio.SocketStream, link: SlaveLink, first_report: trio.Event) -> None:
        await first_report.wait()
        assert link.acked is not None
        log_ = self.store.commitlog
        position = self.start_offset(link.acked)
        if position < log_.min_offset:
            log.error("slave %s asks for offset %d, but this log now starts at %d: wipe the slave's store "
                      "to copy it afresh", link.peer, position, log_.min_offset)
            await stream.send_all(encode_transfer_header(log_.min_offset, 0))
            return
        log.info("streaming to slave %s from offset %d", link.peer, position)
        batch_max = self.settings.ha_transfer_batch_bytes
        heartbeat_s = self.settings.ha_heartbeat_interval_ms / 1000
        while True:
            end = log_.write_offset
            if position < end:
                seg = log_.segment_of(position)
                if seg is None:
                    raise ProtocolError(f"offset {position} is no longer in this log")
                size = min(batch_max, end - position, seg.end - position)
                await stream.send_all(encode_transfer_header(position, size) + seg.read(position - seg.start, size))
                position += size
                continue
            with trio.move_on_after(heartbeat_s):
                await self.store.wait_log_beyond(position)
                continue
            await stream.send_all(encode_transfer_header(position, 0))

    async def _drop_when_silent(self, link: SlaveLink, scope: trio.CancelScope) -> None:
        silence_max = self.settings.ha_housekeeping_interval_ms / 1000
        while True:
            await trio.sleep_until(link.last_heard + silence_max)
            if trio.current_time() - link.last_heard >= silence_max:
                log.warning("slave %s silent for %.0f s: dropped", link.peer, silence_max)
                scope.cancel()
                return

    def status(self) -> list[dict[str, object]]:
        """Per connected slave: its address, acked offset, lag in bytes and seconds."""
        end = self.store.commitlog.write_offset
        now = trio.current_time()
        out: list[dict[str, object]] = []
        for link in self.links:
            acked = link.acked if link.acked is not None else 0
            out.append({"addr": link.peer, "ackOffset": acked, "lagBytes": max(0, end - acked),
                        "lagSeconds": round(self.timeline.lag_s(acked, end, now), 3),
                        "connectedSeconds": round(now - link.connected_at, 1)})
        return out
