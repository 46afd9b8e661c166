"""A plain socket to a live node (frames out, answers matched by opaque), and the part of a
node's log written since the last look: what the live fuzz and hostile-client tests drive
real processes with."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

from core.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE
from core.remoting.command import FrameDecoder, RemotingCommand, encode_frame

ANSWER_S = 30.0  # generous: CI runs these beside the flood and Spark tests


class Peer:
    """A plain socket to a node: frames out, responses matched by opaque."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.address_text = address
        self.sock = socket.create_connection((host, int(port)), timeout=ANSWER_S)
        self.decoder = FrameDecoder()
        self.opaque = 1000

    def close(self) -> None:
        self.sock.close()

    def exchange(self, cmds: list[RemotingCommand]) -> list[RemotingCommand]:
        """Send all of ``cmds`` at once; the answers to those that are not oneway."""
        wanted = set()
        frames = bytearray()
        for cmd in cmds:
            self.opaque += 1
            cmd.opaque = self.opaque
            if not cmd.flag & FLAG_ONEWAY:
                wanted.add(cmd.opaque)
            frames += encode_frame(cmd)
        self.sock.sendall(frames)
        answers = []
        while wanted:
            data = self.sock.recv(1 << 16)
            assert data, f"the node closed the connection with {sorted(wanted)} unanswered"
            for item in self.decoder.feed(data):
                assert isinstance(item, RemotingCommand), item
                if not item.flag & FLAG_RESPONSE:
                    continue  # the broker's own request to a client we claimed to be (a group change)
                assert item.opaque in wanted, (item.opaque, item.code, item.remark)
                wanted.discard(item.opaque)
                answers.append(item)
        return answers


class NodeLog:
    """The part of a node's log written since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = path.stat().st_size

    def new(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.seen)
            text = f.read().decode(errors="replace")
        self.seen += len(text.encode(errors="replace"))
        return text


def send_and_drain(address: str, data: bytes) -> None:
    """Send ``data`` on a connection of its own, then read until the node closes it: raw
    bytes that may not be frames at all. The node may close (or reset) the connection before
    all of ``data`` is sent, as soon as it has read a header that lies: that is a clean end."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=ANSWER_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(1 << 16):
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:  # shut down after the node closed
                raise
