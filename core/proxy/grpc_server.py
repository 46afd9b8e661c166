"""The proxy's gRPC front door: grpcio's asyncio server in a thread of its own, each RPC handed
to :class:`MessagingService` on trio through a :class:`TrioPortal`.

grpcio is the server every RocketMQ 5 client is tested against, and it is kept by the gRPC
project; it runs on asyncio, not trio. Rather than a second event model in the core, the server
keeps to this module: it decodes a call, names its caller, awaits the trio side, and encodes
the answer. Streams:

- ReceiveMessage: the trio side answers the whole POP (after its long poll); the frames are
  then written in order (status, messages, delivery timestamp) and the stream completes.
- Telemetry: every Settings the client writes is answered on the stream; the trio side may push
  commands at any time (transaction check-backs) through the stream's queue. The stream ends
  when the client ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
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

    def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        return caller_of(metadata, _peer_host(context), self.service.acl.policy if self.service.acl else None)

    def unary(self, name: str, method: Callable[[Any, Caller], Awaitable[Any]], request_type: Any,
              response_type: Any) -> grpc.RpcMethodHandler:
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                caller = self._caller(context)
            except Refused as exc:
                return response_type(status=pb.Status(code=exc.code, message=exc.message))
            self.service.count(name)
            return await self.portal.call(method, request, caller)
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
            for frame in await self.portal.call(self.service.receive_message, request, caller):
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
            self.service.count("Telemetry")
            loop = asyncio.get_running_loop()
            outbox: asyncio.Queue[pb.TelemetryCommand | None] = asyncio.Queue()

            def push(command: pb.TelemetryCommand) -> None:  # from trio
                loop.call_soon_threadsafe(outbox.put_nowait, command)

            async def read() -> None:
                try:
                    async for command in requests:
                        if command.HasField("settings"):
                            try:
                                outbox.put_nowait(await self.portal.call(self.service.apply_settings, command, caller))
                            except Refused as exc:
                                outbox.put_nowait(pb.TelemetryCommand(status=pb.Status(code=exc.code, message=exc.message)))
                            except Exception:  # a bug: logged, and the client sees the stream end
                                log.exception("settings of %s", caller.client_id)
                                raise
                        # thread stack traces and verify results: RocketMQ's admin tools ask for them; not relayed
                finally:
                    outbox.put_nowait(None)

            await self.portal.call(self.service.attach_stream, caller, push)
            reader = asyncio.ensure_future(read())
            try:
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


class GrpcPortTaken(OSError):
    """The gRPC port is held by another socket."""


async def serve_grpc(service: MessagingService, listen: str, *,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``service`` on ``listen`` until cancelled; reports the bound port."""
    host, port = split_address(listen)
    async with trio.open_nursery() as nursery:
        door = GrpcDoor(service, TrioPortal(nursery))
        thread = AsyncioThread("grpc-front-door")
        thread.start()

        async def start() -> tuple[grpc.aio.Server, int]:
            server = grpc.aio.server(options=[
                ("grpc.so_reuseport", 0),  # a second proxy on the same port must fail, not share it
                ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
                ("grpc.max_send_message_length", MESSAGE_BYTES_MAX)])
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
