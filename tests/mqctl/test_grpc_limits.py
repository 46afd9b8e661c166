"""The gRPC door's HTTP/2 bounds (docs/grpc.md, "Limits") on a running proxy: streams per
connection, the flow-control windows, the size of one message, and connections to the port.

The client is raw frames over a plain socket, built here (RFC 9113 framing, an RFC 7541 header
coder: literal fields out, anything a server may send read back), so what the door announces and
answers is read as the RFCs say and not by the door's own codecs. One cluster for the module: a
broker and a proxy whose gRPC door takes at most ``CONNECTIONS_MAX`` connections
(``[broker] connections_max``, which bounds the broker's own port too)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Self

import pytest

from formats.rocketmq_v2 import messaging_pb2 as pb
from tests.conftest import child_env, running_cluster

CONNECTIONS_MAX = 4
TOPIC = "Limits"
CLIENT_ID = "limits-1"
WAIT_S = 20.0  # the longest any condition below is waited for

# docs/grpc.md, "Limits"
STREAMS_MAX = 256
STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 16 << 20
MESSAGE_MAX = 16 << 20
LARGE_MESSAGE = STREAM_WINDOW // 4  # a message this long reserves its length and is granted as it arrives

# RFC 9113
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20
SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 3, 4, 5
FLOW_CONTROL_ERROR, REFUSED_STREAM, CANCEL = 0x3, 0x7, 0x8
DEFAULT_WINDOW, DEFAULT_FRAME_SIZE, WINDOW_MAX = 65_535, 16_384, 2**31 - 1
GRPC_PREFIX = struct.Struct(">BI")  # compressed flag, message length
GRPC_OK, GRPC_RESOURCE_EXHAUSTED = 0, 8


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload


# --------------------------------------------------------------------------- HPACK (RFC 7541)

STATIC_TABLE = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
    (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
    (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
    ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""), ("cache-control", ""),
    ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""), ("date", ""),
    ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""), ("if-match", ""),
    ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""), ("if-unmodified-since", ""),
    ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""),
    ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""),
    ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""))
# The Huffman code (Appendix B) is canonical: each symbol's code length (a = 5 bits ... z = 30)
# for symbols 0..256 gives every code.
HUFFMAN_LENGTHS = (
    "isxxxxxxxtzxxzxxxxxxxxzxxxxxxxxxbffhibdgffdgdbbbaaabbbbbbbcdkbhfibccccccccccccccccccccccdcdioijbkabababbb"
    "accbbbabcbaabccccckgjixprpprrrsrssssststtrstssssqrsrsstrqprrssqsrrtqrssqqrqsrssprrrsrrsvvporsruvvvwwvtuoq"
    "vwwvwtqqvvxwwwptpqrqqsrruuttvsvwvvwwwwwxwwwwwvz")


def _huffman_codes() -> dict[tuple[int, int], int]:
    """(length, code) -> symbol."""
    lengths = [ord(c) - ord("a") + 5 for c in HUFFMAN_LENGTHS]
    codes: dict[tuple[int, int], int] = {}
    code, length = -1, min(lengths)
    for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code = (code + 1) << (lengths[symbol] - length)
        length = lengths[symbol]
        codes[(length, code)] = symbol
    return codes


HUFFMAN = _huffman_codes()


def huffman_decode(data: bytes) -> bytes:
    out, code, length = bytearray(), 0, 0
    for byte in data:
        for bit in range(7, -1, -1):
            code, length = code << 1 | (byte >> bit) & 1, length + 1
            symbol = HUFFMAN.get((length, code))
            if symbol is not None:
                assert symbol != 256, "EOS in a Huffman-coded string"
                out.append(symbol)
                code, length = 0, 0
    assert length < 8 and code == (1 << length) - 1, "Huffman padding that is not the EOS prefix"
    return bytes(out)


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out, value = bytearray((first | limit,)), value - limit
    while value >= 128:
        out.append(value & 127 | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: str, value: str) -> bytes:
    """A field as a literal without indexing, its name new, no Huffman coding."""
    n, v = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(v), 7) + v


class HpackDecoder:
    """Header blocks as a server may code them: indexed fields, literals of every kind,
    Huffman-coded strings, the dynamic table and its size updates."""

    def __init__(self) -> None:
        self.table: list[tuple[str, str]] = []  # newest first
        self.size_max = 4096

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        fields, pos = [], 0
        while pos < len(block):
            first = block[pos]
            if first & 0x80:
                index, pos = self._int(block, pos, 7)
                fields.append(self._field(index))
            elif first & 0x40 or not first & 0x20:  # a literal: with incremental indexing, or not indexed
                indexed = bool(first & 0x40)
                index, pos = self._int(block, pos, 6 if indexed else 4)
                if index:
                    name = self._field(index)[0]
                else:
                    name, pos = self._string(block, pos)
                value, pos = self._string(block, pos)
                fields.append((name, value))
                if indexed:
                    self.table.insert(0, (name, value))
                    self._evict()
            else:  # a dynamic table size update
                self.size_max, pos = self._int(block, pos, 5)
                self._evict()
        return fields

    def _field(self, index: int) -> tuple[str, str]:
        assert index > 0, "indexed field 0"
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        return self.table[index - len(STATIC_TABLE) - 1]

    def _evict(self) -> None:
        while sum(len(n) + len(v) + 32 for n, v in self.table) > self.size_max:
            self.table.pop()

    @staticmethod
    def _int(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value, pos = block[pos] & limit, pos + 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            byte, pos = block[pos], pos + 1
            value += (byte & 127) << shift
            shift += 7
            if not byte & 128:
                return value, pos

    def _string(self, block: bytes, pos: int) -> tuple[str, int]:
        huffman = bool(block[pos] & 0x80)
        length, pos = self._int(block, pos, 7)
        raw = block[pos:pos + length]
        return (huffman_decode(raw) if huffman else raw).decode("latin-1"), pos + length


# --------------------------------------------------------------------------- an HTTP/2 client


@dataclass
class Stream:
    """What the server sent on one stream."""

    header_blocks: list[dict[str, str]] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)
    ended: bool = False  # END_STREAM seen
    reset: int | None = None  # RST_STREAM's error code
    granted: int = 0  # WINDOW_UPDATE increments
    sent: int = 0  # DATA octets we sent on it

    @property
    def grpc_status(self) -> int | None:
        if not self.ended or not self.header_blocks or "grpc-status" not in self.header_blocks[-1]:
            return None
        return int(self.header_blocks[-1]["grpc-status"])

    def messages(self) -> list[bytes]:
        out, pos = [], 0
        while pos + GRPC_PREFIX.size <= len(self.data):
            _compressed, length = GRPC_PREFIX.unpack_from(self.data, pos)
            out.append(bytes(self.data[pos + GRPC_PREFIX.size: pos + GRPC_PREFIX.size + length]))
            pos += GRPC_PREFIX.size + length
        return out


class H2Client:
    """One connection to the door: frames out as the test says, frames in read and recorded.
    It announces windows as large as they go, so the door's answers never wait for it."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.settings: dict[int, int] = {}  # the server's
        self.settings_seen = False
        self.streams: dict[int, Stream] = {}
        self.connection_granted = 0
        self.sent = 0  # DATA octets on the connection
        self.goaway: tuple[int, int] | None = None  # last stream id, error code
        self.closed = False  # the server closed (or reset) the connection: a send failed, or the reading ended
        self.eof = False  # nothing more to read
        self.received = 0  # octets from the server
        self.pings_acked: set[bytes] = set()
        self._buffer = bytearray()
        self._decoder = HpackDecoder()
        self._block: tuple[int, bool, bytearray] | None = None  # a header block awaiting CONTINUATION
        self._next_id = 1
        self.send(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_MAX))
                  + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW_MAX - DEFAULT_WINDOW)))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True  # what the server sent before it closed is still read

    def ping(self) -> None:
        """A PING, and its ACK: the server has read every frame sent before it."""
        payload = struct.pack(">Q", len(self.pings_acked) + 1)
        self.send(frame(PING, 0, 0, payload))
        self.wait_for(lambda: payload in self.pings_acked, "the PING's ACK")

    def handshake(self) -> Self:
        self.wait_for(lambda: self.settings_seen, "the server's SETTINGS")
        return self

    # ------------------------------------------------------------------ calls

    def new_stream(self) -> int:
        stream_id, self._next_id = self._next_id, self._next_id + 2
        self.streams[stream_id] = Stream()
        return stream_id

    def headers(self, stream_id: int, method: str, end_stream: bool = False) -> bytes:
        """The frame opening a call of ``method`` (not sent)."""
        block = b"".join(literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", f"/apache.rocketmq.v2.MessagingService/{method}"),
            (":authority", "limits"), ("content-type", "application/grpc"), ("te", "trailers"),
            ("x-mq-client-id", CLIENT_ID), ("x-mq-language", "PYTHON")))
        return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), stream_id, block)

    def data_frames(self, stream_id: int, payload: bytes, end_stream: bool = False) -> bytes:
        """``payload`` as DATA frames of the largest size the server takes (not sent; counted
        against the windows as sent)."""
        size = self.settings.get(SETTINGS_MAX_FRAME_SIZE, DEFAULT_FRAME_SIZE)
        chunks = [payload[at: at + size] for at in range(0, len(payload), size)] or [b""]
        self.streams[stream_id].sent += len(payload)
        self.sent += len(payload)
        return b"".join(frame(DATA, END_STREAM if end_stream and i == len(chunks) - 1 else 0, stream_id, chunk)
                        for i, chunk in enumerate(chunks))

    def send_within_windows(self, stream_id: int, payload: bytes, end_stream: bool = True,
                            wait_s: float = WAIT_S) -> int:
        """Send ``payload`` as a client that keeps to the windows does: no more than they allow,
        waiting (up to ``wait_s`` each time) for WINDOW_UPDATEs when they are spent. Returns how
        many times it waited."""
        waits, at = 0, 0
        while True:
            room = min(self.stream_window(stream_id), self.connection_window(),
                       self.settings.get(SETTINGS_MAX_FRAME_SIZE, DEFAULT_FRAME_SIZE))
            if room <= 0 and at < len(payload):
                waits += 1
                self.wait_for(lambda: min(self.stream_window(stream_id), self.connection_window()) > 0,
                              f"a WINDOW_UPDATE for stream {stream_id} ({at} of {len(payload)} octets sent)", wait_s)
                continue
            chunk = payload[at: at + max(room, 0)]
            at += len(chunk)
            self.send(self.data_frames(stream_id, chunk, end_stream and at == len(payload)))
            if at == len(payload):
                return waits

    def stream_window(self, stream_id: int) -> int:
        stream = self.streams[stream_id]
        return self.settings.get(SETTINGS_INITIAL_WINDOW_SIZE, DEFAULT_WINDOW) + stream.granted - stream.sent

    def connection_window(self) -> int:
        return DEFAULT_WINDOW + self.connection_granted - self.sent

    def call(self, method: str, request: bytes) -> int:
        """Open a call and send its one request within the windows; its stream id."""
        stream_id = self.new_stream()
        self.send(self.headers(stream_id, method))
        self.send_within_windows(stream_id, grpc_message(request))
        return stream_id

    def wait_answered(self, *stream_ids: int) -> None:
        self.wait_for(lambda: all(self.streams[s].ended or self.streams[s].reset is not None for s in stream_ids),
                      f"answers on streams {stream_ids[:5]}{'...' if len(stream_ids) > 5 else ''}")

    # ------------------------------------------------------------------ reading

    def wait_for(self, done: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        """Read frames until ``done()``; fails after ``timeout_s`` or when the server closes first."""
        end = time.monotonic() + timeout_s
        while not done():
            left = end - time.monotonic()
            if left <= 0 or self.eof:
                raise AssertionError(f"{what}: {'the server closed the connection' if self.eof else 'timed out'}"
                                     f" (GOAWAY {self.goaway}, {self.received} octets received)")
            self.read(left)

    def read(self, timeout_s: float) -> None:
        self.sock.settimeout(timeout_s)
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            return
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = self.eof = True
            return
        self.received += len(chunk)
        self._buffer += chunk
        self._parse()

    def _parse(self) -> None:
        buffer, pos = self._buffer, 0
        while len(buffer) - pos >= 9:
            word, flags, stream_id = struct.unpack_from(">IBI", buffer, pos)
            length, kind, stream_id = word >> 8, word & 0xFF, stream_id & 0x7FFF_FFFF
            if len(buffer) - pos - 9 < length:
                break
            self._frame(kind, flags, stream_id, bytes(buffer[pos + 9: pos + 9 + length]))
            pos += 9 + length
        del buffer[:pos]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind in (DATA, HEADERS) and flags & PADDED:
            payload = payload[1: len(payload) - payload[0]]
        if kind == SETTINGS and not flags & ACK:
            for at in range(0, len(payload), 6):
                key, value = struct.unpack_from(">HI", payload, at)
                self.settings[key] = value
            self.settings_seen = True
            self.send(frame(SETTINGS, ACK, 0))
        elif kind == WINDOW_UPDATE:
            increment = struct.unpack(">I", payload)[0] & 0x7FFF_FFFF
            if stream_id == 0:
                self.connection_granted += increment
            elif stream_id in self.streams:
                self.streams[stream_id].granted += increment
        elif kind == HEADERS:
            if flags & PRIORITY:
                payload = payload[5:]
            self._block = (stream_id, bool(flags & END_STREAM), bytearray(payload))
            if flags & END_HEADERS:
                self._headers_done()
        elif kind == CONTINUATION:
            assert self._block is not None and self._block[0] == stream_id, "a CONTINUATION out of place"
            self._block[2].extend(payload)
            if flags & END_HEADERS:
                self._headers_done()
        elif kind == DATA:
            stream = self.streams[stream_id]
            stream.data += payload
            stream.ended = stream.ended or bool(flags & END_STREAM)
        elif kind == RST_STREAM:
            self.streams[stream_id].reset = struct.unpack(">I", payload)[0]
        elif kind == GOAWAY:
            last_id, code = struct.unpack_from(">II", payload)
            self.goaway = (last_id & 0x7FFF_FFFF, code)
        elif kind == PING:
            if flags & ACK:
                self.pings_acked.add(payload)
            else:
                self.send(frame(PING, ACK, 0, payload))

    def _headers_done(self) -> None:
        assert self._block is not None
        stream_id, ends, block = self._block
        self._block = None
        fields = dict(self._decoder.decode(bytes(block)))
        stream = self.streams[stream_id]
        stream.header_blocks.append(fields)
        stream.ended = stream.ended or ends


def grpc_message(message: bytes, length: int | None = None) -> bytes:
    """A gRPC length-prefixed message (``length``: what the prefix says, if not its length)."""
    return GRPC_PREFIX.pack(0, len(message) if length is None else length) + message


def route_request(size: int = 0) -> bytes:
    """A QueryRoute request of TOPIC, ``size`` octets long when that is more than it needs: the
    rest an unknown field (field 1000, which a reader skips)."""
    request = pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC), endpoints=pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=8081)])).SerializeToString()
    tag = _varint(1000 << 3 | 2)
    for length_size in range(1, 6):
        filler = size - len(request) - len(tag) - length_size
        if filler >= 0 and len(_varint(filler)) == length_size:
            return request + tag + _varint(filler) + bytes(filler)
    return request


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 128:
        out.append(value & 127 | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def route_of(client: H2Client, stream_id: int) -> pb.QueryRouteResponse:
    """The stream's answer: gRPC OK and one QueryRouteResponse (whose own status it returns)."""
    stream = client.streams[stream_id]
    assert stream.grpc_status == GRPC_OK, (stream_id, stream.header_blocks, stream.reset)
    [message] = stream.messages()
    return pb.QueryRouteResponse.FromString(message)


def served(address: str) -> H2Client:
    """A connection the door serves: its SETTINGS came (a connection made just as an earlier one
    of the module closed may still find the door full: it is made again, within WAIT_S)."""
    end = time.monotonic() + WAIT_S
    while True:
        client = None
        try:
            client = H2Client(address)
            return client.handshake()
        except (AssertionError, OSError):
            if client is not None:
                client.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.05)  # the next try


@pytest.fixture(scope="module")
def door(tmp_path_factory) -> Iterator[str]:
    """A broker and a proxy with a gRPC door of at most CONNECTIONS_MAX connections; its address."""
    where = tmp_path_factory.mktemp("grpc-limits")
    with running_cluster(where, child_env(), proxies=1, grpc=True,
                         broker=f"connections_max = {CONNECTIONS_MAX}") as cluster:
        assert cluster.mqctl("topic", "create", TOPIC).returncode == 0
        yield cluster.grpc[0]


def test_the_door_announces_the_documented_bounds(door):
    with served(door) as client:
        assert client.settings[SETTINGS_MAX_CONCURRENT_STREAMS] == STREAMS_MAX
        assert client.settings[SETTINGS_INITIAL_WINDOW_SIZE] == STREAM_WINDOW
        client.wait_for(lambda: client.connection_window() == CONNECTION_WINDOW, "the connection's window")
        call = client.call("QueryRoute", route_request())
        client.wait_answered(call)
        answer = route_of(client, call)
        assert answer.status.code == pb.OK and answer.message_queues, answer


def test_streams_past_the_announced_limit_are_refused_and_the_others_served(door):
    with served(door) as client:
        opened = [client.new_stream() for _ in range(client.settings[SETTINGS_MAX_CONCURRENT_STREAMS] + 8)]
        client.send(b"".join(client.headers(s, "QueryRoute") for s in opened))  # all at once, none ended
        kept, refused = opened[:STREAMS_MAX], opened[STREAMS_MAX:]
        client.wait_for(lambda: all(client.streams[s].reset is not None for s in refused), "RST_STREAM of the extra")
        assert {client.streams[s].reset for s in refused} == {REFUSED_STREAM}
        client.ping()  # every HEADERS read: the first 256 are open, neither reset nor answered
        assert all(client.streams[s].reset is None and not client.streams[s].header_blocks for s in kept)
        client.send(b"".join(client.data_frames(s, grpc_message(route_request()), end_stream=True) for s in kept))
        client.wait_answered(*kept)
        assert all(route_of(client, s).status.code == pb.OK for s in kept)
        retried = client.call("QueryRoute", route_request())  # a refused call made again, streams free
        client.wait_answered(retried)
        assert route_of(client, retried).status.code == pb.OK and client.goaway is None


def test_a_large_message_is_granted_as_it_arrives_and_a_small_one_holds_its_window(door):
    """A message of LARGE_MESSAGE octets or more is granted as its octets come (its length held
    in the door's budget); the start of a smaller one is held against the stream's window until
    it is whole."""
    with served(door) as client:
        large, small = client.new_stream(), client.new_stream()
        client.send(client.headers(large, "QueryRoute") + client.headers(small, "QueryRoute"))
        client.send(client.data_frames(large, grpc_message(bytes(STREAM_WINDOW // 2), length=2 * STREAM_WINDOW)))
        client.send(client.data_frames(small, grpc_message(bytes(LARGE_MESSAGE // 2), length=LARGE_MESSAGE - 6)))
        client.ping()
        assert client.streams[large].granted > 0 and client.streams[small].granted == 0
        assert client.goaway is None


def test_data_past_the_connections_window_is_a_flow_control_error(door):
    with served(door) as client:
        client.wait_for(lambda: client.connection_window() == CONNECTION_WINDOW, "the connection's window")
        # each stream holds the start of a message under LARGE_MESSAGE octets: the door grants none
        # of it until it is whole, so the streams fill the connection's window
        per_stream = LARGE_MESSAGE - 2 * GRPC_PREFIX.size
        full, rest = divmod(CONNECTION_WINDOW, per_stream)
        streams = [client.new_stream() for _ in range(full + 2)]
        for stream, size in zip(streams, [per_stream] * full + [rest]):
            start = grpc_message(bytes(size - GRPC_PREFIX.size), length=LARGE_MESSAGE - GRPC_PREFIX.size - 1)
            client.send(client.headers(stream, "QueryRoute") + client.data_frames(stream, start))
        client.ping()
        assert client.goaway is None and client.connection_window() == 0  # the window, to the octet
        client.send(client.headers(streams[-1], "QueryRoute") + client.data_frames(streams[-1], b"\0"))
        client.wait_for(lambda: client.goaway is not None, "a GOAWAY")
        assert client.goaway is not None and client.goaway[1] == FLOW_CONTROL_ERROR, client.goaway
        assert client.connection_granted == CONNECTION_WINDOW - DEFAULT_WINDOW, "the door granted more"
        client.wait_for(lambda: client.eof, "the connection closed")


def test_a_client_keeping_to_the_windows_is_served_past_them(door):
    """Requests adding up to more than the connection's window, each as large as a stream's: the
    client waits for the door's WINDOW_UPDATEs, and every call is answered."""
    with served(door) as client:
        request = route_request(STREAM_WINDOW - GRPC_PREFIX.size)
        calls, waits = [], 0
        for _ in range(CONNECTION_WINDOW // STREAM_WINDOW + 4):
            stream = client.new_stream()
            client.send(client.headers(stream, "QueryRoute"))
            waits += client.send_within_windows(stream, grpc_message(request))
            calls.append(stream)
        client.wait_answered(*calls)
        assert all(route_of(client, s).status.code == pb.OK for s in calls)
        assert waits > 0 and client.connection_granted > CONNECTION_WINDOW - DEFAULT_WINDOW
        assert client.goaway is None


def test_a_message_larger_than_a_streams_window_is_served(door):
    """docs/grpc.md: one message may be 16 MiB (a SendMessage of several 4 MiB bodies): its
    octets are granted as they arrive, not only once it is whole (before, a grpcio call of
    1.1 MiB waited for a WINDOW_UPDATE that never came and ended DEADLINE_EXCEEDED)."""
    with served(door) as client:
        stream = client.new_stream()
        client.send(client.headers(stream, "QueryRoute"))
        client.send_within_windows(stream, grpc_message(route_request(4 * STREAM_WINDOW)), wait_s=5)
        client.wait_answered(stream)
        assert route_of(client, stream).status.code == pb.OK


def test_a_message_over_16_mib_is_resource_exhausted_and_the_connection_serves_on(door):
    with served(door) as client:
        at_limit = client.new_stream()  # a message of 16 MiB is taken (its start, here)
        client.send(client.headers(at_limit, "QueryRoute")
                    + client.data_frames(at_limit, grpc_message(bytes(1000), length=MESSAGE_MAX)))
        client.ping()
        assert not client.streams[at_limit].header_blocks and client.streams[at_limit].reset is None
        client.send(frame(RST_STREAM, 0, at_limit, struct.pack(">I", CANCEL)))
        over = client.new_stream()
        client.send(client.headers(over, "QueryRoute")
                    + client.data_frames(over, grpc_message(bytes(1000), length=MESSAGE_MAX + 1)))
        client.wait_answered(over)
        assert client.streams[over].grpc_status == GRPC_RESOURCE_EXHAUSTED, client.streams[over]
        assert not client.streams[over].messages()
        after = client.call("QueryRoute", route_request())
        client.wait_answered(after)
        assert route_of(client, after).status.code == pb.OK and client.goaway is None


def test_connections_past_connections_max_are_closed_at_once_and_a_freed_place_is_taken(door):
    held: list[H2Client] = []
    try:
        for _ in range(CONNECTIONS_MAX):
            held.append(served(door))  # made again while an earlier test's connection is being counted out
        extra = H2Client(door)
        try:
            extra.wait_for(lambda: extra.eof, "the connection past connections_max closed", timeout_s=5)
            assert extra.received == 0 and not extra.settings_seen
        finally:
            extra.close()
        for client in held:  # the door's own go on
            call = client.call("QueryRoute", route_request())
            client.wait_answered(call)
            assert route_of(client, call).status.code == pb.OK
        held.pop(0).close()
        held.append(served(door))  # made again until the door has counted the closed one out
        call = held[-1].call("QueryRoute", route_request())
        held[-1].wait_answered(call)
        assert route_of(held[-1], call).status.code == pb.OK
    finally:
        for client in held:
            client.close()
