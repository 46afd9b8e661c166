"""A nursery for context managers whose callers expect their own exceptions back."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio


@contextlib.asynccontextmanager
async def open_unwrapped_nursery() -> AsyncIterator[trio.Nursery]:
    """Like ``trio.open_nursery``, but a lone exception propagates as itself rather than inside
    an ExceptionGroup, so ``except StoreError`` around a context manager built on it works."""
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
