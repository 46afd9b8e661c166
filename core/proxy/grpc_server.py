"""The proxy's gRPC front door: grpcio's asyncio server in a thread of its own, each RPC handed
to :class:`MessagingService` on trio through a :class:`TrioPortal`.

grpcio is the server every RocketMQ 5 client is tested against, and it is kept by the gRPC
project; it runs on asyncio, not trio. Rather than a second event model in the core, the server
keeps to this module: it decodes a call, names its caller, awaits the trio side, and encodes
the answer. Streams:

- ReceiveMessage: the trio side answers the whole POP (after its long poll); the frames are
  then written in order (status, messages, delivery timestamp) and the stream completes.
- Telemetry: every Settings the client writes is answered on the stream; the trio side may push
  commands at any time (transaction check-backs) through the stream's outbox, which holds at
  most ``proxy.telemetry_outbox_max`` (a client that does not read loses the newest; a broker
  asks again about an open transaction). The stream ends when the client ends it.

Calls in progress are bounded (``proxy.grpc_calls_max``, streams included): one more is answered
TOO_MANY_REQUESTS at once (a Telemetry stream: RESOURCE_EXHAUSTED), and grpcio's own limit, a
little higher, backs it. This thread keeps only its own counters (calls now, telemetry commands
dropped); every per-RPC counter is kept on the trio side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
import trio

from core.proxy.asyncio_bridge import AsyncioThread, TrioPortal
from core.proxy.grpc_auth import Caller, caller_of
from core.proxy.grpc_messages import Refused
from core.proxy.grpc_service import MessagingService
from core.remoting.client import split_address
from formats.rocketmq_v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = "apache.rocketmq.v2.MessagingService"
MESSAGE_BYTES_MAX = 16 * 1024 * 1024  # a SendMessage of several 4 MiB bodies; bounded before decoding
STOP_GRACE_S = 1.0
STREAMS_PER_CONNECTION_MAX = 256  # HTTP/2 streams one connection may have open (more wait)


def _peer_host(context: grpc.aio.ServicerContext) -> str:
    peer = context.peer() or ""  # "ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000"
    _, _, rest = peer.partition(":")
    host, _, _ = rest.rpartition(":")
    return host.strip("[]")


class GrpcDoor:
    """The asyncio-side handlers of one proxy's gRPC port."""

    def __init__(self, service: MessagingService, portal: TrioPortal) -> None:
        self.service = service
        self.portal = portal
        self.calls_max = service.settings.grpc_calls_max
        self.calls = 0  # in progress now; written on this thread only
        self.telemetry_dropped = 0  # commands a full outbox did not take

    def stats(self) -> dict[str, str]:
        """This thread's counters, read from trio (plain ints: a read needs no lock)."""
        return {"grpcCallsNow": str(self.calls), "grpcTelemetryDropped": str(self.telemetry_dropped)}

    def _busy(self) -> pb.Status | None:
        """TOO_MANY_REQUESTS when the calls in progress are at their limit."""
        if self.calls < self.calls_max:
            return None
        return pb.Status(code=pb.TOO_MANY_REQUESTS, message=f"the proxy has {self.calls} calls in progress, its "
                         "limit (proxy.grpc_calls_max); try again later")

    @contextlib.contextmanager
    def _in_progress(self) -> Iterator[None]:
        """Count a call among those in progress while it runs."""
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1

    def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        return caller_of(metadata, _peer_host(context), self.service.acl.policy if self.service.acl else None)

    def unary(self, name: str, method: Callable[[Any, Caller], Awaitable[Any]], request_type: Any,
              response_type: Any) -> grpc.RpcMethodHandler:
        def refuse(status: pb.Status) -> Any:
            return response_type(status=status)

        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                caller = self._caller(context)
            except Refused as exc:
                return refuse(pb.Status(code=exc.code, message=exc.message))
            if (busy := self._busy()) is not None:
                return refuse(busy)
            with self._in_progress():
                return await self.portal.call(self.service.serve, name, method, request, caller, refuse)
        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=request_type.FromString,
                                                   response_serializer=response_type.SerializeToString)

    def receive(self) -> grpc.RpcMethodHandler:
        async def handle(request: pb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
                         ) -> AsyncIterator[pb.ReceiveMessageResponse]:
            try:
                caller = self._caller(context)
            except Refused as exc:
                yield pb.ReceiveMessageResponse(status=pb.Status(code=exc.code, message=exc.message))
                return
            if (busy := self._busy()) is not None:
                yield pb.ReceiveMessageResponse(status=busy)
                return
            with self._in_progress():
                frames = await self.portal.call(self.service.serve, "ReceiveMessage", self.service.receive_message,
                                                request, caller, _receive_refused)
            for frame in frames:
                yield frame
        return grpc.unary_stream_rpc_method_handler(handle, request_deserializer=pb.ReceiveMessageRequest.FromString,
                                                    response_serializer=pb.ReceiveMessageResponse.SerializeToString)

    def telemetry(self) -> grpc.RpcMethodHandler:
        async def handle(requests: AsyncIterator[pb.TelemetryCommand], context: grpc.aio.ServicerContext
                         ) -> AsyncIterator[pb.TelemetryCommand]:
            try:
                caller = self._caller(context)
            except Refused as exc:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, exc.message)
                return
            if (busy := self._busy()) is not None:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, busy.message)
                return
            loop = asyncio.get_running_loop()
            outbox: asyncio.Queue[pb.TelemetryCommand | None] = asyncio.Queue()  # None: the client ended
            outbox_max = self.service.settings.telemetry_outbox_max

            def offer(command: pb.TelemetryCommand) -> None:
                if outbox.qsize() >= outbox_max:  # the client does not read: the newest goes, counted
                    self.telemetry_dropped += 1
                    log.warning("telemetry of %s: %d commands unread, one dropped", caller.client_id, outbox.qsize())
                else:
                    outbox.put_nowait(command)

            def push(command: pb.TelemetryCommand) -> None:  # from trio
                loop.call_soon_threadsafe(offer, command)

            async def read() -> None:
                try:
                    async for command in requests:
                        if command.HasField("settings"):
                            try:
                                offer(await self.portal.call(self.service.apply_settings, command, caller))
                            except Refused as exc:
                                offer(pb.TelemetryCommand(status=pb.Status(code=exc.code, message=exc.message)))
                            except Exception:  # a bug: logged, and the client sees the stream end
                                log.exception("settings of %s", caller.client_id)
                                raise
                        # thread stack traces and verify results: RocketMQ's admin tools ask for them; not relayed
                finally:
                    outbox.put_nowait(None)

            try:
                await self.portal.call(self.service.attach_stream, caller, push)
            except Refused as exc:  # another account's client id, or too many streams or clients
                await context.abort(grpc.StatusCode.PERMISSION_DENIED if exc.code == pb.FORBIDDEN
                                    else grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
                return
            reader = asyncio.ensure_future(read())
            try:
                with self._in_progress():
                    while (command := await outbox.get()) is not None:
                        yield command
            finally:
                reader.cancel()
                self.portal.post(self.service.detach_stream, caller, push)
        return grpc.stream_stream_rpc_method_handler(handle, request_deserializer=pb.TelemetryCommand.FromString,
                                                     response_serializer=pb.TelemetryCommand.SerializeToString)

    def handlers(self) -> grpc.GenericRpcHandler:
        s = self.service
        return grpc.method_handlers_generic_handler(SERVICE, {
            "QueryRoute": self.unary("QueryRoute", s.query_route, pb.QueryRouteRequest, pb.QueryRouteResponse),
            "Heartbeat": self.unary("Heartbeat", s.heartbeat, pb.HeartbeatRequest, pb.HeartbeatResponse),
            "SendMessage": self.unary("SendMessage", s.send_message, pb.SendMessageRequest, pb.SendMessageResponse),
            "QueryAssignment": self.unary("QueryAssignment", s.query_assignment, pb.QueryAssignmentRequest,
                                          pb.QueryAssignmentResponse),
            "ReceiveMessage": self.receive(),
            "AckMessage": self.unary("AckMessage", s.ack_message, pb.AckMessageRequest, pb.AckMessageResponse),
            "ForwardMessageToDeadLetterQueue": self.unary(
                "ForwardMessageToDeadLetterQueue", s.forward_to_dead_letter_queue,
                pb.ForwardMessageToDeadLetterQueueRequest, pb.ForwardMessageToDeadLetterQueueResponse),
            "EndTransaction": self.unary("EndTransaction", s.end_transaction, pb.EndTransactionRequest,
                                         pb.EndTransactionResponse),
            "Telemetry": self.telemetry(),
            "NotifyClientTermination": self.unary("NotifyClientTermination", s.notify_client_termination,
                                                  pb.NotifyClientTerminationRequest, pb.NotifyClientTerminationResponse),
            "ChangeInvisibleDuration": self.unary("ChangeInvisibleDuration", s.change_invisible_duration,
                                                  pb.ChangeInvisibleDurationRequest, pb.ChangeInvisibleDurationResponse),
        })


def _receive_refused(status: pb.Status) -> list[pb.ReceiveMessageResponse]:
    return [pb.ReceiveMessageResponse(status=status)]


class GrpcPortTaken(OSError):
    """The gRPC port is held by another socket."""


async def serve_grpc(service: MessagingService, listen: str, *,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``service`` on ``listen`` until cancelled; reports the bound port."""
    host, port = split_address(listen)
    async with trio.open_nursery() as nursery:
        door = GrpcDoor(service, TrioPortal(nursery))
        service.door_stats = door.stats
        thread = AsyncioThread("grpc-front-door")
        thread.start()

        async def start() -> tuple[grpc.aio.Server, int]:
            server = grpc.aio.server(
                options=[
                    ("grpc.so_reuseport", 0),  # a second proxy on the same port must fail, not share it
                    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
                    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
                    ("grpc.max_concurrent_streams", STREAMS_PER_CONNECTION_MAX)],
                # grpcio's own bound, past ours: calls refused by ours still count in it
                maximum_concurrent_rpcs=2 * door.calls_max)
            server.add_generic_rpc_handlers((door.handlers(),))
            try:
                bound = server.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            except RuntimeError as exc:
                raise GrpcPortTaken(f"{listen}: {exc}") from None
            await server.start()
            return server, bound

        try:
            server, bound = await thread.run(start())
        except BaseException:
            thread.stop()
            raise
        try:
            task_status.started(bound)
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(STOP_GRACE_S + 1):
                    await thread.run(server.stop(STOP_GRACE_S))
                thread.stop()
            nursery.cancel_scope.cancel()
