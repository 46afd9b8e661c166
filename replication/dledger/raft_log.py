"""The raft log as the core sees it: entries by index, appended and truncated in memory (or in
mapped files), made durable only by an explicit sync the driver performs.

:class:`MemoryLog` is the implementation the simulator and unit tests use; its
:meth:`MemoryLog.crash` drops what was never synced, as a power cut would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from formats.dledger import MAGIC_NOOP, MAGIC_NORMAL


@dataclass(frozen=True, slots=True)
class Entry:
    """One raft entry: its place, the term that wrote it, and the wrapped bytes."""

    index: int
    term: int
    body: bytes
    magic: int = MAGIC_NORMAL

    @property
    def is_noop(self) -> bool:
        return self.magic == MAGIC_NOOP


def up_to_bytes(entries: Iterable[Entry], bytes_max: int) -> list[Entry]:
    """The first of ``entries``, then as many more as fit ``bytes_max`` of bodies in all."""
    out: list[Entry] = []
    size = 0
    for e in entries:
        if out and size + len(e.body) > bytes_max:
            break
        out.append(e)
        size += len(e.body)
    return out


class RaftLog(Protocol):
    """What the core reads and changes; writes are visible at once and durable after sync."""

    @property
    def first_index(self) -> int: ...  # -1 when empty
    @property
    def last_index(self) -> int: ...  # -1 when empty
    @property
    def last_term(self) -> int: ...  # -1 when empty

    def term_at(self, index: int) -> int | None:
        """The term of entry ``index``; None when the log does not hold it."""

    def entry(self, index: int) -> Entry | None: ...

    def entries(self, start: int, count_max: int, bytes_max: int) -> list[Entry]:
        """Consecutive entries from ``start``: at least one (when held), then up to the limits."""

    def append(self, entries: list[Entry]) -> None:
        """Append entries continuing the log (the first one's index is last_index + 1)."""

    def truncate_after(self, index: int) -> int:
        """Drop every entry after ``index``; returns how many were dropped."""


class MemoryLog:
    """An in-memory :class:`RaftLog` that remembers what was last synced."""

    def __init__(self, entries: list[Entry] | None = None) -> None:
        self._entries: list[Entry] = list(entries or [])
        self._durable: tuple[Entry, ...] = tuple(self._entries)  # what survives a crash
        self.changed_from = 0  # the lowest index appended or cut since a checker last looked

    @property
    def first_index(self) -> int:
        return 0 if self._entries else -1

    @property
    def last_index(self) -> int:
        return len(self._entries) - 1

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else -1

    @property
    def dirty(self) -> bool:
        return len(self._durable) != len(self._entries) or (
            bool(self._entries) and self._durable[-1] is not self._entries[-1])

    def term_at(self, index: int) -> int | None:
        return self._entries[index].term if 0 <= index < len(self._entries) else None

    def entry(self, index: int) -> Entry | None:
        return self._entries[index] if 0 <= index < len(self._entries) else None

    def entries(self, start: int, count_max: int, bytes_max: int) -> list[Entry]:
        return up_to_bytes(self._entries[max(start, 0): max(start, 0) + count_max], bytes_max)

    def append(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.index != len(self._entries):
                raise ValueError(f"entry {e.index} does not continue a log ending at {self.last_index}")
            self._entries.append(e)
        if entries:
            self.changed_from = min(self.changed_from, entries[0].index)

    def truncate_after(self, index: int) -> int:
        dropped = len(self._entries) - (index + 1)
        if dropped <= 0:
            return 0
        del self._entries[index + 1:]
        self.changed_from = min(self.changed_from, index + 1)
        return dropped

    def snapshot(self) -> tuple[Entry, ...]:
        """The log as it is now: what a sync starting now makes durable."""
        return tuple(self._entries)

    def make_durable(self, snapshot: tuple[Entry, ...]) -> None:
        """A sync that began at ``snapshot`` finished."""
        self._durable = snapshot

    def sync(self) -> int:
        """Make the log as it is now durable; returns its last index."""
        if self.dirty:
            self._durable = tuple(self._entries)
        return self.last_index

    def crash(self) -> None:
        """Back to the last synced state: unsynced appends and truncations are lost."""
        self._entries = list(self._durable)
        self.changed_from = 0

    @property
    def durable(self) -> tuple[Entry, ...]:
        return self._durable

    def all(self) -> list[Entry]:
        return list(self._entries)
