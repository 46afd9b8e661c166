"""The remoting server: accepts connections and runs each one's reader and writer."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from core.remoting.command import FRAME_SIZE_MAX_DEFAULT
from core.remoting.connection import Connection, Processor, RpcHooks
from core.remoting.limits import DEFAULT_LIMITS, ByteBudget, ConnectionLimits
from core.remoting.processor import LatencyMeter

log = logging.getLogger(__name__)

# a served connection's answers not yet taken by the socket, before it stops reading its peer (a
# client that asks and never reads holds this much here, besides its requests in flight)
ANSWERS_BYTES_MAX = 1 << 20

REFUSAL_LOG_INTERVAL_S = 10.0  # refused connections are logged at most this often (a flood logs little)


async def serve_remoting(
    processor: Processor,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    frame_size_max: int = FRAME_SIZE_MAX_DEFAULT,
    plugins: RpcHooks | None = None,
    on_close: Callable[[Connection], None] | None = None,
    on_open: Callable[[Connection], None] | None = None,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    keep_frames: bool = False,
    latency: LatencyMeter | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``processor`` on ``host:port`` until cancelled; reports the bound port. Connections
    beyond ``limits.connections_max`` are closed as they arrive. ``keep_frames``: each request
    also carries its frame as it arrived (the proxy passes frames on). ``latency``: each answer's
    time from its request's read, by (request code, response code). ``on_open``: called with
    each accepted connection before its first frame is read (the raft port starts its
    membership deadline there)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    large_frames = ByteBudget(limits.large_frames_bytes_max)
    open_count = 0
    refused = 0
    refusal_logged = -REFUSAL_LOG_INTERVAL_S

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal open_count, refused, refusal_logged
        try:
            peer = stream.socket.getpeername()
            remote = f"{peer[0]}:{peer[1]}"
        except OSError:
            remote = "?"
        if open_count >= limits.connections_max:
            refused += 1
            if trio.current_time() - refusal_logged >= REFUSAL_LOG_INTERVAL_S:
                log.warning("refused %d connection(s) (latest from %s): %d open, the limit "
                            "(connections_max)", refused, remote, open_count)
                refused, refusal_logged = 0, trio.current_time()
            await trio.aclose_forcefully(stream)
            return
        open_count += 1
        conn = Connection(stream, processor, remote=remote, frame_size_max=frame_size_max,
                          limits=limits, large_frames=large_frames, plugins=plugins, keep_frames=keep_frames,
                          latency=latency, serving=True, out_buffer_max=ANSWERS_BYTES_MAX)
        if on_open is not None:
            on_open(conn)
        try:
            await conn.run()
        finally:
            open_count -= 1
            if on_close is not None:
                on_close(conn)

    task_status.started(bound)
    await trio.serve_listeners(handle, listeners)
