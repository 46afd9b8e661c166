"""One client runtime per process (RocketMQ's MQClientInstance): the remoting client, routes
from the name servers, heartbeats to every broker, and the requests brokers send us."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import orjson
import trio

from core.addresses import split_address
from core.client.route import MessageQueue, TopicRoute, parse_route
from core.errors import RemotingError
from core.nursery import open_unwrapped_nursery
from core.remoting.client import RemotingClient
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.signing import Credentials

log = logging.getLogger(__name__)

ROUTE_REFRESH_S = 30.0
HEARTBEAT_S = 30.0
LANGUAGE = "PYTHON"


class ConsumerHandle(Protocol):
    """What the runtime asks of a consumer it hosts (the push consumer is one): its part of
    every heartbeat, and the requests brokers send about its group."""

    def heartbeat_data(self) -> dict[str, Any]: ...

    def rebalance_soon(self) -> None: ...

    def reset_from_broker(self, request: RemotingCommand) -> Reply: ...

    def running_info(self) -> dict[str, Any]: ...

    async def stop(self) -> None: ...


ServerRequestHandler = Callable[[RemotingCommand, Connection], Reply]


class ClientError(Exception):
    """A client operation failed; the message names the broker(s) and why."""


class ClientRuntime:
    def __init__(self, nursery: trio.Nursery, namesrv: list[str], *, instance: str = "DEFAULT",
                 credentials: Credentials | None = None, source_host: str | None = None) -> None:
        if not namesrv:
            raise ClientError("no name server address given")
        self.nursery = nursery
        self.namesrv = list(namesrv)
        self.local_ip = source_host or local_ip_towards(self.namesrv[0])
        self.client_id = f"{self.local_ip}@{os.getpid()}#{instance}#{time.time_ns()}"
        self.remoting = RemotingClient(nursery, self, credentials=credentials, source_host=source_host)
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        # called with a topic whose route changed (None: the topic is gone): consumers rebalance
        self.route_listeners: list[Callable[[str, TopicRoute | None], None]] = []
        self.route_changes = 0  # counts route changes: producers prune their fault tables when it moved
        # queues a broker told us to pull from another node of its group (suggestWhichBrokerId)
        self.pull_from: dict[MessageQueue, int] = {}
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, ConsumerHandle] = {}
        self._ns_index = 0
        # requests brokers send us, by code; producers and consumers register theirs
        self.request_handlers: dict[int, ServerRequestHandler] = {
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._consumer_ids_changed,
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self._reset_consumer_offset,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self._consumer_running_info,
        }

    # ------------------------------------------------------------------ routes

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRoute | None:
        cached = self._routes.get(topic)
        if cached is not None and not refresh and trio.current_time() - cached[0] < ROUTE_REFRESH_S:
            return cached[1]
        errors = []
        for i in range(len(self.namesrv)):
            addr = self.namesrv[(self._ns_index + i) % len(self.namesrv)]
            try:
                resp = await self.remoting.invoke(addr, RemotingCommand(
                    code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}, language=LANGUAGE), 5)
            except RemotingError as exc:
                errors.append(f"{addr}: {exc}")
                continue
            self._ns_index = (self._ns_index + i) % len(self.namesrv)
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                if self._routes.pop(topic, None) is not None:
                    self._route_changed(topic, None)
                return None
            if resp.code != ResponseCode.SUCCESS:
                errors.append(f"{addr}: code {resp.code} {resp.remark}")
                continue
            route = parse_route(topic, resp.body)
            known = self._routes.get(topic)
            self._routes[topic] = (trio.current_time(), route)
            if known is None or known[1] != route:
                self._route_changed(topic, route)
            return route
        if cached is not None:
            return cached[1]  # name servers unreachable: keep using what we knew
        raise ClientError(f"no name server answered for topic {topic}: {'; '.join(errors)}")

    def forget_route(self, topic: str) -> None:
        """Ask the name servers on the next use (after a broker failed us)."""
        self._routes.pop(topic, None)

    def _route_changed(self, topic: str, route: TopicRoute | None) -> None:
        self.route_changes += 1
        for listener in self.route_listeners:
            listener(topic, route)

    async def route_refresh_loop(self) -> None:
        """Every ROUTE_REFRESH_S, fetch every route in use again (RocketMQ's
        updateTopicRouteInfoFromNameServer), so brokers that left stop being chosen."""
        while True:
            await trio.sleep(ROUTE_REFRESH_S)
            for topic in list(self._routes):
                try:
                    await self.route(topic, refresh=True)
                except ClientError as exc:
                    log.debug("route refresh of %s failed: %s", topic, exc)

    def broker_names(self) -> set[str]:
        """The broker groups of every route in use."""
        return {name for _, route in self._routes.values() for name in route.brokers}

    def broker_addresses(self) -> set[str]:
        return {addr for _, route in self._routes.values() for ids in route.brokers.values() for addr in ids.values()}

    # ------------------------------------------------------------------ calls

    async def invoke(self, address: str, cmd: RemotingCommand, timeout_s: float = 3.0) -> RemotingCommand:
        cmd.language = LANGUAGE
        return await self.remoting.invoke(address, cmd, timeout_s)

    async def oneway(self, address: str, cmd: RemotingCommand) -> None:
        cmd.language = LANGUAGE
        await self.remoting.invoke_oneway(address, cmd)

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_body(self) -> bytes:
        doc: dict[str, Any] = {"clientID": self.client_id,
                               "producerDataSet": [{"groupName": g} for g in sorted(self.producer_groups)],
                               "consumerDataSet": [c.heartbeat_data() for c in self.consumers.values()]}
        return orjson.dumps(doc)

    async def heartbeat_all(self) -> None:
        body = self.heartbeat_body()
        for addr in sorted(self.broker_addresses()):
            try:
                await self.invoke(addr, RemotingCommand(code=RequestCode.HEART_BEAT, body=body), 3)
            except RemotingError as exc:
                log.debug("heartbeat to %s failed: %s", addr, exc)

    async def heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(HEARTBEAT_S)
            await self.heartbeat_all()

    # ------------------------------------------------------------------ broker -> client

    def process(self, request: RemotingCommand, conn: Connection) -> Reply:
        handler = self.request_handlers.get(request.code)
        if handler is None:
            return request.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {request.code} not supported")
        return handler(request, conn)

    def _consumer_ids_changed(self, request: RemotingCommand, conn: Connection) -> Reply:
        consumer = self.consumers.get(request.ext_fields.get("consumerGroup", ""))
        if consumer is not None:
            consumer.rebalance_soon()
        return None

    def _reset_consumer_offset(self, request: RemotingCommand, conn: Connection) -> Reply:
        group = request.ext_fields.get("group", "")
        consumer = self.consumers.get(group)
        if consumer is None:  # a oneway request (as brokers send it) gets no answer
            return request.reply(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} in client {self.client_id}")
        return consumer.reset_from_broker(request)

    def _consumer_running_info(self, request: RemotingCommand, conn: Connection) -> Reply:
        group = request.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        if consumer is None:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} in client {self.client_id}")
        return request.reply(ResponseCode.SUCCESS, body=orjson.dumps(consumer.running_info()))

    async def shutdown(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer.stop()
        body = {"clientID": self.client_id}
        for addr in sorted(self.broker_addresses()):
            for group in sorted(self.producer_groups):
                with contextlib.suppress(RemotingError):
                    await self.invoke(addr, RemotingCommand(code=RequestCode.UNREGISTER_CLIENT, ext_fields={
                        **body, "producerGroup": group}), 3)
        self.remoting.close()


def local_ip_towards(address: str) -> str:
    """This host's address as ``address`` sees it: the source the kernel picks for a route there
    (a UDP socket's connect sends nothing), so message ids and the client id carry the client
    host's address on whatever network it shares with the name server, 127.0.0.1 on loopback.
    (RocketMQ takes the first site-local address of any interface, which on a host with several
    networks may be one the brokers never see.) A runtime given a ``source_host`` names itself
    by that instead."""
    try:
        host, port = split_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return "127.0.0.1"


@contextlib.asynccontextmanager
async def open_client(namesrv: list[str], *, instance: str = "DEFAULT", credentials: Credentials | None = None,
                      source_host: str | None = None) -> AsyncIterator[ClientRuntime]:
    """A client runtime with its background tasks; shut down cleanly on exit. With
    ``credentials`` every request is signed for an ACL-enabled broker; with ``source_host``
    every connection starts from that local address."""
    async with open_unwrapped_nursery() as nursery:
        runtime = ClientRuntime(nursery, namesrv, instance=instance, credentials=credentials,
                                source_host=source_host)
        nursery.start_soon(runtime.heartbeat_loop)
        nursery.start_soon(runtime.route_refresh_loop)
        try:
            yield runtime
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await runtime.shutdown()
            nursery.cancel_scope.cancel()
