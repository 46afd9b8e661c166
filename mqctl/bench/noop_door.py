"""The proxy's gRPC door (core/proxy/grpc/server.py) with a service that answers at once:
``python -m mqctl.bench.noop_door PORT`` serves it on 127.0.0.1 until killed. ``mqctl bench
grpc-floor`` (mqctl/bench/grpc_floor.py) starts it; it lives apart so that mqctl's own start-up
does not import the gRPC door."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import trio

from core.proxy.grpc.auth import Caller
from core.proxy.grpc.server import serve_grpc
from core.proxy_settings import ProxySettings
from formats.rocketmq_v2 import messaging_pb2 as pb


class NoopService:
    """The door's service, answering at once: routes to one broker, OK to everything else."""

    settings = ProxySettings()
    acl = None

    def __init__(self) -> None:
        self._ok = pb.Status(code=pb.OK)  # copied into each answer: made once, not per call
        self.query_route, self.heartbeat = self._route, self._heartbeat
        self.notify_client_termination = self._terminated
        self.producing = SimpleNamespace(send_message=self._send, recall_message=self._nothing,
                                         end_transaction=self._nothing)
        self.consuming = SimpleNamespace(query_assignment=self._nothing, ack_message=self._nothing,
                                         forward_to_dead_letter_queue=self._nothing,
                                         change_invisible_duration=self._nothing, receive_message=self._nothing)

    async def _route(self, request: pb.QueryRouteRequest, caller: Caller) -> pb.QueryRouteResponse:
        queues = [pb.MessageQueue(topic=request.topic, id=i, permission=pb.READ_WRITE,
                                  broker=pb.Broker(name="noop", id=0, endpoints=request.endpoints),
                                  accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION])
                  for i in range(4)]
        return pb.QueryRouteResponse(status=self._ok, message_queues=queues)

    async def _heartbeat(self, request: pb.HeartbeatRequest, caller: Caller) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse(status=self._ok)

    async def _send(self, request: pb.SendMessageRequest, caller: Caller) -> pb.SendMessageResponse:
        return pb.SendMessageResponse(status=self._ok, entries=[
            pb.SendResultEntry(status=self._ok, message_id=m.system_properties.message_id, offset=1)
            for m in request.messages])

    async def _terminated(self, request: Any, caller: Caller) -> pb.NotifyClientTerminationResponse:
        return pb.NotifyClientTerminationResponse(status=self._ok)

    @staticmethod
    async def _nothing(request: Any, caller: Caller) -> None:
        return None

    async def serve(self, rpc: str, method: Any, request: Any, caller: Caller, refuse: Any) -> Any:
        return await method(request, caller)

    async def attach_stream(self, caller: Caller, push: Any) -> None:
        return None

    def detach_stream(self, caller: Caller, push: Any) -> None:
        return None

    async def apply_settings(self, command: pb.TelemetryCommand, caller: Caller) -> pb.TelemetryCommand:
        return pb.TelemetryCommand(status=self._ok, settings=command.settings)


async def _serve(port: int) -> None:
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(lambda task_status: serve_grpc(
            NoopService(), f"127.0.0.1:{port}", task_status=task_status))  # type: ignore[arg-type]
        print(f"serving {bound}", flush=True)


if __name__ == "__main__":
    trio.run(_serve, int(sys.argv[1]))
