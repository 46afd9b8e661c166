"""``mqctl bench grpc-floor``: what the proxy's gRPC door costs by itself. The door
(core/proxy/grpc/server.py: HTTP/2, HPACK, gRPC framing, a task per call) serves a service that
does nothing but answer, in a process of its own; the official RocketMQ 5 client sends to it as
``mqctl bench grpc`` does. The door's CPU per call is the floor under every 5.x send and every
ack through the proxy, whatever the proxy does with them. No cluster is needed.

``python -m mqctl.bench.grpc_floor PORT`` runs the door alone (what the command starts).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Annotated, Any

import trio
import typer

from core.proxy.grpc.auth import Caller
from core.proxy.grpc.server import serve_grpc
from core.proxy_settings import ProxySettings
from formats.rocketmq_v2 import messaging_pb2 as pb
from mqctl.bench.rmq5 import client_env
from mqctl.bench.runs import machine, run_workers
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.nodes.port_holders import free_port
from mqctl.nodes.processes import cpu_seconds

_OK = pb.Status(code=pb.OK)


class NoopService:
    """The door's service, answering at once: routes to one broker, OK to everything else."""

    settings = ProxySettings()
    acl = None

    def __init__(self) -> None:
        self.query_route, self.heartbeat = self._route, self._heartbeat
        self.notify_client_termination = self._terminated
        self.producing = SimpleNamespace(send_message=self._send, recall_message=self._nothing,
                                         end_transaction=self._nothing)
        self.consuming = SimpleNamespace(query_assignment=self._nothing, ack_message=self._nothing,
                                         forward_to_dead_letter_queue=self._nothing,
                                         change_invisible_duration=self._nothing, receive_message=self._nothing)

    @staticmethod
    async def _route(request: pb.QueryRouteRequest, caller: Caller) -> pb.QueryRouteResponse:
        queues = [pb.MessageQueue(topic=request.topic, id=i, permission=pb.READ_WRITE,
                                  broker=pb.Broker(name="noop", id=0, endpoints=request.endpoints),
                                  accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION])
                  for i in range(4)]
        return pb.QueryRouteResponse(status=_OK, message_queues=queues)

    @staticmethod
    async def _heartbeat(request: pb.HeartbeatRequest, caller: Caller) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse(status=_OK)

    @staticmethod
    async def _send(request: pb.SendMessageRequest, caller: Caller) -> pb.SendMessageResponse:
        return pb.SendMessageResponse(status=_OK, entries=[
            pb.SendResultEntry(status=_OK, message_id=m.system_properties.message_id, offset=1)
            for m in request.messages])

    @staticmethod
    async def _terminated(request: Any, caller: Caller) -> pb.NotifyClientTerminationResponse:
        return pb.NotifyClientTerminationResponse(status=_OK)

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
        return pb.TelemetryCommand(status=_OK, settings=command.settings)


async def _serve(port: int) -> None:
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(lambda task_status: serve_grpc(
            NoopService(), f"127.0.0.1:{port}", task_status=task_status))  # type: ignore[arg-type]
        print(f"serving {bound}", flush=True)


def bench_grpc_floor(
    messages: Annotated[int, typer.Option(help="Messages per round.", min=1)] = 5_000,
    rounds: Annotated[int, typer.Option(help="Rounds.", min=1)] = 3,
    as_json: JsonOutput = False,
) -> None:
    """The gRPC door alone, with a service that does nothing: its CPU per call (the floor under
    every 5.x send and ack through the proxy) and the official client's rate against it."""
    port = free_port()
    door = subprocess.Popen([sys.executable, "-m", "mqctl.bench.grpc_floor", str(port)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert door.stdout is not None
        if not door.stdout.readline().startswith("serving"):
            raise CliError("the gRPC door did not start")
        runs = []
        for r in range(rounds):
            before = cpu_seconds(door.pid) or 0.0
            run = run_workers("produce", {"endpoints": f"127.0.0.1:{port}", "topic": "BenchGrpc", "messages": messages,
                                          "size": 1024, "inflight": 32}, 1, module="mqctl.bench.rmq5_worker",
                              env=client_env())
            used = (cpu_seconds(door.pid) or 0.0) - before
            calls = int(run["messages"])  # type: ignore[call-overload]
            runs.append({"msgs_per_s": run["msgs_per_s"], "door_us_per_call": round(used / calls * 1e6, 1)})
            if not as_json:
                typer.echo(f"round {r + 1}: {run['msgs_per_s']:>6,} calls/s, door {runs[-1]['door_us_per_call']} us "
                           "of CPU per call", err=True)
    finally:
        door.kill()
        door.wait()
    result = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "messages": messages, "rounds": runs,
              "door_us_per_call": statistics.median(r["door_us_per_call"] for r in runs),
              "msgs_per_s": statistics.median(r["msgs_per_s"] for r in runs)}  # type: ignore[type-var]
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"gRPC door with a no-op service: {result['msgs_per_s']:,} calls/s (median), "
               f"{result['door_us_per_call']} us of the door's CPU per call (median)")


if __name__ == "__main__":
    trio.run(_serve, int(sys.argv[1]))
