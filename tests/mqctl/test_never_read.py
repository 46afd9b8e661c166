"""Every listening port against one connection that floods it and never reads what it is sent:
the gRPC door (PING and SETTINGS floods, HEADERS + RST_STREAM pairs, a CONTINUATION chain, an
HPACK bomb, calls whose answers are never read), the 4.x remoting ports of the broker, the name
server and the proxy, a metrics endpoint, the master's HA port and a raft port.

Each flood sends up to ``FLOOD_BYTES`` and stops early when the node closes the connection or
stops reading it (a send blocked for ``BLOCKED_S``: the kernel's buffers are full). Meanwhile a
bystander on another connection asks the same node again and again and must be answered within
``ANSWER_S`` each time, and the node's anonymous memory (its heap: not the page cache of mapped
store files) must grow less than ``GROWTH_MAX`` above where it was before the flood.

The gRPC door's timeouts are tried here too, on the same proxy: a connection without a preface
is closed, one without a call is sent GOAWAY NO_ERROR, and a call in progress keeps its own.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import hpack
import pytest

from core.config import load_config
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import FrameDecoder, RemotingCommand, encode_frame
from formats import http2 as h2
from formats.hpack import encode_integer
from formats.rocketmq_v2 import messaging_pb2 as pb
from tests.conftest import Cluster, child_env, running_cluster
from tests.interop.grpc_raw import RawGrpc
from tests.mqctl.test_grpc_limits import TOPIC, grpc_message, route_of, route_request, served

MiB = 1 << 20
PREFACE_S = 0.5  # the proxy's grpc_preface_timeout_ms, and its idle one
IDLE_S = 1.5
FLOOD_BYTES = 100 * MiB
FLOOD_S = 20.0  # the most any flood runs
BLOCKED_S = 1.5  # a send blocked this long: the node has stopped reading this connection
GROWTH_MAX = 16 * MiB
ANSWER_S = 2.0
GRPC_REQ = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/apache.rocketmq.v2.MessagingService/Heartbeat"),
            (b":authority", b"door"), (b"content-type", b"application/grpc"), (b"te", b"trailers")]


def rss_anon(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc status")


def node_pid(cluster: Cluster, node: str) -> int:
    return int((cluster.config.parent / "data" / "run" / f"{node}.pid").read_text().split()[0])


@dataclass
class Flood:
    sent: int = 0
    ended: str = ""  # "closed" (the node closed it), "blocked" (it stopped reading), "sent" (all of it)


def flood(address: str, first: bytes, chunk: bytes, result: Flood) -> None:
    """Send ``first``, then ``chunk`` again and again, never reading (see the module's docstring)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.settimeout(BLOCKED_S)
        deadline = time.monotonic() + FLOOD_S
        try:
            sock.sendall(first)
            result.sent = len(first)
            while chunk and result.sent < FLOOD_BYTES and time.monotonic() < deadline:
                sock.sendall(chunk)
                result.sent += len(chunk)
            if not chunk:  # all of it sent at once: whether the node closed the connection on it
                while sock.recv(1 << 16):
                    pass
                result.ended = "closed"
                return
            result.ended = "sent"
        except TimeoutError:
            result.ended = "blocked" if chunk else "sent"
        except (BrokenPipeError, ConnectionResetError):
            result.ended = "closed"


def hold_while_flooded(pid: int, address: str, first: bytes, chunk: bytes, ask: Callable[[], None]) -> Flood:
    """Run one flood; meanwhile ``ask`` (the bystander) must answer within ANSWER_S each time, and
    the node's anonymous memory must stay within GROWTH_MAX of where it was."""
    for _ in range(3):  # warm the bystander's path up: its first calls allocate for good
        ask()
    baseline = peak = rss_anon(pid)
    result = Flood()
    attacker = threading.Thread(target=flood, args=(address, first, chunk, result), daemon=True)
    attacker.start()
    answered = 0
    while attacker.is_alive():
        started = time.monotonic()
        ask()
        took = time.monotonic() - started
        assert took < ANSWER_S, f"the bystander waited {took:.2f} s during the flood"
        answered += 1
        peak = max(peak, rss_anon(pid))
        attacker.join(0.1)
    peak = max(peak, rss_anon(pid))
    assert result.ended, "the flood thread failed"
    assert answered > 0
    print(f"{address}: {result.sent / MiB:.1f} MiB sent ({result.ended}), {answered} bystander answers, "
          f"anonymous memory +{(peak - baseline) / MiB:.1f} MiB")
    assert peak - baseline < GROWTH_MAX, f"grew {(peak - baseline) / MiB:.1f} MiB ({result})"
    return result


# ---------------------------------------------------------------------------------------- the cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A master and its slave, a proxy with a gRPC door (its timeouts short: the last tests); metrics
    on every node."""
    with running_cluster(tmp_path_factory.mktemp("never-read"), child_env(), broker_ids=(0, 1), proxies=1,
                         grpc=True, proxy=f"grpc_preface_timeout_ms = {int(PREFACE_S * 1000)}\n"
                                        f"grpc_idle_timeout_ms = {int(IDLE_S * 1000)}") as running:
        assert running.mqctl("topic", "create", TOPIC).returncode == 0
        yield running


def remoting_asker(address: str, request: Callable[[], RemotingCommand]) -> Callable[[], None]:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=ANSWER_S)
    decoder = FrameDecoder()
    opaque = [0]

    def ask() -> None:
        opaque[0] += 1
        cmd = request()
        cmd.opaque = opaque[0]
        sock.sendall(encode_frame(cmd))
        while True:
            data = sock.recv(1 << 16)
            assert data, f"{address} closed the bystander's connection"
            for item in decoder.feed(data):
                if isinstance(item, RemotingCommand) and item.opaque == opaque[0]:
                    assert item.code == ResponseCode.SUCCESS, item
                    return
    return ask


def runtime_info() -> RemotingCommand:
    return RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO)


def route_query() -> RemotingCommand:
    return RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)


def frames_of(make: Callable[[int], RemotingCommand], count: int) -> bytes:
    return b"".join(encode_frame(make(i)) for i in range(1, count + 1))


# ---------------------------------------------------------------------------------------- 4.x remoting, metrics, HA


def test_the_brokers_remoting_port(cluster):
    master = load_config(cluster.config).brokers[0].listen
    flooded = hold_while_flooded(node_pid(cluster, "broker-a-0"), master, b"",
                                 frames_of(lambda i: RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO, opaque=i),
                                           5000), remoting_asker(master, runtime_info))
    assert flooded.ended == "blocked", flooded  # its answers (1-2 KB each) filled the buffers: not read further


def test_the_name_servers_remoting_port(cluster):
    flooded = hold_while_flooded(node_pid(cluster, "ns1"), cluster.namesrv, b"",
                                 frames_of(lambda i: RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=i),
                                           5000), remoting_asker(cluster.namesrv, route_query))
    assert flooded.ended == "blocked", flooded


def test_the_proxys_own_remoting_port(cluster):
    """The port 4.x clients take for a name server: routes and the cluster table."""
    proxy = cluster.proxies[0]
    flooded = hold_while_flooded(node_pid(cluster, "proxy1"), proxy, b"",
                                 frames_of(lambda i: RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=i),
                                           5000), remoting_asker(proxy, route_query))
    assert flooded.ended == "blocked", flooded


def test_a_proxy_door(cluster):
    """The port after the proxy's: its door to broker-a, relaying."""
    host, _, port = cluster.proxies[0].rpartition(":")
    door = f"{host}:{int(port) + 1}"
    flooded = hold_while_flooded(node_pid(cluster, "proxy1"), door, b"",
                                 frames_of(lambda i: RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO, opaque=i),
                                           5000), remoting_asker(door, runtime_info))
    assert flooded.ended == "blocked", flooded


def test_a_metrics_endpoint(cluster):
    where = (cluster.config.parent / "data" / "run" / "broker-a-0.metrics").read_text().strip()

    def ask() -> None:
        with urllib.request.urlopen(f"http://{where}/metrics", timeout=ANSWER_S) as answer:
            assert answer.status == 200 and b"# TYPE" in answer.read()
    flooded = hold_while_flooded(node_pid(cluster, "broker-a-0"), where, b"",
                                 b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000, ask)
    assert flooded.ended in ("blocked", "closed"), flooded


def test_the_masters_ha_port(cluster):
    """A peer that says it starts at offset 0 and then only reports, never reading the log the
    master streams it (ACL off: with ACL on it would get nothing, tests/replication)."""
    master = load_config(cluster.config).brokers[0].listen
    host, _, port = master.rpartition(":")
    send = remoting_asker(master, lambda: RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields={
        "producerGroup": "g", "topic": "NeverRead", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": ""}, body=b"m" * 65536))
    for _ in range(100):  # a log to stream: 100 x 64 KiB
        send()
    flooded = hold_while_flooded(node_pid(cluster, "broker-a-0"), f"{host}:{int(port) + 1}", struct.pack(">q", 0),
                                 struct.pack(">q", 0) * 100_000, remoting_asker(master, runtime_info))
    assert flooded.ended == "sent", flooded  # reports are read and only the newest kept; the log waits for the peer


# ---------------------------------------------------------------------------------------- the gRPC door


def grpc_asker(cluster: Cluster) -> Callable[[], None]:
    channel = RawGrpc(cluster.grpc[0])

    def ask() -> None:
        answer = channel.unary("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")),
                               pb.QueryRouteResponse, "bystander", timeout=ANSWER_S)
        assert answer.status.code != pb.CODE_UNSPECIFIED
    return ask


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return h2.frame(kind, flags, stream, payload)


OPENING = h2.PREFACE + h2.settings({})


def rapid_resets(pairs: int) -> bytes:
    encoder = hpack.Encoder()
    return b"".join(h2_frame(h2.HEADERS, h2.END_HEADERS, 2 * i + 1, encoder.encode(GRPC_REQ))
                    + h2_frame(h2.RST_STREAM, 0, 2 * i + 1, struct.pack(">I", h2.CANCEL)) for i in range(pairs))


def hpack_bombs(count: int) -> bytes:
    """Streams whose header block names one 4 KB entry 20,000 times (80 MB decoded)."""
    entry = b"\x40\x06x-bomb" + encode_integer(4000, 7) + b"b" * 4000  # added to the table: index 62
    out = []
    for i in range(count):
        block = (entry if i == 0 else b"") + b"\xbe" * 20_000
        pieces = [block[j:j + h2.DEFAULT_FRAME_SIZE] for j in range(0, len(block), h2.DEFAULT_FRAME_SIZE)]
        out.append(h2_frame(h2.HEADERS, h2.END_STREAM | (h2.END_HEADERS if len(pieces) == 1 else 0), 2 * i + 1,
                            pieces[0]))
        out += [h2_frame(h2.CONTINUATION, h2.END_HEADERS if j == len(pieces) - 1 else 0, 2 * i + 1, piece)
                for j, piece in enumerate(pieces[1:], 1)]
    return b"".join(out)


def unread_calls(calls: int) -> bytes:
    """Calls of a method the door does not serve: each answered at once (UNIMPLEMENTED, naming
    the 200-character path), never read."""
    encoder = hpack.Encoder()
    fields = [(k, b"/" + b"x" * 199 if k == b":path" else v) for k, v in GRPC_REQ]
    return b"".join(h2_frame(h2.HEADERS, h2.END_HEADERS, 2 * i + 1, encoder.encode(fields))
                    + h2_frame(h2.DATA, h2.END_STREAM, 2 * i + 1, h2.grpc_message(b"")) for i in range(calls))


GRPC_FLOODS = {
    "ping": (OPENING, h2_frame(h2.PING, 0, 0, b"12345678") * 60_000, "closed"),
    "settings": (OPENING, h2_frame(h2.SETTINGS, 0, 0, struct.pack(">HI", h2.SETTINGS_INITIAL_WINDOW_SIZE, 65535))
                 * 60_000, "closed"),
    "headers-and-resets": (OPENING + rapid_resets(100_000), b"", "closed"),
    "continuation-chain": (OPENING + h2_frame(h2.HEADERS, 0, 1, b"\x82"),
                           h2_frame(h2.CONTINUATION, 0, 1, b"\x82" * h2.DEFAULT_FRAME_SIZE) * 64, "closed"),
    "hpack-bomb": (OPENING + hpack_bombs(50), b"", "closed"),
    # more calls than the 256 streams announced, never reading: refused, their DATA late: ENHANCE_YOUR_CALM
    "unread-answers": (OPENING + unread_calls(100_000), b"", "closed"),
}


@pytest.mark.parametrize("kind", sorted(GRPC_FLOODS))
def test_the_grpc_door(cluster, kind):
    first, chunk, ended = GRPC_FLOODS[kind]
    flooded = hold_while_flooded(node_pid(cluster, "proxy1"), cluster.grpc[0], first, chunk, grpc_asker(cluster))
    assert flooded.ended == ended, flooded


# ---------------------------------------------------------------------------------------- a raft port


@pytest.fixture(scope="module")
def raft_group(tmp_path_factory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("never-read-raft"), child_env(), broker_ids=(0, 1, 2),
                         mode="dledger") as running:
        yield running


def test_a_raft_port(raft_group):
    """Raft messages are one-way: a peer that floods the port with them (well-formed frames of
    another group) is read and dropped, and the port's node keeps answering."""
    member = load_config(raft_group.config).brokers[0].listen
    host, _, port = member.rpartition(":")
    junk = frames_of(lambda i: RemotingCommand(code=51002, opaque=i, flag=2, ext_fields={
        "group": "not-this-group", "term": "1", "leader": "x", "commitIndex": "0"}), 5000)
    hold_while_flooded(node_pid(raft_group, "broker-a-0"), f"{host}:{int(port) + 1}", b"", junk,
                       remoting_asker(member, runtime_info))


# ---------------------------------------------------------------------------------------- the gRPC door's timeouts
# (docs/grpc.md, "Floods, back-pressure and timeouts"), with the raw client of test_grpc_limits

def test_a_connection_without_a_preface_is_closed(cluster):
    host, port = cluster.grpc[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(b"PRI * HTTP/2.0\r\n")  # half a preface, then nothing
        received = b""
        while chunk := sock.recv(1 << 16):  # the door's SETTINGS, then the close
            received += chunk
        took = time.monotonic() - started
    assert PREFACE_S * 0.8 < took < PREFACE_S + 5, took


def test_an_idle_connection_is_sent_goaway_and_a_call_in_progress_keeps_it(cluster):
    with served(cluster.grpc[0]) as client:
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
    assert client.goaway is not None and client.goaway[1] == h2.NO_ERROR, client.goaway
    assert IDLE_S * 0.8 < took < IDLE_S * 2 + 2, took
