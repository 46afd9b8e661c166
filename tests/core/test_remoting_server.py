"""The remoting server and client over real TCP on 127.0.0.1."""

import random
import socket
import struct
import threading

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import RemotingError, RemotingTimeoutError, RpcRejected
from core.plugin_manager import PluginHost
from core.plugin_markers import hookimpl
from core.remoting.client import open_remoting_client
from core.remoting.codes import ResponseCode
from core.remoting.command import FrameDecoder, RemotingCommand, encode_frame
from core.remoting.connection import ANSWER_LATER
from core.remoting.limits import ConnectionLimits
from core.remoting.server import serve_remoting

ECHO, SLOW, NEVER, BOOM, SEEN = 1, 2, 3, 4, 5


class EchoProcessor:
    def __init__(self) -> None:
        self.oneways: list[str] = []

    def process(self, request, conn):
        if request.code == ECHO:
            return request.reply(ResponseCode.SUCCESS, ext_fields=dict(request.ext_fields), body=request.body)
        if request.code == SLOW:
            return self._slow(request)
        if request.code == NEVER:
            return trio.sleep_forever()
        if request.code == BOOM:
            raise ValueError("kaboom")
        if request.code == SEEN:
            self.oneways.append(request.ext_fields.get("n", ""))
            return None
        return request.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {request.code} not supported")

    async def _slow(self, request):
        await trio.sleep(random.random() / 50)
        return request.reply(ResponseCode.SUCCESS, ext_fields={"n": request.ext_fields["n"]})


async def start(nursery, processor=None, **kwargs):
    processor = processor or EchoProcessor()
    port = await nursery.start(lambda task_status: serve_remoting(processor, port=0, task_status=task_status, **kwargs))
    return processor, f"127.0.0.1:{port}"


async def test_requests_and_responses_match_by_opaque_out_of_order(nursery):
    _, addr = await start(nursery)
    async with open_remoting_client() as client:
        results = {}

        async def call(n):
            resp = await client.invoke(addr, RemotingCommand(code=SLOW, ext_fields={"n": str(n)}), timeout_s=5)
            results[n] = resp.ext_fields["n"]

        async with trio.open_nursery() as inner:
            for n in range(300):
                inner.start_soon(call, n)
        assert results == {n: str(n) for n in range(300)}
        conn = await client.connection(addr)
        assert conn.statistics().pending_requests == 0


async def test_unknown_codes_errors_and_timeouts_leave_the_connection_usable(nursery):
    _, addr = await start(nursery)
    async with open_remoting_client() as client:
        resp = await client.invoke(addr, RemotingCommand(code=999))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "999" in resp.remark
        resp = await client.invoke(addr, RemotingCommand(code=BOOM))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "kaboom" in resp.remark
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(addr, RemotingCommand(code=NEVER), timeout_s=0.2)
        resp = await client.invoke(addr, RemotingCommand(code=ECHO, body=b"still here"))
        assert resp.body == b"still here"


class RelayProcessor:
    """Answers through Connection.answer from a callback request to a second server, as the
    proxy's relay does: no task per request."""

    def __init__(self, upstream) -> None:
        self.upstream = upstream
        self.timeout_s = 0.3

    def process(self, request, conn):
        def then(outcome):
            answer = (request.reply(ResponseCode.SUCCESS, body=outcome.body) if isinstance(outcome, RemotingCommand)
                      else request.reply(ResponseCode.SYSTEM_ERROR, type(outcome).__name__))
            conn.answer(request, answer)
        self.upstream.request_then(RemotingCommand(code=request.code, body=request.body), self.timeout_s, then)
        return ANSWER_LATER


async def test_answers_given_later_from_callbacks_count_in_flight_and_report_timeouts(nursery):
    _, echo_addr = await start(nursery)
    async with open_remoting_client() as client:
        upstream = await client.connection(echo_addr)
        relay, relay_addr = await start(nursery, RelayProcessor(upstream))
        answers = {}

        async def call(n):
            code = NEVER if n == "never" else ECHO
            answers[n] = await client.invoke(relay_addr, RemotingCommand(code=code, body=str(n).encode()), timeout_s=5)

        async with trio.open_nursery() as inner:
            for n in range(100):
                inner.start_soon(call, n)
        assert {n: (a.code, a.body) for n, a in answers.items()} == {
            n: (ResponseCode.SUCCESS, str(n).encode()) for n in range(100)}
        # NEVER gets no answer upstream: the callback hears of the timeout, the client an error
        resp = await client.invoke(relay_addr, RemotingCommand(code=NEVER), timeout_s=5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "RemotingTimeoutError"
        assert upstream.statistics().pending_requests == 0
        relay_conn = await client.connection(relay_addr)
        assert relay_conn.statistics().pending_requests == 0
        # closing the upstream settles what is pending there, with the reason
        relay.timeout_s = 30.0
        async with trio.open_nursery() as inner:
            inner.start_soon(call, "never")
            with trio.fail_after(5):
                while upstream.statistics().pending_requests == 0:
                    await trio.sleep(0.01)
            upstream.close()
        assert answers["never"].code == ResponseCode.SYSTEM_ERROR
        assert answers["never"].remark == "ConnectionClosedError"


class PassingProcessor:
    """Passes each request's frame up as it came and its answer's frame down as it came."""

    def __init__(self, upstream) -> None:
        self.upstream = upstream
        self.copied = 0  # requests whose opaque was taken upstream: sent as copies

    def process(self, request, conn):
        def passed(outcome):  # the answer's frame carries the client's own opaque
            conn.answer_frame(request, outcome)

        def copied(outcome):  # the answer is to this side's opaque: answered with a new frame
            conn.answer(request, request.reply(ResponseCode.SUCCESS, body=outcome.body))

        if not self.upstream.pass_then(request, 5, passed):
            self.copied += 1
            self.upstream.request_then(RemotingCommand(code=request.code, body=request.body), 5, copied)
        return ANSWER_LATER


async def test_frames_pass_through_with_their_opaques_and_a_taken_opaque_goes_as_a_copy(nursery):
    _, echo_addr = await start(nursery)
    async with open_remoting_client() as upstream_client, open_remoting_client() as client:
        upstream_client.keep_frames = True
        upstream = await upstream_client.connection(echo_addr)
        passing, addr = await start(nursery, PassingProcessor(upstream), keep_frames=True)
        answers = {}

        async def call(n):
            answers[n] = await client.invoke(addr, RemotingCommand(code=ECHO, body=str(n).encode()), timeout_s=5)

        async with trio.open_nursery() as inner:
            for n in range(50):
                inner.start_soon(call, n)
        assert {n: a.body for n, a in answers.items()} == {n: str(n).encode() for n in range(50)}
        assert passing.copied == 0  # every frame went up as it came
        # a request of the relay's own holds an opaque upstream; a client frame with that opaque
        # goes as a copy, and its answer still comes back under the client's opaque
        mine = RemotingCommand(code=NEVER)

        async def held() -> None:
            with pytest.raises(RemotingError):  # closed at the end of the test
                await upstream.request(mine, 30)

        nursery.start_soon(held)
        with trio.fail_after(5):
            while upstream.statistics().pending_requests == 0:
                await trio.sleep(0.001)
        stream = await trio.open_tcp_stream("127.0.0.1", int(addr.split(":")[1]))
        await stream.send_all(encode_frame(RemotingCommand(code=ECHO, opaque=mine.opaque, body=b"as sent")))
        decoder, got = FrameDecoder(), []
        with trio.fail_after(5):
            while not got:
                got = decoder.feed(await stream.receive_some(1 << 16))
        assert (got[0].opaque, got[0].body, passing.copied) == (mine.opaque, b"as sent", 1)
        await stream.aclose()
        upstream.close()


async def test_oneway_requests_get_no_response(nursery):
    processor, addr = await start(nursery)
    async with open_remoting_client() as client:
        conn = await client.connection(addr)
        for n in range(5):
            await conn.oneway(RemotingCommand(code=SEEN, ext_fields={"n": str(n)}))
        await client.invoke(addr, RemotingCommand(code=ECHO))  # ordered after the oneways
        assert processor.oneways == ["0", "1", "2", "3", "4"]
        assert conn.statistics().frames_received == 1


async def test_ready_replies_are_coalesced_into_fewer_sends(nursery):
    _, addr = await start(nursery)
    frames = b"".join(encode_frame(RemotingCommand(code=ECHO, opaque=i, body=b"x" * 10)) for i in range(200))
    stream = await trio.open_tcp_stream("127.0.0.1", int(addr.split(":")[1]))
    await stream.send_all(frames)
    decoder, got = FrameDecoder(), []
    receives = 0
    with trio.fail_after(5):
        while len(got) < 200:
            got.extend(decoder.feed(await stream.receive_some(1 << 20)))
            receives += 1
    assert [c.opaque for c in got] == list(range(200))
    assert receives < 200, "replies to pipelined requests should share socket writes"
    await stream.aclose()


async def test_rpc_hooks_can_reject_and_observe(nursery):
    seen = []

    class Acl:
        @hookimpl
        def mq_rpc_before_request(self, conn, request):
            if request.ext_fields.get("AccessKey") == "bad":
                raise RpcRejected(ResponseCode.NO_PERMISSION, "access denied")

        @hookimpl
        def mq_rpc_after_response(self, conn, request, response):
            seen.append((request.code, response.code))

    plugins = PluginHost(load_entry_points=False)
    plugins.register(Acl())
    _, addr = await start(nursery, plugins=plugins)
    async with open_remoting_client() as client:
        denied = await client.invoke(addr, RemotingCommand(code=ECHO, ext_fields={"AccessKey": "bad"}))
        assert (denied.code, denied.remark) == (ResponseCode.NO_PERMISSION, "access denied")
        ok = await client.invoke(addr, RemotingCommand(code=ECHO, ext_fields={"AccessKey": "good"}))
        assert ok.code == ResponseCode.SUCCESS
    assert seen == [(ECHO, ResponseCode.NO_PERMISSION), (ECHO, ResponseCode.SUCCESS)]


async def test_oversized_frame_closes_only_that_connection(nursery):
    _, addr = await start(nursery, frame_size_max=1024)
    port = int(addr.split(":")[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(struct.pack(">ii", 5000, 10) + b"x" * 100)
    with trio.fail_after(5):
        assert await stream.receive_some(100) == b""  # closed by the server
    async with open_remoting_client() as client:
        resp = await client.invoke(addr, RemotingCommand(code=ECHO, body=b"ok"))
        assert resp.body == b"ok"


async def test_requests_in_flight_are_bounded_by_count_and_by_bytes_per_connection(nursery):
    limits = ConnectionLimits(inflight_requests_max=5, inflight_bytes_max=10_000)
    _, addr = await start(nursery, limits=limits)
    async with open_remoting_client() as client, open_remoting_client() as other:
        async def never(body: bytes, out: list) -> None:
            out.append(await client.invoke(addr, RemotingCommand(code=NEVER, body=body), timeout_s=2))

        answers: list = []
        with trio.move_on_after(1):  # the held requests never answer; the refused ones do at once
            async with trio.open_nursery() as inner:
                for _ in range(8):
                    inner.start_soon(lambda: never(b"", answers))
        assert [a.code for a in answers] == [ResponseCode.SYSTEM_BUSY] * 3
        assert "5 requests of this connection in flight" in answers[0].remark
        # another connection has its own allowance: a 6 KB request is taken, a second refused by bytes
        got: list = []
        with trio.move_on_after(1):
            async with trio.open_nursery() as inner:
                async def big() -> None:
                    got.append(await other.invoke(addr, RemotingCommand(code=NEVER, body=b"x" * 6000), timeout_s=2))
                inner.start_soon(big)
                await trio.sleep(0.2)
                inner.start_soon(big)
        assert [a.code for a in got] == [ResponseCode.SYSTEM_BUSY] and "bytes" in got[0].remark


async def test_a_large_frame_left_unfinished_gives_its_budget_back(nursery):
    limits = ConnectionLimits(large_frame_bytes=1000, large_frames_bytes_max=30_000, large_frame_s=0.5)
    _, addr = await start(nursery, limits=limits, frame_size_max=20_000)
    port = int(addr.split(":")[1])
    stalled = await trio.open_tcp_stream("127.0.0.1", port)
    await stalled.send_all(struct.pack(">ii", 19_996, 0) + b"x" * 100)  # 20 KB declared, then silence
    await trio.testing.wait_all_tasks_blocked()
    second = await trio.open_tcp_stream("127.0.0.1", port)
    await second.send_all(struct.pack(">ii", 19_996, 0))  # 20 KB more would pass the 30 KB budget
    with trio.fail_after(5):
        assert await second.receive_some(100) == b""
        assert await stalled.receive_some(100) == b""  # closed after its 0.5 s
    async with open_remoting_client() as client:  # the budget is free again: a 15 KB frame passes
        resp = await client.invoke(addr, RemotingCommand(code=ECHO, body=b"y" * 15_000))
        assert resp.body == b"y" * 15_000


async def test_connections_beyond_the_limit_are_closed_as_they_arrive(nursery):
    _, addr = await start(nursery, limits=ConnectionLimits(connections_max=2))
    port = int(addr.split(":")[1])
    kept = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
    await trio.testing.wait_all_tasks_blocked()
    third = await trio.open_tcp_stream("127.0.0.1", port)
    with trio.fail_after(5):
        assert await third.receive_some(100) == b""
    for stream in kept:
        await stream.aclose()
    with trio.fail_after(5):
        while True:  # the closed ones are counted out as the server notices
            async with open_remoting_client() as client:
                try:
                    assert (await client.invoke(addr, RemotingCommand(code=ECHO, body=b"ok"), timeout_s=1)).body == b"ok"
                    break
                except RemotingError:
                    await trio.sleep(0.05)


# ---------------------------------------------------------------- fuzzing a live server

class _ServerThread:
    """A live server on its own trio loop, for synchronous hypothesis tests."""

    def __init__(self) -> None:
        self.port = None
        self._ready = threading.Event()
        self._stop = None
        self.thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    async def _main(self):
        async with trio.open_nursery() as nursery:
            self._stop = nursery.cancel_scope
            self.port = await nursery.start(lambda task_status: serve_remoting(
                EchoProcessor(), port=0, frame_size_max=64 * 1024, task_status=task_status))
            self._ready.set()

    def __enter__(self):
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        pass  # daemon thread: the process ends it


@pytest.fixture(scope="module")
def live_server():
    with _ServerThread() as server:
        yield server


def still_serves(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_frame(RemotingCommand(code=ECHO, opaque=77, body=b"alive")))
        decoder, got = FrameDecoder(), []
        while not got:
            data = sock.recv(65536)
            if not data:
                return False
            got = decoder.feed(data)
        return got[0].opaque == 77 and got[0].body == b"alive"


valid_frame = st.builds(lambda code, body, opaque: encode_frame(RemotingCommand(code=code, body=body, opaque=opaque)),
                        st.sampled_from([ECHO, 999, BOOM]), st.binary(max_size=50), st.integers(0, 2**31 - 1))


@st.composite
def hostile_streams(draw):
    frames = draw(st.lists(valid_frame, max_size=4))
    data = bytearray(b"".join(frames))
    kind = draw(st.sampled_from(["random", "truncate", "mutate", "huge-length", "bad-json"]))
    if kind == "random":
        data = bytearray(draw(st.binary(min_size=1, max_size=300)))
    elif kind == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "mutate" and data:
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif kind == "huge-length":
        data = bytearray(struct.pack(">ii", draw(st.integers(64 * 1024, 2**31 - 1)), 4)) + data
    else:
        junk = draw(st.binary(max_size=40))
        data = bytearray(struct.pack(">ii", 4 + len(junk), len(junk)) + junk) + data
    return bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=hostile_streams())
def test_hostile_bytes_never_take_the_server_down(live_server, payload):
    with socket.create_connection(("127.0.0.1", live_server.port), timeout=5) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        try:
            while sock.recv(65536):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
    assert still_serves(live_server.port)
