"""The proxy's gRPC port on trio: each connection a :class:`GrpcConnection` (sans-IO HTTP/2)
with a reader and a writer task, each call a trio task running a :class:`MessagingService` RPC.

Everything runs on the proxy's one trio thread (docs/grpc.md, "One event loop", says why this
replaced grpcio's asyncio server and a bridge between two threads). The writer sends whatever
the connection has made each time it is woken, so the answers of every call that finished in
one pass go out in one write.

- Unary calls (and ReceiveMessage, unary in, frames out) start when the request has arrived and
  the client half-closed; the frames are written in order and the status follows.
- Telemetry: every Settings the client writes is answered on the stream; the service may push
  commands at any time (transaction check-backs), at most ``proxy.telemetry_outbox_max`` unsent
  (past it the newest is dropped and counted: a broker asks again about an open transaction).
- A ``grpc-timeout`` is the call's deadline (DEADLINE_EXCEEDED); a client's RST_STREAM cancels
  the call's task.

Calls in progress are bounded (``proxy.grpc_calls_max``, streams included): one more is answered
TOO_MANY_REQUESTS at once (a Telemetry stream: RESOURCE_EXHAUSTED). Connections are bounded by
``connections_max`` (more are closed as they arrive), streams per connection and every size by
the connection (core/proxy/grpc/connection.py).
"""

from __future__ import annotations

import errno
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio
from google.protobuf.message import DecodeError

from core.addresses import split_address
from core.proxy.grpc.auth import Caller, caller_of
from core.proxy.grpc.calls import (
    GRPC_DEADLINE_EXCEEDED,
    GRPC_INTERNAL,
    GRPC_OK,
    GRPC_PERMISSION_DENIED,
    GRPC_RESOURCE_EXHAUSTED,
    GRPC_UNAUTHENTICATED,
    GRPC_UNIMPLEMENTED,
    CallCancelled,
    CallHalfClosed,
    CallMessage,
    CallOpened,
)
from core.proxy.grpc.connection import GrpcConnection
from core.proxy.grpc.messages import Refused
from core.proxy.grpc.service import MessagingService
from core.remoting.limits import ByteBudget
from formats.rocketmq_v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = "/apache.rocketmq.v2.MessagingService/"
MESSAGE_BYTES_MAX = 16 * 1024 * 1024  # a SendMessage of several 4 MiB bodies; bounded before decoding
LARGE_MESSAGES_BYTES_MAX = 64 * 1024 * 1024  # messages past a stream's window, arriving at once (all connections)
RECEIVE_BYTES = 256 * 1024
UNSENT_BYTES_MAX = 1 << 20  # answers made and not yet taken by the socket, before the reader waits
LINGER_BYTES_MAX = 1 << 20  # read and dropped after the last answer, before the socket is closed


class GrpcPortTaken(OSError):
    """The gRPC port is held by another socket."""


@dataclass(frozen=True, slots=True)
class Rpc:
    """One method of the service: how its request decodes and how it is served."""

    name: str
    kind: str  # "unary", "receive" (unary in, frames out) or "telemetry"
    request_type: Any
    response_type: Any = None
    method: Callable[[Any, Caller], Awaitable[Any]] | None = None

    def refuse(self, status: pb.Status) -> Any:
        """The answer that carries only ``status`` (a receive's: its one frame)."""
        if self.kind == "receive":
            return [pb.ReceiveMessageResponse(status=status)]
        return self.response_type(status=status)


def rpc_table(s: MessagingService) -> dict[str, Rpc]:
    """``/service/Method`` -> :class:`Rpc`, for every RPC the door serves."""
    p, c = s.producing, s.consuming
    unary = [
        ("QueryRoute", s.query_route, pb.QueryRouteRequest, pb.QueryRouteResponse),
        ("Heartbeat", s.heartbeat, pb.HeartbeatRequest, pb.HeartbeatResponse),
        ("SendMessage", p.send_message, pb.SendMessageRequest, pb.SendMessageResponse),
        ("QueryAssignment", c.query_assignment, pb.QueryAssignmentRequest, pb.QueryAssignmentResponse),
        ("AckMessage", c.ack_message, pb.AckMessageRequest, pb.AckMessageResponse),
        ("ForwardMessageToDeadLetterQueue", c.forward_to_dead_letter_queue,
         pb.ForwardMessageToDeadLetterQueueRequest, pb.ForwardMessageToDeadLetterQueueResponse),
        ("RecallMessage", p.recall_message, pb.RecallMessageRequest, pb.RecallMessageResponse),
        ("EndTransaction", p.end_transaction, pb.EndTransactionRequest, pb.EndTransactionResponse),
        ("NotifyClientTermination", s.notify_client_termination, pb.NotifyClientTerminationRequest,
         pb.NotifyClientTerminationResponse),
        ("ChangeInvisibleDuration", c.change_invisible_duration, pb.ChangeInvisibleDurationRequest,
         pb.ChangeInvisibleDurationResponse),
    ]
    table = {SERVICE + name: Rpc(name, "unary", req, resp, method) for name, method, req, resp in unary}
    table[SERVICE + "ReceiveMessage"] = Rpc("ReceiveMessage", "receive", pb.ReceiveMessageRequest,
                                            pb.ReceiveMessageResponse, c.receive_message)
    table[SERVICE + "Telemetry"] = Rpc("Telemetry", "telemetry", pb.TelemetryCommand)
    return table


class _Call:
    """A call of one connection, from its headers to its status."""

    __slots__ = ("rpc", "caller", "refusal", "timeout_s", "request", "scope", "inbox")

    def __init__(self, rpc: Rpc, caller: Caller | None, refusal: Refused | None, timeout_s: float | None) -> None:
        self.rpc = rpc
        self.caller = caller
        self.refusal = refusal
        self.timeout_s = timeout_s
        self.request: bytes | None = None
        self.scope = trio.CancelScope()
        self.inbox: trio.MemorySendChannel[tuple[bytes, int]] | None = None


class GrpcDoor:
    """The handlers of one proxy's gRPC port."""

    def __init__(self, service: MessagingService, connections_max: int) -> None:
        self.service = service
        self.rpcs = rpc_table(service)
        self.calls_max = service.settings.grpc_calls_max
        self.connections_max = connections_max
        self.calls = 0  # in progress now
        self.connections = 0
        self.telemetry_dropped = 0  # commands a full outbox did not take
        self.large_messages = ByteBudget(LARGE_MESSAGES_BYTES_MAX)

    def stats(self) -> dict[str, str]:
        return {"grpcCallsNow": str(self.calls), "grpcConnections": str(self.connections),
                "grpcTelemetryDropped": str(self.telemetry_dropped)}

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        if self.connections >= self.connections_max:
            log.warning("gRPC: a connection refused, %d open (connections_max)", self.connections)
            await trio.aclose_forcefully(stream)
            return
        self.connections += 1
        try:
            peer = stream.socket.getpeername()
            await _Connection(self, stream, str(peer[0])).run()
        except Exception:  # a bug serving one connection must not end the port's other connections
            log.exception("gRPC connection from %s", stream.socket.getpeername()[0] if stream.socket else "?")
        finally:
            self.connections -= 1


class _Connection:
    """One client connection: its reader, its writer and its calls."""

    def __init__(self, door: GrpcDoor, stream: trio.SocketStream, peer_host: str) -> None:
        self.door = door
        self.stream = stream
        self.peer_host = peer_host
        self.h2 = GrpcConnection(MESSAGE_BYTES_MAX, door.large_messages)
        self.calls: dict[int, _Call] = {}
        self._wake = trio.Event()
        self._sending = trio.Lock()
        self._in_write = 0  # octets taken by a write still in progress
        self._drained = trio.Event()  # set after each write: the reader may go on
        self._preface = trio.Event()
        self._reading = trio.CancelScope()

    def wake(self) -> None:
        """Something is ready to send: the writer sends it on its next pass."""
        self._wake.set()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._write)
                nursery.start_soon(self._watch)
                try:
                    with self._reading:
                        await self._read()
                finally:
                    for call in self.calls.values():
                        call.scope.cancel()
                    with trio.move_on_after(1):  # the GOAWAY of a broken connection, and what else is made
                        try:
                            await self._send_pending()
                            await self._linger()
                        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                            pass
                    nursery.cancel_scope.cancel()
        finally:
            await trio.aclose_forcefully(self.stream)

    async def _read(self) -> None:
        h2 = self.h2
        try:
            while not h2.closed:
                # back-pressure: a client that does not read its answers is not read either
                # (control frames it sends are answered; unread, those answers would pile up)
                while self._in_write + h2.pending_bytes() > UNSENT_BYTES_MAX:
                    self._drained = trio.Event()
                    self.wake()
                    await self._drained.wait()
                data = await self.stream.receive_some(RECEIVE_BYTES)
                if not data:
                    return
                for event in h2.receive(data):
                    self._on(event)
                if h2.preface_received and not self._preface.is_set():
                    self._preface.set()
                self.wake()
            if h2.close_reason is not None and h2.close_reason[0]:
                log.warning("gRPC connection from %s ended: GOAWAY %d, %s", self.peer_host, *h2.close_reason)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _linger(self) -> None:
        """After the last answer: stop sending, and read what the client still sends for a
        moment, so closing does not reset the connection before it has read the GOAWAY."""
        await self.stream.send_eof()
        drained = 0
        while drained < LINGER_BYTES_MAX:
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                return
            drained += len(data)

    async def _watch(self) -> None:
        """Close a connection that sends no preface in time, or that has had no call for
        ``grpc_idle_timeout_ms`` (a long-polling receive or a telemetry stream is a call)."""
        settings = self.door.service.settings
        with trio.move_on_after(settings.grpc_preface_timeout_ms / 1000):
            await self._preface.wait()
        if not self._preface.is_set():
            log.info("gRPC connection from %s: no HTTP/2 preface in %d ms, closed", self.peer_host,
                     settings.grpc_preface_timeout_ms)
            self._reading.cancel()
            return
        idle_s = settings.grpc_idle_timeout_ms / 1000
        quiet_since: float | None = None
        while True:
            await trio.sleep(idle_s / 4)
            now = trio.current_time()
            if self.calls or self.h2.open_streams:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= idle_s:
                self.h2.go_away()  # GOAWAY NO_ERROR: clients reconnect when they next call
                self._reading.cancel()
                return

    async def _send_pending(self) -> None:
        async with self._sending:  # the writer's pass and a last flush may meet
            data = self.h2.data_to_send()
            if data:
                self._in_write = len(data)
                try:
                    await self.stream.send_all(data)
                finally:
                    self._in_write = 0
                    self._drained.set()

    async def _write(self) -> None:
        try:
            while True:
                await self._wake.wait()
                await trio.lowlevel.checkpoint()  # the other calls answered in this pass go in the same write
                self._wake = trio.Event()
                await self._send_pending()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.nursery.cancel_scope.cancel()

    def _on(self, event: CallOpened | CallMessage | CallHalfClosed | CallCancelled) -> None:
        sid = event.stream_id
        if isinstance(event, CallMessage):
            call = self.calls.get(sid)
            if call is None or call.inbox is None:  # a unary request is taken at once
                self.h2.consumed(sid, event.wire_size)
            if call is None:
                return
            if call.inbox is not None:  # telemetry: unbounded here, as the stream's window bounds it
                call.inbox.send_nowait((event.message, event.wire_size))
            elif call.request is None:
                call.request = event.message
            else:
                self._end(sid, GRPC_UNIMPLEMENTED, "a unary call with two requests")
        elif isinstance(event, CallHalfClosed):
            call = self.calls.get(sid)
            if call is None:
                return
            if call.inbox is not None:
                call.inbox.close()
            elif call.request is None:
                self._end(sid, GRPC_UNIMPLEMENTED, "a unary call without a request")
            else:
                self.nursery.start_soon(self._unary, sid, call)
        elif isinstance(event, CallOpened):
            self._opened(event)
        else:
            call = self.calls.pop(sid, None)
            if call is not None:
                call.scope.cancel()

    def _end(self, sid: int, code: int, message: str) -> None:
        self.h2.finish(sid, code, message)
        call = self.calls.pop(sid, None)
        if call is not None:
            call.scope.cancel()

    def _opened(self, event: CallOpened) -> None:
        sid = event.stream_id
        rpc = self.door.rpcs.get(event.path)
        if rpc is None:
            self.h2.finish(sid, GRPC_UNIMPLEMENTED, f"no method {event.path[:200]}")
            return
        caller, refusal = None, None
        try:
            caller = caller_of(event.metadata, self.peer_host, self.door.service.acl.policy
                               if self.door.service.acl else None)
        except Refused as exc:
            refusal = exc
        call = _Call(rpc, caller, refusal, event.timeout_s)
        if refusal is None and self.door.calls >= self.door.calls_max:
            call.refusal = Refused(pb.TOO_MANY_REQUESTS, f"the proxy has {self.door.calls} calls in progress, "
                                   "its limit (proxy.grpc_calls_max); try again later")
        self.calls[sid] = call
        if rpc.kind == "telemetry":
            if call.refusal is not None:
                code = GRPC_UNAUTHENTICATED if refusal is not None else GRPC_RESOURCE_EXHAUSTED
                self._end(sid, code, call.refusal.message)
                return
            send, receive = trio.open_memory_channel[tuple[bytes, int]](math.inf)
            call.inbox = send
            self.nursery.start_soon(self._telemetry, sid, call, receive)

    def _answer(self, sid: int, messages: list[Any]) -> None:
        for message in messages:
            self.h2.send_message(sid, message.SerializeToString())
        self.h2.finish(sid, GRPC_OK)

    async def _unary(self, sid: int, call: _Call) -> None:
        if call.scope.cancel_called:  # reset before it started (rapid reset): nothing goes upstream
            return
        rpc = call.rpc
        try:
            request = rpc.request_type.FromString(call.request)
        except DecodeError as exc:
            self._end(sid, GRPC_INTERNAL, f"the request does not decode: {exc}")
            self.wake()
            return
        if call.refusal is not None:
            answer = rpc.refuse(pb.Status(code=call.refusal.code, message=call.refusal.message))
            if self.door.service.meters is not None:
                self.door.service.meters.grpc_answered(rpc.name, answer, time.perf_counter())
            self._answer(sid, _as_list(answer))
            self.calls.pop(sid, None)
            self.wake()
            return
        assert call.caller is not None and rpc.method is not None
        self.door.calls += 1
        try:
            with call.scope:
                call.scope.deadline = trio.current_time() + call.timeout_s if call.timeout_s else math.inf
                answer = await self.door.service.serve(rpc.name, rpc.method, request, call.caller, rpc.refuse)
                self._answer(sid, _as_list(answer))
            if call.scope.cancelled_caught and sid in self.calls:  # not the client's reset: the deadline
                self.h2.finish(sid, GRPC_DEADLINE_EXCEEDED, "the call's deadline (grpc-timeout) passed")
        except Exception:  # a bug: logged, and the client gets INTERNAL
            log.exception("gRPC %s", rpc.name)
            self.h2.finish(sid, GRPC_INTERNAL, "the proxy failed serving the call")
        finally:
            self.door.calls -= 1
            self.calls.pop(sid, None)
            self.wake()

    async def _telemetry(self, sid: int, call: _Call, inbox: trio.MemoryReceiveChannel[tuple[bytes, int]]) -> None:
        service, caller = self.door.service, call.caller
        assert caller is not None
        outbox_max = service.settings.telemetry_outbox_max

        def push(command: pb.TelemetryCommand) -> None:
            if self.h2.queued(sid) >= outbox_max:  # the client does not read: the newest goes, counted
                self.door.telemetry_dropped += 1
                log.warning("telemetry of %s: %d commands unread, one dropped", caller.client_id, outbox_max)
                return
            self.h2.send_message(sid, command.SerializeToString())
            self.wake()

        try:
            await service.attach_stream(caller, push)
        except Refused as exc:  # another account's client id, or too many streams or clients
            self._end(sid, GRPC_PERMISSION_DENIED if exc.code == pb.FORBIDDEN else GRPC_RESOURCE_EXHAUSTED,
                      exc.message)
            self.wake()
            return
        self.door.calls += 1
        try:
            with call.scope:
                async for data, size in inbox:
                    self.h2.consumed(sid, size)  # the client may send more
                    self.wake()
                    try:
                        command = pb.TelemetryCommand.FromString(data)
                    except DecodeError:
                        continue
                    if not command.HasField("settings"):
                        continue  # thread stack traces and verify results: RocketMQ's admin tools ask; not relayed
                    try:
                        push(await service.apply_settings(command, caller))
                    except Refused as exc:
                        push(pb.TelemetryCommand(status=pb.Status(code=exc.code, message=exc.message)))
                self.h2.finish(sid, GRPC_OK)
        except Exception:
            log.exception("telemetry of %s", caller.client_id)
            self.h2.finish(sid, GRPC_INTERNAL, "the proxy failed serving the stream")
        finally:
            self.door.calls -= 1
            self.calls.pop(sid, None)
            service.detach_stream(caller, push)
            self.wake()


def _as_list(answer: Any) -> list[Any]:
    return answer if isinstance(answer, list) else [answer]


async def serve_grpc(service: MessagingService, listen: str, *, connections_max: int = 1024,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``service`` on ``listen`` until cancelled; reports the bound port."""
    host, port = split_address(listen)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise GrpcPortTaken(f"{listen}: {exc}") from None
        raise
    door = GrpcDoor(service, connections_max)
    service.door_stats = door.stats
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(door.serve_connection, listeners)
