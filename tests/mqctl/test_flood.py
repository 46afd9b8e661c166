"""A client flooding a real broker process: too many connections, too many held pulls, large
frames left half sent on many connections, and pulls whose answers it never reads. A bystander
connection keeps sending and pulling the whole time, and the broker's anonymous memory (its
heap and buffers; the mapped store files are page cache) stays under a stated ceiling."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from core.config import load_config
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import FrameDecoder, RemotingCommand, encode_frame
from tests.conftest import running_cluster
from tests.core.test_broker import pull_cmd, send_cmd

MiB = 1024 * 1024
LIMITS = f"""connections_max = 40
held_pulls_per_connection_max = 8
large_frames_bytes_max = {32 * MiB}
pull_bytes_max = {256 * 1024}"""
# above the broker's memory before the flood: two large frames in progress (32 MiB), the
# outgoing buffers of the unread pulls (4 MiB each) and Python's own slack. Without the
# large-frame budget the half-sent frames alone would hold 12 x 16 MiB.
CEILING_GROWTH = 120 * MiB
HALF_FRAMES = 12


def rss_anon(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc status")


class Link:
    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = FrameDecoder()
        self.opaque = 0

    def ask(self, cmd: RemotingCommand) -> RemotingCommand:
        self.opaque += 1
        cmd.opaque = self.opaque
        self.sock.sendall(encode_frame(cmd))
        while True:
            data = self.sock.recv(1 << 16)
            assert data, "the broker closed the bystander's connection"
            for item in self.decoder.feed(data):
                if isinstance(item, RemotingCommand) and item.opaque == cmd.opaque:
                    return item

    def closed_by_peer(self, within_s: float) -> bool:
        self.sock.settimeout(within_s)
        try:
            while self.sock.recv(1 << 16):
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


@pytest.fixture
def flood_cluster(tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env, broker=LIMITS) as cluster:
        config = load_config(cluster.config)
        cluster.broker = config.brokers[0].listen
        cluster.pid = int((tmp_path / "data" / "run" / "broker-a-0.pid").read_text().split()[0])
        yield cluster


def test_a_flooding_client_neither_starves_others_nor_grows_the_broker_without_bound(flood_cluster):
    address, pid = flood_cluster.broker, flood_cluster.pid
    bystander = Link(address)
    assert bystander.ask(send_cmd("Flood", b"seed" * 4096)).code == ResponseCode.SUCCESS
    for i in range(40):  # data for the unread pulls below: 40 x 64 KiB in queue 1
        assert bystander.ask(send_cmd("Flood", bytes([i]) * 65536, queue_id=1)).code == ResponseCode.SUCCESS
    baseline = rss_anon(pid)
    peak = [baseline]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.05):
            peak[0] = max(peak[0], rss_anon(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    links: list[Link] = []
    try:
        # held pulls: 8 wait, the rest are told the broker is busy, at once
        holder = Link(address)
        links.append(holder)
        frames = b"".join(encode_frame(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=i, ext_fields=pull_cmd(
            "Flood", 2, 0, sysflag=2, suspend_ms=20_000).ext_fields)) for i in range(1, 501))
        holder.sock.sendall(frames)
        busy = 0
        deadline = time.monotonic() + 10
        while busy < 492:
            assert time.monotonic() < deadline, f"only {busy} pulls refused"
            for item in holder.decoder.feed(holder.sock.recv(1 << 16)):
                assert item.code == ResponseCode.SYSTEM_BUSY and "held" in item.remark, item
                busy += 1

        # pulls whose 256 KiB answers are never read: the broker stops reading that connection
        greedy = Link(address)
        links.append(greedy)
        greedy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        greedy.sock.setblocking(False)
        pulls = b"".join(encode_frame(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=i, ext_fields=pull_cmd(
            "Flood", 1, 0).ext_fields)) for i in range(50_000))  # 15 MB: more than kernel buffers hold
        sent = 0
        deadline = time.monotonic() + 5
        while sent < len(pulls) and time.monotonic() < deadline:
            try:
                sent += greedy.sock.send(pulls[sent:sent + 65536])
            except BlockingIOError:
                time.sleep(0.01)
        assert sent < len(pulls), "the broker kept reading a connection that never reads its answers"

        # large frames left half sent: the node-wide budget admits two, the others are closed
        closed = 0
        for _ in range(HALF_FRAMES):
            link = Link(address)
            links.append(link)
            try:
                link.sock.sendall(struct.pack(">ii", 16 * MiB - 4, 0) + bytes(12 * MiB))
            except (ConnectionResetError, BrokenPipeError):
                closed += 1  # refused while still sending
            else:
                closed += link.closed_by_peer(within_s=0.5)
        assert closed >= HALF_FRAMES - 2, f"only {closed} of {HALF_FRAMES} half-sent frames refused"

        # connections beyond connections_max are closed as they arrive
        # (open now: the bystander, the holder, the greedy one and two half frames)
        extra = [Link(address) for _ in range(60)]
        links.extend(extra)
        refused = sum(link.closed_by_peer(within_s=0.2) for link in extra)
        assert 60 - (40 - 5) <= refused < 60, refused

        # the bystander, connected before the flood, is still served promptly
        for i in range(5):
            started = time.monotonic()
            assert bystander.ask(send_cmd("Flood", f"during {i}".encode())).code == ResponseCode.SUCCESS
            pulled = bystander.ask(pull_cmd("Flood", 0, 0))
            assert pulled.code == ResponseCode.SUCCESS
            assert time.monotonic() - started < 5
    finally:
        sampling.set()
        sampler.join()
        for link in links:
            link.sock.close()
    growth = peak[0] - baseline
    print(f"broker RssAnon {baseline / MiB:.0f} MiB before the flood, peak {peak[0] / MiB:.0f} MiB")
    assert growth < CEILING_GROWTH, f"anonymous memory grew {growth / MiB:.0f} MiB (ceiling {CEILING_GROWTH / MiB:.0f})"
    # and once the flood's connections are gone, the broker takes new ones again
    deadline = time.monotonic() + 10
    while True:
        try:
            assert Link(address).ask(pull_cmd("Flood", 0, 0)).code == ResponseCode.SUCCESS
            break
        except (ConnectionResetError, AssertionError):
            assert time.monotonic() < deadline, "no new connection taken 10 s after the flood"
            time.sleep(0.1)
