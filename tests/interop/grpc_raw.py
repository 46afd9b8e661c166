"""A raw gRPC caller of ``apache.rocketmq.v2.MessagingService``, for tests that send what the
official client never would: another client's id, hostile fields, more calls than a limit.

It signs like the official SDKs (``authorization: MQv2-HMAC-SHA1 Credential=AK,
SignedHeaders=x-mq-date-time, Signature=hex(HMAC-SHA1(SK, date))``) and names the client in
``x-mq-client-id``; every call is a plain grpcio call with a deadline.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from formats.rocketmq_v2 import messaging_pb2 as pb

SERVICE = "/apache.rocketmq.v2.MessagingService/"
CALL_TIMEOUT_S = 15.0


def metadata(client_id: str, access_key: str = "", secret_key: str = "") -> list[tuple[str, str]]:
    date = datetime.datetime.now().strftime("%Y%m%dT%H%M%SZ")
    out = [("x-mq-client-id", client_id), ("x-mq-date-time", date), ("x-mq-language", "PYTHON")]
    if access_key:
        signature = hmac.new(secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
        out.append(("authorization", f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
                                     f"Signature={signature}"))
    return out


class RawGrpc:
    """One channel to a proxy's gRPC door; each call names its client id and account."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address, options=[("grpc.http2.bdp_probe", 0)])

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> RawGrpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unary(self, method: str, request: Any, response_type: Any, client_id: str, account: tuple[str, str] = ("", ""),
              timeout: float = CALL_TIMEOUT_S) -> Any:
        call = self.channel.unary_unary(SERVICE + method, request_serializer=type(request).SerializeToString,
                                        response_deserializer=response_type.FromString)
        return call(request, metadata=metadata(client_id, *account), timeout=timeout)

    def receive_future(self, request: pb.ReceiveMessageRequest, client_id: str, account: tuple[str, str] = ("", ""),
                       timeout: float = CALL_TIMEOUT_S) -> grpc.Future:
        """A ReceiveMessage started now; ``list(future)`` waits for its frames."""
        call = self.channel.unary_stream(SERVICE + "ReceiveMessage", request_serializer=pb.ReceiveMessageRequest.SerializeToString,
                                         response_deserializer=pb.ReceiveMessageResponse.FromString)
        return call(request, metadata=metadata(client_id, *account), timeout=timeout)

    def telemetry(self, client_id: str, account: tuple[str, str] = ("", ""), timeout: float = 120.0) -> Telemetry:
        return Telemetry(self.channel, client_id, account, timeout)


class Telemetry:
    """One Telemetry stream: :meth:`send` writes a command, :meth:`next` reads the next one."""

    _END = object()

    def __init__(self, channel: grpc.Channel, client_id: str, account: tuple[str, str], timeout: float) -> None:
        self._outgoing: queue.Queue[Any] = queue.Queue()
        call = channel.stream_stream(SERVICE + "Telemetry", request_serializer=pb.TelemetryCommand.SerializeToString,
                                     response_deserializer=pb.TelemetryCommand.FromString)
        self.responses = call(self._commands(), metadata=metadata(client_id, *account), timeout=timeout)
        self._incoming: queue.Queue[Any] = queue.Queue()
        self._reader: threading.Thread | None = None

    def _commands(self) -> Iterator[pb.TelemetryCommand]:
        while (command := self._outgoing.get()) is not self._END:
            yield command

    def send(self, command: pb.TelemetryCommand) -> None:
        self._outgoing.put(command)

    def start_reading(self) -> None:
        """Read the stream in a thread from now on (a test that must not read leaves it off)."""
        def read() -> None:
            try:
                for command in self.responses:
                    self._incoming.put(command)
            except grpc.RpcError as exc:
                self._incoming.put(exc)
        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def next(self, timeout: float) -> pb.TelemetryCommand | grpc.RpcError | None:
        """The next command (or the stream's error); None if none came within ``timeout``."""
        try:
            return self._incoming.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self._outgoing.put(self._END)
        self.responses.cancel()


def settings_publishing(*topics: str) -> pb.TelemetryCommand:
    return pb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
        topics=[pb.Resource(name=t) for t in topics])))


def settings_subscription(group: str, topic: str, expression: str = "*") -> pb.TelemetryCommand:
    return pb.TelemetryCommand(settings=pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression=expression))])))
