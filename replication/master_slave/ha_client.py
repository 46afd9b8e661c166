"""The slave's side (RocketMQ's HAClient): connect to the master's HA port, report the offset
to start from, verify and append what streams in, acknowledge, reconnect when the link drops.
With ACL on, it first proves its membership and checks the master's
(:mod:`replication.master_slave.handshake`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from core.addresses import split_address
from core.config import ReplicationConfig
from core.errors import StoreError
from core.store.interfaces import ReplicatedStore
from replication.errors import ProtocolError
from replication.master_slave.handshake import prove_to_master
from replication.master_slave.protocol import TransferParser, encode_report
from replication.master_slave.slave_session import (
    VERIFY_WINDOW_BYTES,
    Append,
    GoBack,
    Refuse,
    ReplicaSession,
    Truncate,
)
from replication.membership import HANDSHAKE_TIMEOUT_S, Connector, MembershipError

log = logging.getLogger(__name__)

RECEIVE_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 3.0
FIRST_RETRY_S = 0.2


class HAClient:
    """Keeps a slave's store a byte-for-byte copy of its master's CommitLog."""

    def __init__(self, store: ReplicatedStore, settings: ReplicationConfig, *,
                 prover: Callable[[], Connector] | None = None, source_host: str | None = None,
                 preface: Callable[[trio.SocketStream], Awaitable[None]] | None = None,
                 on_appended: Callable[[int], None] | None = None) -> None:
        """``prover``: with ACL on, a fresh connector for each connection's handshake.
        ``source_host``: the local address connections to the master start from (None: any).
        ``preface``: what a link starts with before the first report (controller mode: the
        epochs' handshake, which may cut this store's log). ``on_appended``: called with the
        log's end after each append."""
        self.store = store
        self._preface = preface
        self._on_appended = on_appended
        self.source_host = source_host
        self.settings = settings
        self._prover = prover
        self._refused_by_master: str | None = None  # the last handshake failure, logged once
        self.master_ha: str | None = None
        self.connected = False
        self.local_addr: str | None = None
        self.refused: str | None = None  # why this slave stopped replicating (a forked log)
        self.truncated_bytes = 0
        self.links_made = 0
        self._window = VERIFY_WINDOW_BYTES
        self._master_changed = trio.Event()
        self._last_heard = 0.0

    @property
    def silent_s(self) -> float:
        """Seconds since the master last sent anything (data or a heartbeat); infinite while
        not connected."""
        return trio.current_time() - self._last_heard if self.connected else float("inf")

    def set_master(self, ha_addr: str | None) -> None:
        if ha_addr and ha_addr != self.master_ha:
            log.info("master HA address: %s", ha_addr)
            self.master_ha = ha_addr
            self._master_changed.set()

    async def run(self) -> None:
        """Replicate until cancelled. After a lost link the slave retries soon (a master being
        restarted is back within seconds), then every ``ha_reconnect_interval_ms``."""
        retry_max_s = self.settings.ha_reconnect_interval_ms / 1000
        retry_s = FIRST_RETRY_S
        while True:
            if self.master_ha is None or self.refused is not None:
                await self._master_changed.wait()
                self._master_changed = trio.Event()
                continue
            was_connected = self.links_made
            again_at_once = await self._session(self.master_ha)
            if again_at_once:
                continue
            retry_s = FIRST_RETRY_S if self.links_made > was_connected else min(retry_s * 2, retry_max_s)
            with trio.move_on_after(retry_s):
                await self._master_changed.wait()
            self._master_changed = trio.Event()

    async def _session(self, address: str) -> bool:
        """One connection; True when the next one should start at once (verify further back)."""
        host, port = split_address(address)
        try:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                stream = await trio.open_tcp_stream(host, port, local_address=self.source_host)
        except (OSError, trio.TooSlowError) as exc:
            log.debug("cannot reach master HA %s: %s", address, exc)
            return False
        sending = trio.StrictFIFOLock()  # the receive loop and the periodic report share the stream
        again = False
        try:
            if self._prover is not None and not await self._prove(stream, address):
                return False
            if self._preface is not None:
                await self._preface(stream)
            session = ReplicaSession(self.store, self._window)  # after the preface: it may cut the log
            self.local_addr = "{}:{}".format(*stream.socket.getsockname()[:2])
            self.connected = True
            self.links_made += 1
            self._last_heard = trio.current_time()
            await stream.send_all(encode_report(session.request_offset))
            log.info("replicating from %s, starting at %d%s", address, session.request_offset,
                     " (verifying)" if session.verifying else "")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._report_periodically, stream, sending, session)
                nursery.start_soon(self._drop_when_silent, nursery.cancel_scope)
                again = await self._receive(stream, sending, session)
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as broken:
            log.info("link to master %s broke: %s", address, broken.exceptions[0])
        except* (ProtocolError, trio.TooSlowError) as bad:
            log.warning("dropping the link to master %s: %s", address, bad.exceptions[0] or "too slow")
        except* (StoreError, ValueError) as failed:  # a full disk, bytes that do not fit: retried later
            log.error("cannot apply what master %s sent: %s", address, failed.exceptions[0])
        finally:
            self.connected = False
            with trio.CancelScope(shield=True):
                await stream.aclose()
        return again

    async def _prove(self, stream: trio.SocketStream, address: str) -> bool:
        """The membership handshake on a new link; False when it failed (the caller closes it)."""
        assert self._prover is not None
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await prove_to_master(stream, self._prover())
            if self._refused_by_master is not None:
                log.info("master %s accepted this slave's membership proof", address)
            self._refused_by_master = None
            return True
        except trio.TooSlowError:
            why = f"no answer to the membership handshake within {HANDSHAKE_TIMEOUT_S:.0f} s"
        except MembershipError as exc:
            why = f"{exc} (with [acl] enabled, master and slave need the same admin account's keys; the " \
                  "master's log says what it refused)"
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            why = f"the link broke during the membership handshake: {exc}"
        if why != self._refused_by_master:  # once per reason, not at every retry
            log.warning("master %s: %s", address, why)
            self._refused_by_master = why
        return False

    async def _receive(self, stream: trio.SocketStream, sending: trio.StrictFIFOLock,
                       session: ReplicaSession) -> bool:
        parser = TransferParser(self.settings.ha_transfer_batch_bytes)
        while True:
            data = await stream.receive_some(RECEIVE_BYTES)
            if not data:
                log.info("master closed the link")
                return False
            self._last_heard = trio.current_time()
            appended = False
            was_verifying = session.verifying  # a check that just ended is news for the master too
            for transfer in parser.feed(data):
                for action in session.on_transfer(transfer):
                    if isinstance(action, Append):
                        self.store.append_replicated(action.offset, action.data)
                        appended = True
                    elif isinstance(action, Truncate):
                        cut = self.store.truncate(action.end)
                        self.truncated_bytes += cut
                        log.warning("this slave's log forked from its master's at offset %d: cut %d bytes there "
                                    "and copying the master's instead", action.end, cut)
                    elif isinstance(action, GoBack):
                        self._window = action.window
                        log.warning("this slave's log differs from its master's before offset %d: checking "
                                    "%d bytes further back", session.start, action.window)
                        return True
                    elif isinstance(action, Refuse):
                        self.refused = action.reason
                        log.error("replication stopped: %s. Wipe this node's store (its data_dir folder) to "
                                  "copy the master afresh.", action.reason)
                        return False
            if not session.verifying:
                self._window = VERIFY_WINDOW_BYTES
            if appended or was_verifying:
                async with sending:
                    await stream.send_all(encode_report(session.ack_offset))
            if appended:
                self.store.dispatch_replicated()
                if self._on_appended is not None:
                    self._on_appended(self.store.log_end)

    async def _report_periodically(self, stream: trio.SocketStream, sending: trio.StrictFIFOLock,
                                   session: ReplicaSession) -> None:
        interval = self.settings.ha_heartbeat_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            async with sending:
                await stream.send_all(encode_report(session.ack_offset))

    async def _drop_when_silent(self, scope: trio.CancelScope) -> None:
        silence_max = self.settings.ha_housekeeping_interval_ms / 1000
        while True:
            await trio.sleep_until(self._last_heard + silence_max)
            if trio.current_time() - self._last_heard >= silence_max:
                log.warning("master silent for %.0f s: reconnecting", silence_max)
                scope.cancel()
                return
