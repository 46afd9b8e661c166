"""The remoting client: one lazily opened connection per address, reused for everything."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio

from core.addresses import split_address
from core.errors import ConnectionClosedError, RemotingConnectError
from core.nursery import open_unwrapped_nursery
from core.remoting.command import FRAME_SIZE_MAX_DEFAULT, RemotingCommand
from core.remoting.connection import Connection, Processor, RpcHooks
from core.remoting.signing import Credentials, sign

CONNECT_TIMEOUT_S = 3.0

class RemotingClient:
    """Calls to many peers; server-initiated requests go to ``processor``.

    With ``credentials`` every request is signed for an ACL-enabled broker (name servers ignore
    the signature). With ``source_host`` every connection starts from that local address: a
    node listening on a loopback address of its own (127.0.0.12, say) is then recognisable by
    it to every peer it calls, which is how `mqctl chaos` partitions chosen nodes."""

    def __init__(self, nursery: trio.Nursery, processor: Processor | None = None, *,
                 plugins: RpcHooks | None = None, frame_size_max: int = FRAME_SIZE_MAX_DEFAULT,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, credentials: Credentials | None = None,
                 source_host: str | None = None) -> None:
        self._nursery = nursery
        self.credentials = credentials
        self.source_host = source_host
        self._processor = processor
        self._plugins = plugins
        self._frame_size_max = frame_size_max
        self._connect_timeout_s = connect_timeout_s
        self.keep_frames = False  # connections' commands carry their frames (the proxy passes them on)
        self._connections: dict[str, Connection] = {}
        self._locks: dict[str, trio.Lock] = {}

    def connected(self, address: str) -> Connection | None:
        """The open connection to ``address``, if there is one (no connecting)."""
        conn = self._connections.get(address)
        return conn if conn is not None and not conn.closed.is_set() else None

    async def connection(self, address: str) -> Connection:
        conn = self._connections.get(address)
        if conn is not None and not conn.closed.is_set():
            return conn
        lock = self._locks.setdefault(address, trio.Lock())
        async with lock:
            conn = self._connections.get(address)
            if conn is not None and not conn.closed.is_set():
                return conn
            host, port = split_address(address)
            try:
                with trio.fail_after(self._connect_timeout_s):
                    stream = await trio.open_tcp_stream(host, port, local_address=self.source_host)
            except (OSError, trio.TooSlowError) as exc:
                raise RemotingConnectError(f"cannot connect to {address}: {exc}") from None
            conn = Connection(stream, self._processor, remote=address, frame_size_max=self._frame_size_max,
                              plugins=self._plugins, keep_frames=self.keep_frames)
            await self._nursery.start(conn.run)
            self._connections[address] = conn
            return conn

    async def invoke(self, address: str, cmd: RemotingCommand, timeout_s: float = 3.0) -> RemotingCommand:
        """Request/response to ``address``."""
        conn = await self.connection(address)
        if self.credentials is not None:
            sign(cmd, self.credentials)
        return await conn.request(cmd, timeout_s)

    async def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(address)
        if self.credentials is not None:
            sign(cmd, self.credentials)
        await conn.oneway(cmd)

    def drop(self, address: str) -> None:
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()


@contextlib.asynccontextmanager
async def open_remoting_client(processor: Processor | None = None, **kwargs: object) -> AsyncIterator[RemotingClient]:
    async with open_unwrapped_nursery() as nursery:
        client = RemotingClient(nursery, processor, **kwargs)  # type: ignore[arg-type]
        try:
            yield client
        finally:
            client.close()


__all__ = ["ConnectionClosedError", "RemotingClient", "open_remoting_client"]
