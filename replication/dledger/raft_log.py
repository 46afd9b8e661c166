"""The raft log as the core sees it: entries by index, appended and truncated in memory (or in
mapped files), made durable only by an explicit sync the driver performs.

:class:`MemoryLog` is the implementation the simulator and unit tests use; its
:meth:`MemoryLog.crash` drops what was never synced, as a power cut would.

Runs of entries travel as any ``Sequence[Entry]``: a list from :class:`MemoryLog`, or
:class:`PackedEntries`, the bytes of consecutive entries as the data files hold them, which a
disk log reads in one piece, a push carries unchanged and a follower with the same layout
writes in one piece.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, overload

from formats import dledger
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


class PackedEntries(Sequence[Entry]):
    """Consecutive entries in the data-file layout (formats.dledger), back to back:

    ```
     raw: [48-byte header][body][48-byte header][body] ...   indexes first, first + 1, ...
     header pos fields: where the sender's log placed each entry (contiguous when
     ``contiguous``: each entry starts where the previous one ended)
    ```
    Entries are decoded only when indexed; the headers are checked once, by :meth:`parse`.
    """

    __slots__ = ("_magics", "_starts", "_terms", "contiguous", "first_index", "raw")

    def __init__(self, raw: bytes | memoryview, first_index: int, starts: list[int], terms: list[int],
                 magics: list[int], contiguous: bool) -> None:
        self.raw = raw
        self.first_index = first_index
        self._starts = starts  # where each entry begins in raw
        self._terms = terms
        self._magics = magics
        self.contiguous = contiguous

    @classmethod
    def parse(cls, raw: bytes | memoryview) -> PackedEntries:
        """Check and index ``raw``; raises ValueError naming what is wrong (a header that is
        not an entry, an entry running past the end, indexes that are not consecutive)."""
        starts: list[int] = []
        terms: list[int] = []
        magics: list[int] = []
        first = -1
        contiguous = True
        pos, end = 0, len(raw)
        next_pos = None
        fields = dledger.header_fields
        while pos < end:
            magic, size, index, term, placed, *_ = fields(raw, pos)  # FormatError is a ValueError
            if pos + size > end:
                raise ValueError(f"entry {index} runs past the end of the run")
            if not starts:
                first = index
            elif index != first + len(starts):
                raise ValueError(f"entry {index} does not follow entry {first + len(starts) - 1}")
            if next_pos is not None and placed != next_pos:
                contiguous = False
            next_pos = placed + size
            starts.append(pos)
            terms.append(term)
            magics.append(magic)
            pos += size
        return cls(raw, first, starts, terms, magics, contiguous)

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> PackedEntries: ...

    def __getitem__(self, i: int | slice) -> Entry | PackedEntries:
        if isinstance(i, slice):
            lo, hi = _span(i, len(self._starts))
            if lo >= hi:
                return PackedEntries(b"", -1, [], [], [], True)
            end = self._starts[hi] if hi < len(self._starts) else len(self.raw)
            base = self._starts[lo]
            view = memoryview(self.raw)[base:end]
            return PackedEntries(view, self.first_index + lo, [s - base for s in self._starts[lo:hi]],
                                 self._terms[lo:hi], self._magics[lo:hi], self.contiguous)
        i = _position(i, len(self._starts))
        head = dledger.decode_header(self.raw, self._starts[i])
        at = self._starts[i] + dledger.HEADER_SIZE
        return Entry(head.raft_index, head.term, bytes(self.raw[at: at + head.body_len]), head.magic)

    def __iter__(self) -> Iterator[Entry]:
        return (self[i] for i in range(len(self._starts)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedEntries({self.first_index}..{self.last_index}, {len(self.raw)} bytes)"

    @property
    def last_index(self) -> int:
        return self.first_index + len(self._starts) - 1

    def term(self, i: int) -> int:
        """The term of the ``i``-th entry of the run."""
        return self._terms[i]

    def heads(self) -> list[tuple[int, int, int, int]]:
        """(start in raw, size, term, magic) of each entry."""
        ends = [*self._starts[1:], len(self.raw)]
        return [(s, e - s, t, m) for s, e, t, m in zip(self._starts, ends, self._terms, self._magics)]

    @property
    def first_pos(self) -> int:
        """Where the sender's log placed the first entry (its header's pos field)."""
        return dledger.decode_header(self.raw, 0).pos if self._starts else -1

    @property
    def body_bytes(self) -> int:
        return len(self.raw) - dledger.HEADER_SIZE * len(self._starts)


class BodyRun(Sequence[Entry]):
    """A leader's proposal: normal entries ``first_index``, ``first_index + 1``, ... of one
    ``term``, held as their bodies; an :class:`Entry` is made only when one is indexed, so a
    disk log encodes the run in one pass."""

    __slots__ = ("bodies", "first_index", "term")

    def __init__(self, first_index: int, term: int, bodies: list[bytes]) -> None:
        self.first_index = first_index
        self.term = term
        self.bodies = bodies

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> BodyRun: ...

    def __getitem__(self, i: int | slice) -> Entry | BodyRun:
        if isinstance(i, slice):
            lo, hi = _span(i, len(self.bodies))
            return BodyRun(self.first_index + lo, self.term, self.bodies[lo:hi])
        i = _position(i, len(self.bodies))
        return Entry(self.first_index + i, self.term, self.bodies[i])

    def __iter__(self) -> Iterator[Entry]:
        index, term = self.first_index, self.term
        return (Entry(index + i, term, body) for i, body in enumerate(self.bodies))

    def __repr__(self) -> str:
        return f"BodyRun({self.first_index}..{self.first_index + len(self.bodies) - 1}, term {self.term})"


def _span(s: slice, n: int) -> tuple[int, int]:
    """A slice of a run of ``n`` entries as (lo, hi): runs are sliced without a step."""
    lo, hi, step = s.indices(n)
    if step != 1:
        raise ValueError("a run of entries is sliced without a step")
    return lo, hi


def _position(i: int, n: int) -> int:
    """Index ``i`` of a run of ``n`` entries, counted from the start."""
    at = i + n if i < 0 else i
    if not 0 <= at < n:
        raise IndexError(i)
    return at


def body_bytes(entries: Sequence[Entry]) -> int:
    """The bytes of the entries' bodies."""
    if isinstance(entries, PackedEntries):
        return entries.body_bytes
    return sum(len(e.body) for e in entries)


def term_of(entries: Sequence[Entry], i: int) -> int:
    """The term of ``entries[i]``, without decoding a packed entry."""
    return entries.term(i) if isinstance(entries, PackedEntries) else entries[i].term


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
    """What the core reads and changes; writes are visible at once and durable after sync.

    Indexes are dense from 0; a log may begin later (``first_index``): the entries before it
    were committed and deleted by retention (:meth:`compact`), or never held because the log
    was installed from a leader's retained files (:meth:`reset`)."""

    @property
    def first_index(self) -> int: ...  # the first entry held or to be held (0 unless compacted or installed)
    @property
    def last_index(self) -> int: ...  # first_index - 1 when it holds no entry
    @property
    def last_term(self) -> int: ...  # the term of last_index (-1 for a log that never held one)
    @property
    def install_end(self) -> int: ...  # the leader's commit index when the log was installed (-1: never)

    def term_at(self, index: int) -> int | None:
        """The term of entry ``index`` (also of ``first_index - 1``); None when unknown."""

    def entry(self, index: int) -> Entry | None: ...

    def entries(self, start: int, count_max: int, bytes_max: int) -> Sequence[Entry]:
        """Consecutive entries from ``start``: at least one (when held), then up to the limits."""

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries continuing the log (the first one's index is last_index + 1)."""

    def truncate_after(self, index: int) -> int:
        """Drop every entry after ``index`` (at least ``first_index - 1``); returns how many."""

    def reset(self, start: int, prev_term: int, install_end: int) -> None:
        """Drop every entry: the log continues at ``start`` (entry ``start - 1`` was of
        ``prev_term``), as the leader's retained log does. Durable after the next sync."""


class MemoryLog:
    """An in-memory :class:`RaftLog` that remembers what was last synced."""

    def __init__(self, entries: list[Entry] | None = None) -> None:
        self._start = 0  # the index of _entries[0]
        self._prev_term = -1  # the term of entry _start - 1
        self._install_end = -1
        self._entries: list[Entry] = list(entries or [])
        self._durable = _LogImage(0, -1, -1, tuple(self._entries))  # what survives a crash
        self.changed_from = 0  # the lowest index appended or cut since a checker last looked

    @property
    def first_index(self) -> int:
        return self._start

    @property
    def last_index(self) -> int:
        return self._start + len(self._entries) - 1

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self._prev_term

    @property
    def install_end(self) -> int:
        return self._install_end

    @property
    def dirty(self) -> bool:
        d = self._durable
        if (d.start, d.prev_term, d.install_end, len(d.entries)) != (self._start, self._prev_term,
                                                                     self._install_end, len(self._entries)):
            return True
        return bool(self._entries) and d.entries[-1] is not self._entries[-1]

    def term_at(self, index: int) -> int | None:
        at = index - self._start
        if 0 <= at < len(self._entries):
            return self._entries[at].term
        if at == -1 and index >= 0:
            return self._prev_term
        return None

    def entry(self, index: int) -> Entry | None:
        at = index - self._start
        return self._entries[at] if 0 <= at < len(self._entries) else None

    def entries(self, start: int, count_max: int, bytes_max: int) -> list[Entry]:
        at = start - self._start
        if at < 0:
            return []
        return up_to_bytes(self._entries[at: at + count_max], bytes_max)

    def append(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            if e.index != self.last_index + 1:
                raise ValueError(f"entry {e.index} does not continue a log ending at {self.last_index}")
            self._entries.append(e)
        if entries:
            self.changed_from = min(self.changed_from, entries[0].index)

    def truncate_after(self, index: int) -> int:
        if index < self._start - 1:
            raise ValueError(f"cannot cut at {index}: entries before {self._start} were compacted")
        dropped = self.last_index - index
        if dropped <= 0:
            return 0
        del self._entries[index + 1 - self._start:]
        self.changed_from = min(self.changed_from, index + 1)
        return dropped

    def reset(self, start: int, prev_term: int, install_end: int) -> None:
        self._start, self._prev_term, self._install_end = start, prev_term, install_end
        self._entries = []
        self.changed_from = min(self.changed_from, start)

    def compact(self, upto: int) -> None:
        """Delete entries through ``upto`` (committed and applied; on disk already): durable
        at once, as retention deletes files only after recording the log's new start."""
        if upto < self._start:
            return
        if upto > self._durable.last_index:
            raise ValueError(f"cannot compact through {upto}: the disk holds entries up to {self._durable.last_index}")
        self._prev_term = self.term_at(upto)  # type: ignore[assignment]
        del self._entries[: upto + 1 - self._start]
        self._start = upto + 1
        self._durable = self._durable.compacted(upto)

    def snapshot(self) -> _LogImage:
        """The log as it is now: what a sync starting now makes durable."""
        return _LogImage(self._start, self._prev_term, self._install_end, tuple(self._entries))

    def make_durable(self, snapshot: _LogImage) -> None:
        """A sync that began at ``snapshot`` finished (compactions since then stay)."""
        durable = self._durable
        self._durable = snapshot if snapshot.start >= durable.start else snapshot.compacted(durable.start - 1)

    def sync(self) -> int:
        """Make the log as it is now durable; returns its last index."""
        if self.dirty:
            self._durable = self.snapshot()
        return self.last_index

    def process_crash(self, trusted_through: int) -> None:
        """The process dies, the machine does not: the page cache keeps every write."""

    def crash(self) -> None:
        """Back to the last synced state: unsynced appends and truncations are lost."""
        d = self._durable
        self._start, self._prev_term, self._install_end, self._entries = d.start, d.prev_term, d.install_end, list(d.entries)
        self.changed_from = 0

    @property
    def durable(self) -> _LogImage:
        return self._durable

    def all(self) -> list[Entry]:
        """The entries held, from ``first_index``."""
        return list(self._entries)


@dataclass(frozen=True, slots=True)
class _LogImage:
    """A :class:`MemoryLog` as a sync saw it (or as the disk holds it)."""

    start: int
    prev_term: int
    install_end: int
    entries: tuple[Entry, ...]

    @property
    def last_index(self) -> int:
        return self.start + len(self.entries) - 1

    def entry(self, index: int) -> Entry | None:
        at = index - self.start
        return self.entries[at] if 0 <= at < len(self.entries) else None

    def compacted(self, upto: int) -> _LogImage:
        """This image with entries through ``upto`` deleted."""
        if upto < self.start:
            return self
        keep = self.entries[upto + 1 - self.start:]
        prev = self.entries[upto - self.start].term if upto <= self.last_index else self.prev_term
        return _LogImage(upto + 1, prev, self.install_end, keep)
