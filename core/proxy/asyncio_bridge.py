"""An asyncio event loop in a thread beside trio, and calls from it into trio that block nobody.

grpcio's server (grpc.aio) runs on asyncio; the proxy's core (the cluster view, the upstream
connections, the forwarding) runs on trio. :class:`TrioPortal` lets an asyncio coroutine await
a trio coroutine: the trio side starts it as a task in the proxy's nursery (through a trio
token, so any thread may ask) and hands the outcome back with ``call_soon_threadsafe``. No thread
waits in between, so a thousand long-polling receives cost a thousand tasks, not a thousand
threads; cancelling the asyncio side (a client that went away) cancels the trio task.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")


class AsyncioThread:
    """A daemon thread running an asyncio loop until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def start(self) -> None:
        self._thread.start()

    async def run(self, coro: Awaitable[T]) -> T:
        """Await ``coro`` on the asyncio loop from trio, without holding a trio worker thread busy
        for longer than the hand-over."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()
        future.add_done_callback(lambda _: token.run_sync_soon(done.set))
        await done.wait()
        return future.result()

    def stop(self) -> None:
        """Stop the loop (after its pending callbacks) and wait for the thread to end."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)


class TrioPortal:
    """Runs trio coroutines for asyncio callers (see the module's docstring)."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._token = trio.lowlevel.current_trio_token()

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """From asyncio: ``await fn(*args)`` on trio; its result, or its exception raised here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        scope = trio.CancelScope()

        def settle(outcome: Callable[[], None]) -> None:
            if not future.done():  # the asyncio side may have been cancelled meanwhile
                outcome()

        async def on_trio() -> None:
            with scope:
                try:
                    result = await fn(*args)
                except Exception as exc:  # handed to the caller, who answers the client
                    loop.call_soon_threadsafe(settle, functools.partial(future.set_exception, exc))
                    return
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))
                return
            loop.call_soon_threadsafe(settle, lambda: future.set_exception(ConnectionAbortedError("proxy stopping")))

        self._token.run_sync_soon(self._nursery.start_soon, on_trio)
        try:
            return await future
        except asyncio.CancelledError:
            self._token.run_sync_soon(scope.cancel)
            raise

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        """From any thread: run the plain function ``fn(*args)`` on trio soon."""
        self._token.run_sync_soon(fn, *args)
