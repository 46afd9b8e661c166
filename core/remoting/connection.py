"""One remoting connection, server or client side: a reader, a bounded writer that coalesces
ready frames into one send, requests matched to responses by opaque, and incoming requests
handed to a processor.

A processor answers at once (returns a command), later (returns an awaitable, run in its own
task so a held long-poll never blocks the reader), or later without a task (returns
:data:`ANSWER_LATER` and calls :meth:`Connection.answer` from a callback: the proxy's relay,
which costs no task, event or wake-up per request). A request can likewise be sent with a
callback instead of a waiting task (:meth:`Connection.request_then`). Each connection bounds
its queued frames, its in-flight handlers and its pending requests.

A connection a server accepted (``serving``) stops reading while its answers fill its out
buffer (queued and being written: a peer that asks and never reads is not read either), and
decodes a read a batch of frames at a time, letting the node's other connections have their
turn between batches. A client's connection always reads: its peer's answers are what drain it.
"""

from __future__ import annotations

import heapq
import inspect
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from time import perf_counter

import trio

from core.errors import ConnectionClosedError, RemotingError, RemotingTimeoutError, RpcRejected
from core.remoting.codes import FLAG_ONEWAY, ResponseCode
from core.remoting.command import (
    FRAME_SIZE_MAX_DEFAULT,
    FrameDecoder,
    FrameError,
    HeaderError,
    RemotingCommand,
    frame_parts,
)
from core.remoting.limits import DEFAULT_LIMITS, ByteBudget, ConnectionLimits, LargeFrameHold
from core.remoting.pending import (
    ANSWER_LATER,
    TOUCHED,
    Callback,
    ConnectionStatistics,
    Outcome,
    Touched,
    Waiting,
    request_bytes,
)
from core.remoting.processor import LatencyMeter, Processor, Reply, RpcHooks

__all__ = ["ANSWER_LATER", "Connection", "Outcome", "Processor", "Reply", "RpcHooks", "request_bytes"]

log = logging.getLogger(__name__)

RECEIVE_BYTES = 256 * 1024
FRAMES_PER_BATCH = 256  # frames decoded and handled before the rest of a read is decoded
OUT_BUFFER_BYTES_MAX = 4 * 1024 * 1024  # queued outgoing bytes before senders wait
SWEEP_S = 0.05  # how often request deadlines are checked

PENDING_MAX = 65536
OWN_OPAQUES_FROM = 1 << 30


class Connection:
    """A framed, bidirectional RocketMQ remoting connection.

    One concept, 27 methods: each side's requests and answers share one opaque space, one
    write buffer and one back-pressure budget, so the reader, writer and pending table are
    one object; the sans-IO parts (frames, pending entries, limits) already live beside it."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        processor: Processor | None = None,
        *,
        remote: str = "?",
        frame_size_max: int = FRAME_SIZE_MAX_DEFAULT,
        out_buffer_max: int = OUT_BUFFER_BYTES_MAX,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        large_frames: ByteBudget | None = None,
        plugins: RpcHooks | None = None,
        keep_frames: bool = False,
        latency: LatencyMeter | None = None,
        serving: bool = False,
    ) -> None:
        self.stream = stream
        self.latency = latency  # seconds from a request's read to its answer, by (request, response) code
        self.keep_frames = keep_frames  # commands read carry their frames (RemotingCommand.frame)
        self.serving = serving  # a server's connection: see _room_for_answers
        self.processor = processor
        self.remote = remote
        self.frame_size_max = frame_size_max
        self.limits = limits
        self.large_frames = large_frames  # node-wide: a large frame reserves its size here before it is read
        self.plugins = plugins
        self._rpc_hooks = plugins is not None and plugins.has_rpc_hooks()
        # Outgoing frames accumulate here; the writer sends everything queued in one write.
        self._out, self._out_frames, self._out_max = bytearray(), 0, out_buffer_max
        self._writer_lot = trio.lowlevel.ParkingLot()  # the writer waits here for frames
        self._writing = 0  # octets of the send_all in progress (the writer's, or a reader's flush)
        self._room_lot = trio.lowlevel.ParkingLot()  # senders wait here for buffer room
        self._pending: dict[int, Waiting | Callback] = {}
        self._deadlines: list[tuple[float, int]] = []
        # a connection that passes its peers' frames on takes its own opaques far from theirs
        # (clients count from 0), so that one it takes does not push theirs to copies after it
        self._opaques = itertools.count(OWN_OPAQUES_FROM if keep_frames else 1)
        self._inflight = self._inflight_bytes = 0
        self._nursery: trio.Nursery | None = None
        self.closed = trio.Event()
        self._frames_received = self._frames_sent = self._sends = 0
        self.attributes: dict[str, object] = {}  # what the processor remembers about the peer

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the connection until either side closes it."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                nursery.start_soon(self._sweeper)
                task_status.started()
                await self._reader()
                nursery.cancel_scope.cancel()
        finally:
            self.closed.set()
            self._room_lot.unpark_all()
            pending, self._pending = self._pending, {}
            for each in pending.values():
                each.settle(ConnectionClosedError(f"connection to {self.remote} closed"))
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    def close(self) -> None:
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(self._frames_received, self._frames_sent, self._sends, self._inflight,
                                    len(self._pending), self._out_frames)

    # ------------------------------------------------------------------ reading

    async def _reader(self) -> None:
        decoder = FrameDecoder(self.frame_size_max, keep_frames=self.keep_frames)
        touched = Touched()
        TOUCHED.set(touched)
        hold = LargeFrameHold(self.large_frames, self.limits) if self.large_frames is not None else None
        try:
            while True:
                data = await self._receive(hold.deadline if hold is not None else math.inf)
                if not data:
                    return
                while True:  # the frames of one read, a batch at a time (a flood is not all parsed at once)
                    try:
                        items = decoder.feed(data, FRAMES_PER_BATCH)
                    except FrameError as exc:
                        log.warning("%s: closing connection: %s", self.remote, exc)
                        return
                    data = b""
                    # before the completed frames are handled (that may wait on a slow peer)
                    if hold is not None and not hold.follow(decoder.partial_frame_bytes, trio.current_time()):
                        log.warning("%s: closing connection: a %d-byte frame would pass the node's budget for "
                                    "large frames in progress", self.remote, decoder.partial_frame_bytes)
                        return
                    touched.open = True
                    try:
                        handled = await self._handle(items)
                    finally:
                        touched.open = False
                    while touched:
                        await touched.pop().flush()
                    if not handled:
                        return
                    if len(items) < FRAMES_PER_BATCH:
                        break
                    await trio.lowlevel.checkpoint()  # the node's other connections have their turn
                    await self._room_for_answers()
        finally:
            if hold is not None:
                hold.release()

    async def _room_for_answers(self) -> None:
        """A serving connection waits while its answers fill the out buffer (the peer is not
        reading them); a client's always reads on: its answers drain the other side."""
        while self.serving and len(self._out) + self._writing >= self._out_max and not self.closed.is_set():
            self._writer_lot.unpark()
            await self._room_lot.park()

    async def _receive(self, deadline: float) -> bytes | bytearray:
        """The next bytes read, b"" when the connection is over (closed, or a large frame late)."""
        await self._room_for_answers()
        try:
            if deadline == math.inf:  # no cancel scope per read when no large frame is due
                return await self.stream.receive_some(RECEIVE_BYTES)
            with trio.move_on_at(deadline):
                return await self.stream.receive_some(RECEIVE_BYTES)
            log.warning("%s: closing connection: a large frame not complete within %.0f s", self.remote,
                        self.limits.large_frame_s)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        return b""

    async def _handle(self, items: list[RemotingCommand | HeaderError]) -> bool:
        """Answer or dispatch what one read completed; False when the connection must close."""
        self._frames_received += len(items)
        arrived = perf_counter() if self.latency is not None else 0.0  # one clock read per read
        for item in items:
            if isinstance(item, HeaderError):
                if item.opaque is None:
                    log.warning("%s: closing connection: unusable header: %s", self.remote, item)
                    return False
                if "bad header logged" not in self.attributes:  # once: a stream of them would fill the log
                    self.attributes["bad header logged"] = True
                    log.warning("%s: bad request header (further ones are answered, not logged): %s", self.remote,
                                item)
                await self._send_frame(RemotingCommand(
                    code=ResponseCode.SYSTEM_ERROR, opaque=item.opaque, flag=1,
                    remark=f"bad request header: {item}", language="JAVA"))
            elif item.is_response:
                pending = self._pending.pop(item.opaque, None)
                if pending is not None:
                    pending.settle(item)
            else:
                item.arrived = arrived
                await self._dispatch(item)
        return True

    async def _dispatch(self, request: RemotingCommand) -> None:
        if self.processor is None:
            await self.reply(request, request.reply(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {request.code} not supported"))
            return
        # refused before the processor runs: a handler may act (store a message) before it
        # hands back the part that waits, so refusing that part afterwards would be too late
        busy = self._busy(request) if self._inflight else None  # an idle connection is never busy
        if busy:
            await self.reply(request, request.reply(ResponseCode.SYSTEM_BUSY, f"[REJECTREQUEST]system busy: {busy}"))
            return
        try:
            if self._rpc_hooks:
                assert self.plugins is not None
                self.plugins.rpc_before_request(self, request)
            result = self.processor.process(request, self)
        except RpcRejected as exc:
            result = request.reply(exc.code, exc.remark)
        except Exception as exc:  # a processor bug must not take the connection down
            log.exception("%s: request %d failed", self.remote, request.code)
            result = request.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if type(result) is RemotingCommand:
            await self.reply(request, result)
        elif result is ANSWER_LATER:
            self._inflight += 1
            self._inflight_bytes += request_bytes(request)
        elif inspect.isawaitable(result):
            size = request_bytes(request)
            self._inflight += 1
            self._inflight_bytes += size
            assert self._nursery is not None
            self._nursery.start_soon(self._finish, request, result, size)
        elif result is not None:
            await self.reply(request, result)  # type: ignore[arg-type]

    def _busy(self, request: RemotingCommand) -> str | None:
        """Why one more request cannot be handled now while others are in flight (None: it can)."""
        limits = self.limits
        if self._inflight >= limits.inflight_requests_max:
            return f"{self._inflight} requests of this connection in flight (limit {limits.inflight_requests_max})"
        if self._inflight_bytes + request_bytes(request) > limits.inflight_bytes_max:
            return (f"{self._inflight_bytes} bytes of this connection's requests in flight "
                    f"(limit {limits.inflight_bytes_max})")
        return None

    async def _finish(self, request: RemotingCommand, pending: Awaitable[RemotingCommand | None], size: int) -> None:
        try:
            response = await pending
        except Exception as exc:
            log.exception("%s: request %d failed", self.remote, request.code)
            response = request.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            self._inflight -= 1
            self._inflight_bytes -= size
        if response is None or request.flag & FLAG_ONEWAY or self.closed.is_set():
            return
        if self.serving:  # queued at once: the reader stops while answers wait, no task parks holding one
            self._answered(request, response)
            self._queue_frame(response)
        else:
            await self.reply(request, response)

    async def reply(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """Send ``response`` unless the request was a real oneway."""
        if request.flag & FLAG_ONEWAY:
            return
        self._answered(request, response)
        await self._send_frame(response)

    def answer(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """Answer ``request``, for which the processor returned :data:`ANSWER_LATER` (None: no
        answer, as for a oneway); dropped when the connection closed meanwhile."""
        self._inflight -= 1
        self._inflight_bytes -= request_bytes(request)
        if response is None or request.flag & FLAG_ONEWAY or self.closed.is_set():
            return
        self._answered(request, response)
        self._queue_frame(response)

    def answer_frame(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """:meth:`answer` with ``response``'s frame as it arrived (its opaque is already the
        request's): nothing encoded again."""
        self._inflight -= 1
        self._inflight_bytes -= request_bytes(request)
        if request.flag & FLAG_ONEWAY or self.closed.is_set():
            return
        self._answered(request, response)
        self._queue_relayed(response.frame)

    def _answered(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """What follows every answer: its latency counted, the plugins' after-response hook."""
        if self.latency is not None:
            self.latency.observe((request.code, response.code), perf_counter() - request.arrived)
        if self._rpc_hooks:
            assert self.plugins is not None
            self.plugins.rpc_after_response(self, request, response)

    # ------------------------------------------------------------------ writing

    def _queue_relayed(self, frame: bytes | bytearray) -> None:
        """Queue a relayed frame: written by the reader that relays it once it has handled its
        read (several frames in one write), else by the writer."""
        self._out += frame
        self._out_frames += 1
        touched = TOUCHED.get()
        if touched is not None and touched.open:
            if self not in touched:
                touched.append(self)
        elif self._writer_lot:
            self._writer_lot.unpark()

    async def flush(self) -> None:
        """Write what is queued from the calling task, unless a write is in progress (the
        writer then takes it)."""
        if not self._out:
            return
        if self._writing:
            if self._writer_lot:
                self._writer_lot.unpark()
            return
        data, frames = self._out, self._out_frames
        self._out, self._out_frames = bytearray(), 0
        self._writing = len(data)
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            self.close()
            return
        finally:
            self._writing = 0
        self._frames_sent += frames
        self._sends += 1
        if self._out and self._writer_lot:  # queued while this write went on
            self._writer_lot.unpark()

    def _queue_frame(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd`` for the writer without waiting for buffer room: answers (a serving
        reader stops while they wait) and relayed requests (bounded by the peer's in-flight limits)."""
        out = self._out
        for part in frame_parts(cmd):
            out += part
        self._out_frames += 1
        if self._writer_lot:
            self._writer_lot.unpark()

    async def _send_frame(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd`` for the writer; waits only while the outgoing buffer is full."""
        while len(self._out) + (self._writing if self.serving else 0) >= self._out_max and not self.closed.is_set():
            await self._room_lot.park()
        if self.closed.is_set():
            raise ConnectionClosedError(f"connection to {self.remote} is closed")
        self._queue_frame(cmd)

    async def _writer(self) -> None:
        try:
            while True:
                while not self._out or self._writing:
                    await self._writer_lot.park()
                data, frames = self._out, self._out_frames
                self._out, self._out_frames = bytearray(), 0
                self._writing = len(data)
                try:
                    await self.stream.send_all(data)
                finally:
                    self._writing = 0
                self._frames_sent += frames
                self._sends += 1
                if self._room_lot:
                    self._room_lot.unpark_all()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close()

    async def _sweeper(self) -> None:
        """Fail requests whose deadline passed (one heap for all, not a timer each)."""
        heap = self._deadlines
        while True:
            await trio.sleep(SWEEP_S)
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                _, opaque = heapq.heappop(heap)
                pending = self._pending.pop(opaque, None)
                if pending is not None:
                    pending.settle(RemotingTimeoutError(f"no response from {self.remote} in time"))

    # ------------------------------------------------------------------ requests

    async def request(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send ``cmd`` and wait for its response."""
        if self.closed.is_set():
            raise ConnectionClosedError(f"connection to {self.remote} is closed")
        if len(self._pending) >= PENDING_MAX:
            raise RemotingError(f"{PENDING_MAX} requests already pending on {self.remote}")
        cmd.opaque = opaque = self._next_opaque()
        cmd.flag &= ~1
        deadline = trio.current_time() + timeout_s
        pending = Waiting(deadline)
        self._pending[opaque] = pending
        heapq.heappush(self._deadlines, (deadline, opaque))
        try:
            await self._send_frame(cmd)
            await pending.event.wait()
        finally:
            self._pending.pop(opaque, None)
        if pending.response is not None:
            if self._rpc_hooks:
                assert self.plugins is not None
                self.plugins.rpc_after_response(self, cmd, pending.response)
            return pending.response
        if self.closed.is_set():
            raise ConnectionClosedError(f"connection to {self.remote} closed during request {cmd.code}")
        raise RemotingTimeoutError(f"no response from {self.remote} to request {cmd.code} within {timeout_s}s")

    def request_then(self, cmd: RemotingCommand, timeout_s: float, then: Callable[[Outcome], None]) -> None:
        """Send ``cmd`` now and call ``then`` once with its response, or with the error
        (closed, timed out) that stands in for one. Raises at once when it cannot be sent."""
        if self.closed.is_set():
            raise ConnectionClosedError(f"connection to {self.remote} is closed")
        if len(self._pending) >= PENDING_MAX:
            raise RemotingError(f"{PENDING_MAX} requests already pending on {self.remote}")
        if self._rpc_hooks:
            assert self.plugins is not None
            then = self._hooked(cmd, then, self.plugins)
        cmd.opaque = opaque = self._next_opaque()
        cmd.flag &= ~1
        self._pending[opaque] = Callback(then, cmd.code)
        heapq.heappush(self._deadlines, (trio.current_time() + timeout_s, opaque))
        self._queue_frame(cmd)

    def pass_then(self, request: RemotingCommand, timeout_s: float, then: Callable[[Outcome], None]) -> bool:
        """Send ``request``'s frame (:attr:`RemotingCommand.frame`) as it arrived, its opaque
        kept, and call ``then`` as :meth:`request_then` does. False, and nothing sent, when its
        opaque is pending here already: the caller sends a copy with an opaque of this side's."""
        opaque = request.opaque
        if opaque in self._pending or not request.frame or self.closed.is_set() or len(self._pending) >= PENDING_MAX:
            return False
        if self._rpc_hooks:
            assert self.plugins is not None
            then = self._hooked(request, then, self.plugins)
        self._pending[opaque] = Callback(then, request.code)
        heapq.heappush(self._deadlines, (trio.current_time() + timeout_s, opaque))
        self._queue_relayed(request.frame)
        return True

    def _next_opaque(self) -> int:
        """An opaque no pending request has (one passed through may hold any)."""
        opaque = next(self._opaques) & 0x7FFFFFFF
        while opaque in self._pending:
            opaque = next(self._opaques) & 0x7FFFFFFF
        return opaque

    def _hooked(self, cmd: RemotingCommand, then: Callable[[Outcome], None],
                plugins: RpcHooks) -> Callable[[Outcome], None]:
        def hooked(outcome: Outcome) -> None:
            if isinstance(outcome, RemotingCommand):
                plugins.rpc_after_response(self, cmd, outcome)
            then(outcome)
        return hooked

    async def oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` expecting no response."""
        cmd.opaque = self._next_opaque()
        cmd.flag |= FLAG_ONEWAY
        await self._send_frame(cmd)
