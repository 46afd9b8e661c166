"""Auto-renew: a push consumer's messages stay invisible while its handler works on them, as
RocketMQ's proxy keeps them (its ReceiptHandleProcessor).

A ReceiveMessage with ``auto_renew`` hands its messages out for ``proxy.auto_renew_slice_ms``
(60 s), and the proxy keeps each handle. Once a second it looks for handles that come back
within ``proxy.auto_renew_ahead_ms`` (10 s) and gives them another slice
(CHANGE_MESSAGE_INVISIBLETIME on the client's session, which makes a new handle), for at most
``proxy.auto_renew_max_ms`` (3 h) after the receive. The client keeps acking with the handle it
was given: :meth:`Renewals.latest` stops the renewing and names the handle the broker knows now
(after a renewal in flight has finished, so the ack cannot pass it).

What is kept is bounded (``RENEWING_MAX`` handles for the proxy; past it a message is handed out
without renewal, counted in ``grpcRenewSkipped``), and goes with its client: a client that
terminates or goes silent stops being renewed, and its messages come back after their slice.
A renewal the broker refuses (the message was acked or came back already) is dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from core.clock import now_ms
from core.config import ProxySettings
from core.proxy.forwarder import Forwarder
from core.proxy.grpc.ack_batches import AckOf, ack_request, changed_handle
from core.proxy.grpc.clients import GrpcClient, GrpcClients
from core.remoting.codes import ResponseCode
from formats.pop import ReceiptHandle

log = logging.getLogger(__name__)

RENEWING_MAX = 100_000
RENEW_TICK_S = 1.0
RENEWS_AT_ONCE = 64


@dataclass(slots=True)
class Renewing:
    """One handed-out message kept invisible: its newest handle, and until when to renew it."""

    group: str
    topic: str
    handle: ReceiptHandle
    until_ms: int
    busy: trio.Event | None = None  # set when a renewal in flight finishes


class Renewals:
    """Every client's renewing handles, and the loop renewing them."""

    def __init__(self, clients: GrpcClients, forwarder: Forwarder, settings: ProxySettings) -> None:
        self.clients = clients
        self.forwarder = forwarder
        self.settings = settings
        self.renewed = 0  # renewals the broker took
        self.skipped = 0  # handles not kept: RENEWING_MAX reached
        self._limit = trio.CapacityLimiter(RENEWS_AT_ONCE)
        self._by_client: dict[str, dict[str, Renewing]] = {}  # client id -> handed-out handle -> renewal
        self._count = 0

    def count(self) -> int:
        return self._count

    def keep(self, client: GrpcClient, text: str, group: str, topic: str, handle: ReceiptHandle) -> None:
        """Renew the message handed out as ``text`` until the client acks it (or the bounds end it)."""
        if self._count >= RENEWING_MAX:
            self.skipped += 1
            return
        mine = self._by_client.setdefault(client.caller.client_id, {})
        if text not in mine:
            self._count += 1
        mine[text] = Renewing(group, topic, handle, handle.pop_time_ms + self.settings.auto_renew_max_ms)

    def _forget(self, client_id: str, text: str) -> Renewing | None:
        mine = self._by_client.get(client_id)
        renewing = mine.pop(text, None) if mine is not None else None
        if renewing is not None:
            self._count -= 1
            if not mine:
                del self._by_client[client_id]
        return renewing

    async def latest(self, client: GrpcClient, text: str) -> str:
        """The newest handle of the message handed out as ``text`` (``text`` itself when it is not
        renewed); it is renewed no more."""
        renewing = self._forget(client.caller.client_id, text)
        if renewing is None:
            return text
        if renewing.busy is not None:
            await renewing.busy.wait()
        return renewing.handle.text(with_commit_log_offset=True)

    async def run(self) -> None:
        """Renew what is due, once a second, until cancelled."""
        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(RENEW_TICK_S)
                now = now_ms()
                for client_id, mine in list(self._by_client.items()):
                    client = self.clients.find(client_id)
                    for text, renewing in list(mine.items()):
                        if client is None or now >= renewing.until_ms:  # the client left, or long enough
                            self._forget(client_id, text)
                        elif renewing.busy is None and renewing.handle.visible_again_ms() - now <= \
                                self.settings.auto_renew_ahead_ms:
                            renewing.busy = trio.Event()
                            nursery.start_soon(self._renew, client, text, renewing)

    async def _renew(self, client: GrpcClient, text: str, renewing: Renewing) -> None:
        assert renewing.busy is not None
        try:
            async with self._limit:
                request = ack_request(AckOf(renewing.group, renewing.topic, renewing.handle),
                                      invisible_ms=self.settings.auto_renew_slice_ms)
                resp = await self.forwarder.write(request, client.session, renewing.handle.broker_name)
            new = changed_handle(renewing.handle, resp) if resp is not None and resp.code == ResponseCode.SUCCESS \
                else None
            if new is None:
                log.info("renewal of a message of %s refused: %s", renewing.group, resp.remark if resp else "no answer")
                self._forget(client.caller.client_id, text)
            else:
                renewing.handle = new
                self.renewed += 1
        finally:
            renewing.busy.set()
            renewing.busy = None
