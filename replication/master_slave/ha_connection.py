"""The master's link to one slave (RocketMQ's HAConnection): a reader of the slave's offset
reports (acks), a writer of transfer batches and heartbeats, and a housekeeper that drops the
link when the slave falls silent. The HAService accepts slaves and runs one of these each."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from core.config import ReplicationConfig
from core.errors import StoreError
from core.store.interfaces import ReplicatedStore
from replication.errors import ProtocolError
from replication.master_slave.acks import SlaveLink
from replication.master_slave.protocol import ReportParser, encode_transfer_header

log = logging.getLogger(__name__)

RECEIVE_BYTES = 4096


class HAConnection:
    """Serves one connected slave until the link breaks, the slave falls silent or its log
    turns out to be ahead of (forked from) this one."""

    def __init__(self, stream: trio.SocketStream, link: SlaveLink, store: ReplicatedStore,
                 settings: ReplicationConfig, *, start_offset: Callable[[int], int], acked: Callable[[], None]) -> None:
        self.stream = stream
        self.link = link
        self.store = store
        self.settings = settings
        self._start_offset = start_offset  # where a slave that reports this offset is streamed from
        self._acked = acked  # called after every ack: the service recomputes the group's best one

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            first_report = trio.Event()
            nursery.start_soon(self._read_reports, first_report, nursery.cancel_scope)
            nursery.start_soon(self._transfer, first_report)
            nursery.start_soon(self._drop_when_silent, nursery.cancel_scope)

    async def _read_reports(self, first_report: trio.Event, scope: trio.CancelScope) -> None:
        link, parser = self.link, ReportParser()
        while True:
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                scope.cancel()
                return
            link.last_heard = trio.current_time()
            offset = parser.feed(data)
            if offset is None:
                continue
            end = self.store.log_end
            if offset > end:
                # tell the slave where this log ends (a heartbeat), then drop it: RocketMQ
                # drops such a slave; ours then looks further back for where the logs agree
                log.warning("slave %s reports offset %d beyond this log's end %d: its log is ahead of "
                            "(forked from) this one", link.peer, offset, end)
                await self.stream.send_all(encode_transfer_header(end, 0))
                scope.cancel()
                return
            link.acked = offset
            if not first_report.is_set():
                first_report.set()
            self._acked()

    async def _transfer(self, first_report: trio.Event) -> None:
        await first_report.wait()
        link, stream, store = self.link, self.stream, self.store
        assert link.acked is not None
        position = self._start_offset(link.acked)
        if position < store.log_start:
            log.error("slave %s asks for offset %d, but this log now starts at %d: wipe the slave's store "
                      "to copy it afresh", link.peer, position, store.log_start)
            await stream.send_all(encode_transfer_header(store.log_start, 0))
            return
        log.info("streaming to slave %s from offset %d", link.peer, position)
        batch_max = self.settings.ha_transfer_batch_bytes
        heartbeat_s = self.settings.ha_heartbeat_interval_ms / 1000
        while True:
            if position < store.log_end:
                try:
                    data = store.read_log(position, batch_max)
                except StoreError as exc:
                    raise ProtocolError(str(exc)) from None
                await stream.send_all(encode_transfer_header(position, len(data)) + data)
                position += len(data)
                continue
            with trio.move_on_after(heartbeat_s):
                await self.store.wait_log_beyond(position)
                continue
            await stream.send_all(encode_transfer_header(position, 0))

    async def _drop_when_silent(self, scope: trio.CancelScope) -> None:
        silence_max = self.settings.ha_housekeeping_interval_ms / 1000
        while True:
            await trio.sleep_until(self.link.last_heard + silence_max)
            if trio.current_time() - self.link.last_heard >= silence_max:
                log.warning("slave %s silent for %.0f s: dropped", self.link.peer, silence_max)
                scope.cancel()
                return
