"""A fault-injecting TCP proxy for drills: ``python -m mqctl.chaos.fault_proxy LISTEN UPSTREAM``.

It forwards every connection made to LISTEN to UPSTREAM, byte for byte, and takes commands,
one a line, on stdin, answering each with a line on stdout:

```
 delay MS        hold every chunk MS milliseconds before passing it on (both ways; 0: none)
 cut             close every connection and refuse new ones (a partition)
 heal            accept connections again
 cut-from IP,..  the same, only for connections coming from those addresses
 heal-from IP,.. accept those addresses again
 stats           connections accepted and bytes passed
```

Put it in front of a broker by advertising its address (``advertise`` in the broker's
``[[brokers]]`` table): clients then reach the broker only through it. A delay is latency,
not a throttle: chunks stay in order and several are on their way at once. Each direction
holds at most ``CHUNKS_MAX`` chunks; a full one stops reading, as a slow link would.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import trio

from core.addresses import split_address

CHUNK_BYTES = 64 * 1024
CHUNKS_MAX = 256


@dataclass
class ProxyState:
    delay_s: float = 0.0
    cut: bool = False
    cut_from: set[str] = field(default_factory=set)  # source addresses refused
    accepted: int = 0
    bytes_passed: int = 0


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = split_address(upstream)
        self.state = ProxyState()
        self._open: dict[trio.CancelScope, str] = {}  # per connection: its source address

    async def serve(self, listen: str, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        host, port = split_address(listen)
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._handle, listeners)

    def cut(self) -> None:
        self.state.cut = True
        for scope in self._open:
            scope.cancel()

    def heal(self) -> None:
        self.state.cut = False

    def cut_from(self, sources: set[str]) -> None:
        """Refuse and drop connections from ``sources`` only (one side of a partition)."""
        self.state.cut_from |= sources
        for scope, source in self._open.items():
            if source in sources:
                scope.cancel()

    def heal_from(self, sources: set[str]) -> None:
        self.state.cut_from -= sources

    async def _handle(self, client: trio.SocketStream) -> None:
        async with client:
            try:
                source = str(client.socket.getpeername()[0])
            except OSError:
                return
            if self.state.cut or source in self.state.cut_from:
                return
            self.state.accepted += 1
            with trio.CancelScope() as scope:
                self._open[scope] = source
                try:
                    server = await trio.open_tcp_stream(*self.upstream)
                    async with server, trio.open_nursery() as nursery:
                        nursery.start_soon(self._pipe, client, server, nursery.cancel_scope)
                        nursery.start_soon(self._pipe, server, client, nursery.cancel_scope)
                except OSError:
                    pass  # the upstream is down: the client sees its connection closed
                finally:
                    self._open.pop(scope, None)

    async def _pipe(self, src: trio.SocketStream, dst: trio.SocketStream, both: trio.CancelScope) -> None:
        """Copy ``src`` to ``dst``, each chunk released ``delay_s`` after it arrived. Either side
        failing ends the connection both ways (errors are caught where they happen: a nursery
        would wrap them in an exception group)."""
        send, receive = trio.open_memory_channel[tuple[float, bytes]](CHUNKS_MAX)

        async def deliver() -> None:
            try:
                async for due, chunk in receive:
                    wait = due - trio.current_time()
                    if wait > 0:
                        await trio.sleep(wait)
                    await dst.send_all(chunk)
                    self.state.bytes_passed += len(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            finally:
                both.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(deliver)
                async with send:
                    try:
                        while chunk := await src.receive_some(CHUNK_BYTES):
                            await send.send((trio.current_time() + self.state.delay_s, chunk))
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
        finally:
            both.cancel()  # one side gone: the connection is over both ways


def apply(proxy: FaultProxy, line: str) -> str:
    """Carry out one command line; the answer line."""
    word, _, arg = line.strip().partition(" ")
    if word == "delay" and arg.strip().isdigit():
        proxy.state.delay_s = int(arg) / 1000
        return f"ok delay {int(arg)}"
    if word == "cut":
        proxy.cut()
        return "ok cut"
    if word == "heal":
        proxy.heal()
        return "ok heal"
    if word in ("cut-from", "heal-from") and arg.strip():
        sources = {a.strip() for a in arg.split(",") if a.strip()}
        (proxy.cut_from if word == "cut-from" else proxy.heal_from)(sources)
        return f"ok {word} {','.join(sorted(sources))}"
    if word == "stats":
        return f"ok accepted={proxy.state.accepted} bytes={proxy.state.bytes_passed}"
    return f"error: unknown command {line.strip()!r} (delay MS, cut, heal, cut-from IPS, heal-from IPS, stats)"


async def main(listen: str, upstream: str) -> None:
    proxy = FaultProxy(upstream)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve, listen)
        print(f"listening {port}", flush=True)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):
            print(apply(proxy, line), flush=True)
        nursery.cancel_scope.cancel()  # stdin closed: the drill is over


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m mqctl.chaos.fault_proxy LISTEN UPSTREAM")
    trio.run(main, sys.argv[1], sys.argv[2])
