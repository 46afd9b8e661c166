"""The gRPC door's timeouts on a running proxy (docs/grpc.md, "Floods, back-pressure and
timeouts"): a connection that sends no HTTP/2 preface is closed; one with no call in progress is
sent GOAWAY NO_ERROR and closed; a call in progress (here a request still being sent) keeps its
connection however long it takes. Raw frames, with the client of tests/mqctl/test_grpc_limits.py."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from formats.rocketmq_v2 import messaging_pb2 as pb
from tests.conftest import child_env, running_cluster
from tests.mqctl.test_grpc_limits import TOPIC, grpc_message, route_of, route_request, served

PREFACE_S = 0.5
IDLE_S = 1.5
NO_ERROR = 0


@pytest.fixture(scope="module")
def door(tmp_path_factory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("grpc-timeouts")
    with running_cluster(where, child_env(), proxies=1, grpc=True, proxy=(
            f"grpc_preface_timeout_ms = {int(PREFACE_S * 1000)}\ngrpc_idle_timeout_ms = {int(IDLE_S * 1000)}")) as cluster:
        assert cluster.mqctl("topic", "create", TOPIC).returncode == 0
        yield cluster.grpc[0]


def test_a_connection_without_a_preface_is_closed(door):
    host, port = door.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(b"PRI * HTTP/2.0\r\n")  # half a preface, then nothing
        received = b""
        while chunk := sock.recv(1 << 16):  # the door's SETTINGS, then the close
            received += chunk
        took = time.monotonic() - started
    assert PREFACE_S * 0.8 < took < PREFACE_S + 5, took


def test_an_idle_connection_is_sent_goaway_and_a_call_in_progress_keeps_it(door):
    with served(door) as client:
        answered = client.call("QueryRoute", route_request())
        client.wait_answered(answered)
        assert route_of(client, answered).status.code == pb.OK

        # a call whose request is still being sent: the connection is not idle however long that is
        slow = client.new_stream()
        client.send(client.headers(slow, "QueryRoute"))
        request = grpc_message(route_request())
        client.send(client.data_frames(slow, request[:3]))
        waited = time.monotonic() + 2.5 * IDLE_S
        while time.monotonic() < waited:
            client.read(0.2)
            assert client.goaway is None and not client.eof, "a connection with a call in progress was closed"
        client.send(client.data_frames(slow, request[3:], end_stream=True))
        client.wait_answered(slow)
        assert route_of(client, slow).status.code == pb.OK  # answered as any call

        # now nothing is in progress: GOAWAY NO_ERROR, then the close, within about IDLE_S
        quiet_from = time.monotonic()
        client.wait_for(lambda: client.eof, "the idle connection closed", timeout_s=IDLE_S * 3 + 5)
        took = time.monotonic() - quiet_from
    assert client.goaway is not None and client.goaway[1] == NO_ERROR, client.goaway
    assert IDLE_S * 0.8 < took < IDLE_S * 2 + 2, took
