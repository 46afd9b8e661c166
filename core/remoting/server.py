"""The remoting server: accepts connections and runs each one's reader and writer."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from core.plugin_manager import PluginHost
from core.remoting.command import FRAME_SIZE_MAX_DEFAULT
from core.remoting.connection import Connection, Processor

log = logging.getLogger(__name__)


async def serve_remoting(
    processor: Processor,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    frame_size_max: int = FRAME_SIZE_MAX_DEFAULT,
    plugins: PluginHost | None = None,
    on_close: Callable[[Connection], None] | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``processor`` on ``host:port`` until cancelled; reports the bound port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]

    async def handle(stream: trio.SocketStream) -> None:
        try:
            peer = stream.socket.getpeername()
            remote = f"{peer[0]}:{peer[1]}"
        except OSError:
            remote = "?"
        conn = Connection(stream, processor, remote=remote, frame_size_max=frame_size_max,
                          plugins=plugins)
        try:
            await conn.run()
        finally:
            if on_close is not None:
                on_close(conn)

    task_status.started(bound)
    await trio.serve_listeners(handle, listeners)
