"""The raft log on disk, in DLedger's layout (formats.dledger), so `mqctl dump` and `spark/`
read it as they read a DLedger-mode RocketMQ store.

```
 <store>/commitlog/<20-digit start>   data files: entries back to back, each
                                      [48-byte header][body: one message record], a file that
                                      cannot hold the next entry ends with [-1][remaining]
 <store>/dledger/index/<20-digit>     32-byte entries [magic][pos][size][index][term],
                                      entry i at byte i * 32
 <store>/dledger/currterm             currTerm=<n> / voteLeader=<id> (written before any answer)
 <store>/dledger/checkpoint           committedIndex=<n> (how far consumers may read)
 <store>/dledger/start                startIndex=<S> prevTerm=<t> startPos=<p> installEnd=<n>:
                                      the log begins at entry S (at data position p, -1: the
                                      next run received), entries before it deleted by
                                      retention or never held (installed from a leader)
```
A body is stored as given, or as ``place_body`` rewrites it for its position: a broker's store
passes :func:`replication.dledger.proposals.record_at`, which sets a message record's
PHYSICALOFFSET to its own position (entry pos + 48), so ConsumeQueue entries and offset msgIds
point into the data files. The log is a replicated log of any bytes (a state machine of other
state than messages runs on it too: tests/replication/test_raft_state_machine.py). Every node
of a group writes the same entries at the same positions (same segment size), so the bytes a
leader pushes are the bytes a follower stores.

Writes go to mapped files and become durable at :meth:`DiskRaftLog.sync`; recovery keeps the
longest prefix of index entries whose data headers agree with them and whose bodies match
their CRC. The ``start`` file is
written (and synced) before any file it makes obsolete is deleted.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path

from core.store.mapped_file import MappedFile, MappedFileQueue
from formats import dledger
from formats.errors import FormatError
from replication.dledger.raft_log import BodyRun, Entry, PackedEntries
from replication.dledger.state_files import read_properties, write_properties

INDEX_FILE_ENTRIES = 1 << 20  # 32 MiB index files
START_FILE = "start"
# How an entry's body learns where it lies: called with the body and its position in the data
# files, it returns the bytes to store (a message record carries its own physical offset:
# replication.dledger.proposals.record_at). The log itself knows nothing of what bodies hold.
BodyPlacer = Callable[[bytes, int], bytes]


class DiskRaftLog:
    """A :class:`replication.dledger.raft_log.RaftLog` over DLedger-layout files.

    One concept, 34 methods: the raft log on disk. Half are the RaftLog interface; the rest keep
    the data files, the index files and the start file in step through appends, padding,
    truncation, resets and syncs, which cannot be changed one without the others."""

    def __init__(self, store_dir: Path, segment_size: int, index_file_entries: int = INDEX_FILE_ENTRIES, *,
                 data: MappedFileQueue | None = None, base: int = 0, place_body: BodyPlacer | None = None) -> None:
        """``data`` is the data files' queue when a store shares it (its reads and this log's
        writes see one map); ``base`` is where the first entry goes (past the classic
        segments of a store that ran master-slave before: a segment start); ``place_body``
        rewrites a normal entry's body for the position it lands at (None: stored as given)."""
        if base % segment_size:
            raise ValueError(f"the raft data must begin at a segment start, not at {base}")
        self.segment_size = segment_size
        self.place_body = place_body
        self.base = base
        self.data = data if data is not None else MappedFileQueue(store_dir / "commitlog", segment_size)
        self.index = MappedFileQueue(store_dir / "dledger" / "index", index_file_entries * dledger.INDEX_ENTRY_SIZE)
        self._last = -1
        self._last_term = -1
        self.write_pos = 0  # where the next entry goes
        self.durable_index = -1  # synced through here (set by whoever syncs, cut by truncations)
        self.cuts = 0  # truncations so far: a sync that saw one cannot vouch for what it snapshotted
        self._start = 0  # the first entry held (or to be held)
        self._prev_term = -1  # the term of entry _start - 1
        self._install_end = -1
        self._start_pos = base  # where entry _start lies (-1: where the next run received lies)
        self._state_path = store_dir / "dledger" / START_FILE
        self.on_reset: Callable[[], None] | None = None  # the store drops what it derived from the log

    # ------------------------------------------------------------------ open

    def place_at(self, base: int) -> None:
        """Before :meth:`open`: the first entry goes to ``base`` (known only once a store has
        recovered the classic segments below it)."""
        if base % self.segment_size:
            raise ValueError(f"the raft data must begin at a segment start, not at {base}")
        self.base = self._start_pos = base

    def open(self, trusted_through: int = -1) -> None:
        """Map the files and find the end: entries after ``trusted_through`` (the committed
        checkpoint: synced before it was written) are checked against their data headers, and
        the log ends before the first that disagrees (pages of an unsynced tail reach the disk
        in any order, so a hole can hide under a later entry that looks whole)."""
        if not self.data.files:  # a shared queue may be loaded already
            self.data.load()
        self.index.load()
        props = read_properties(self._state_path)
        if props:
            self._start, self._prev_term = int(props["startIndex"]), int(props["prevTerm"])
            self._start_pos, self._install_end = int(props["startPos"]), int(props["installEnd"])
        lo, hi = self._start - 1, max(self._start - 1, self._index_capacity() - 1)  # the last index entry
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._index_entry(mid).magic in dledger.ENTRY_MAGICS:
                lo = mid
            else:
                hi = mid - 1
        last = max(self._start - 1, min(trusted_through, lo))
        while last < lo and self._agrees(last + 1):
            last += 1
        self._set_end(last)
        self._zero_after(last)
        self._cut_data_at_end()
        self.durable_index = last

    def _index_capacity(self) -> int:
        last = self.index.last
        return 0 if last is None else last.end // dledger.INDEX_ENTRY_SIZE

    def _agrees(self, i: int) -> bool:
        ix = self._index_entry(i)
        if ix.raft_index != i:
            return False
        mf = self.data.find(ix.pos)
        if mf is None or ix.pos - mf.start + ix.size > mf.size:
            return False
        try:
            head = dledger.decode_header(mf.view, ix.pos - mf.start)
        except FormatError:
            return False
        return (head.raft_index, head.term, head.size, head.pos) == (i, ix.term, ix.size, ix.pos) \
            and dledger.body_intact(mf.view, ix.pos - mf.start, head)

    def _set_end(self, last: int) -> None:
        self._last = last
        if last < self._start:
            self._last_term, self.write_pos = self._prev_term, self._start_pos
            return
        ix = self._index_entry(last)
        self._last_term, self.write_pos = ix.term, ix.pos + ix.size

    # ------------------------------------------------------------------ RaftLog

    @property
    def first_index(self) -> int:
        return self._start

    @property
    def last_index(self) -> int:
        return self._last

    @property
    def last_term(self) -> int:
        return self._last_term

    @property
    def install_end(self) -> int:
        return self._install_end

    def term_at(self, index: int) -> int | None:
        if index == self._start - 1 and index >= 0:
            return self._prev_term
        if not self._start <= index <= self._last:
            return None
        return self._index_entry(index).term

    def position(self, index: int) -> int | None:
        """Where entry ``index`` lies in the data files."""
        if not self._start <= index <= self._last:
            return None
        return self._index_entry(index).pos

    def entry(self, index: int) -> Entry | None:
        if not self._start <= index <= self._last:
            return None
        ix = self._index_entry(index)
        mf = self.data.find(ix.pos)
        assert mf is not None
        at = ix.pos - mf.start
        body = bytes(mf.view[at + dledger.HEADER_SIZE: at + ix.size])
        return Entry(index, ix.term, body, ix.magic)

    def entries(self, start: int, count_max: int, bytes_max: int) -> Sequence[Entry]:
        """A run read in one piece: the first entry, then those after it that follow it in the
        same data file, up to the limits."""
        if not self._start <= start <= self._last:
            return []
        stop = min(self._last, start + max(count_max, 1) - 1)
        at = start * dledger.INDEX_ENTRY_SIZE
        ixf = self.index.find(at)
        assert ixf is not None
        stop = min(stop, start + (ixf.end - at) // dledger.INDEX_ENTRY_SIZE - 1)  # within one index file
        heads = dledger.index_fields(ixf.view, at - ixf.start, stop - start + 1)
        _magic, first_pos, _size, _index, _term = heads[0]
        end = first_pos
        starts: list[int] = []
        terms: list[int] = []
        magics: list[int] = []
        for magic, pos, size, _index, term in heads:
            if pos != end or (starts and end - first_pos + size - dledger.HEADER_SIZE * (len(starts) + 1) > bytes_max):
                break  # the next data file, or the byte limit
            starts.append(end - first_pos)
            terms.append(term)
            magics.append(magic)
            end += size
        mf = self.data.find(first_pos)
        assert mf is not None
        raw = bytes(mf.view[first_pos - mf.start: end - mf.start])
        return PackedEntries(raw, start, starts, terms, magics, True)

    def append(self, entries: Sequence[Entry]) -> None:
        """Append a run: a :class:`PackedEntries` placed as this log places it (a leader's run
        on a follower with the same layout) is written as it is, in one piece; other entries
        are encoded here, each record's PHYSICALOFFSET set to where it lies."""
        if not entries:
            return
        first = entries.first_index if isinstance(entries, PackedEntries) else entries[0].index
        if first != self._last + 1:
            raise ValueError(f"entry {first} does not continue a log ending at {self._last}")
        if self._last < self._start and isinstance(entries, PackedEntries) and entries.contiguous:
            # an empty log (installed, or a store that joined empty) places its entries where
            # the leader's lie, so every member's files line up: byte for byte, and as
            # master and slaves after a seal
            at = entries.first_pos
            if at % self.segment_size == 0 and at >= self.write_pos:
                self.write_pos = self._start_pos = at
        if self.write_pos < 0:  # installed, and the run carries no placement: a fresh file
            self.write_pos = self._start_pos = 0
        if isinstance(entries, PackedEntries) and entries.contiguous and self._append_as_placed(entries):
            return
        self._append_encoded(_entry_fields(entries))

    def _append_encoded(self, entries: Iterable[tuple[int, int, int, bytes]]) -> None:
        """Encode ``(index, term, magic, body)`` entries continuing the log: each header and
        index entry packed from the fields, each record's PHYSICALOFFSET set to where it lies
        (a leader's records carry theirs already: :meth:`record_offsets`), one write a data
        file."""
        pack_header, pack_index, crc32 = dledger.HEADER_STRUCT.pack, dledger.INDEX_STRUCT.pack, zlib.crc32
        segment, header_size, normal = self.segment_size, dledger.HEADER_SIZE, dledger.MAGIC_NORMAL
        place = self.place_body
        parts: list[bytes | memoryview] = []
        index_parts: list[bytes] = []
        chunk_at = pos = self.write_pos
        last, last_term = self._last, self._last_term
        for index, term, magic, body in entries:
            if index != last + 1:
                raise ValueError(f"entry {index} does not continue a log ending at {last}")
            size = header_size + len(body)
            if size > segment - 8:
                raise ValueError(f"an entry of {size} bytes does not fit a {segment}-byte segment")
            placed = self._placed(pos, size)
            if placed != pos:  # the next data file: write what this one gets, then its padding
                self._write_chunk(chunk_at, parts, index_parts, pos, last, last_term)
                parts, index_parts = [], []
                self._pad(pos, placed)
                chunk_at = pos = placed
            if magic == normal and place is not None:
                body = place(body, pos + header_size)
            crc = crc32(body)
            parts += (pack_header(magic, size, index, term, pos, 0, 0, crc - (crc >> 31 << 32), len(body)), body)
            index_parts.append(pack_index(magic, pos, size, index, term))
            pos += size
            last, last_term = index, term
        self._write_chunk(chunk_at, parts, index_parts, pos, last, last_term)

    def _append_as_placed(self, run: PackedEntries) -> bool:
        """Write ``run`` as it is when it lands where its sender placed it, within one data
        file (so every header's pos and record offset is right here too); False otherwise."""
        heads = run.heads()
        at = run.first_pos
        if self._placed(self.write_pos, heads[0][1]) != at or at % self.segment_size + len(run.raw) > self.segment_size:
            return False
        self._pad(self.write_pos, at)
        index, pack_index = run.first_index, dledger.INDEX_STRUCT.pack
        index_parts = [pack_index(magic, at + start, size, index + i, term)
                       for i, (start, size, term, magic) in enumerate(heads)]
        self._write_chunk(at, [run.raw], index_parts, at + len(run.raw), run.last_index, heads[-1][2])
        return True

    def _pad(self, end: int, next_start: int) -> None:
        """Close the data file the log ends in (at ``end``) when the next entry goes to the
        next file (at ``next_start``)."""
        if next_start - end >= 8:
            mf = self._data_file(end)
            mf.write(end - mf.start, dledger.encode_padding(next_start - end))

    def _write_chunk(self, at: int, parts: Sequence[bytes | memoryview], index_parts: list[bytes], end: int, last: int,
                     last_term: int) -> None:
        """Write entries ``self._last + 1 .. last`` (their bytes ``parts`` from ``at`` in one
        data file, their index entries), then make them part of the log."""
        if not parts:
            return
        mf = self._data_file(at)
        mf.write(at - mf.start, parts[0] if len(parts) == 1 else b"".join(parts))
        blob = b"".join(index_parts)
        ix_at = (self._last + 1) * dledger.INDEX_ENTRY_SIZE
        done = 0
        while done < len(blob):
            ixf = self.index.find(ix_at + done)
            if ixf is None:
                ixf = self.index.create(ix_at + done - (ix_at + done) % self.index.file_size)
            n = min(len(blob) - done, ixf.end - (ix_at + done))
            ixf.write(ix_at + done - ixf.start, blob[done: done + n])
            done += n
        self._last, self._last_term, self.write_pos = last, last_term, end

    def _placed(self, pos: int, size: int) -> int:
        """Where an entry of ``size`` bytes goes when the data ends at ``pos``: there, or at
        the next file's start when the rest of this file cannot hold it."""
        room = self.segment_size - pos % self.segment_size
        return pos if size <= room else pos + room

    def record_offsets(self, body_sizes: list[int]) -> list[int]:
        """Where the records of the next entries (bodies of these sizes) will lie: each entry's
        position + 48. A leader encodes each record with its own offset once, so appending it
        patches nothing."""
        out = []
        pos = self.write_pos
        for body_size in body_sizes:
            size = dledger.HEADER_SIZE + body_size
            pos = self._placed(pos, size)
            out.append(pos + dledger.HEADER_SIZE)
            pos += size
        return out

    def truncate_after(self, index: int) -> int:
        if index < self._start - 1:
            raise ValueError(f"cannot cut at {index}: entries before {self._start} are deleted")
        if index >= self._last:
            return 0
        dropped = self._last - index
        self.cuts += 1
        self.durable_index = min(self.durable_index, index)
        self._zero_after(index)
        self._set_end(index)
        self._cut_data_at_end()
        return dropped

    def _cut_data_at_end(self) -> None:
        """Zero the data past the end and delete the files after its own, so a scan of the
        data files (`mqctl dump`) ends where the log does."""
        end = self.write_pos
        into = end % self.segment_size
        self.data.drop_after(end - into + (self.segment_size if into else 0))
        mf = self.data.find(end)
        if mf is not None:
            mf.zero_from(end - mf.start)

    def reset(self, start: int, prev_term: int, install_end: int) -> None:
        """Delete every data and index file: the log continues at entry ``start``, placed
        where the next run received places it (a leader's first retained data file)."""
        self._save_start(start, prev_term, -1, install_end)
        self.cuts += 1
        self.data.drop_after(-1)
        self.index.drop_after(-1)
        self._set_end(start - 1)
        self.durable_index = start - 1
        if self.on_reset is not None:
            self.on_reset()

    def begin_at(self, pos: int) -> int:
        """Retention: the log now begins with the entry at ``pos`` (the start of a data file);
        the data files before it may be deleted once this returns, and index files wholly
        before it are. Returns that entry's index."""
        mf = self.data.find(pos)
        if mf is None or pos != mf.start or pos > self.write_pos:
            raise ValueError(f"the log cannot begin at {pos}: not the start of a data file it holds")
        head = dledger.decode_header(mf.view, 0)
        start = head.raft_index
        if start <= self._start:
            # what lies before it is below the start already (files a retention could not
            # archive, or unlinks a power loss undid): nothing to record
            return self._start
        if start > self._last:
            raise ValueError(f"the entry at {pos} is {start}, past the last entry {self._last}")
        self._save_start(start, self._index_entry(start - 1).term, pos, self._install_end)
        at = start * dledger.INDEX_ENTRY_SIZE
        while len(self.index.files) > 1 and self.index.files[0].end <= at:
            self.index.drop_first()
        return start

    def closed_files(self) -> Iterator[tuple[MappedFile, int]]:
        """The raft data files the log does not end in, oldest first, each with the index of
        its last entry (the next file's first entry - 1): what retention chooses from."""
        files = self.data.files
        for f, nxt in zip(files, files[1:]):
            if nxt.start <= self.base:
                continue  # a classic segment of an earlier master-slave era
            if nxt.start > self.write_pos:
                return
            try:
                first = dledger.decode_header(nxt.view, 0).raft_index
            except FormatError:
                return
            yield f, first - 1

    def _save_start(self, start: int, prev_term: int, pos: int, install_end: int) -> None:
        write_properties(self._state_path, {"startIndex": str(start), "prevTerm": str(prev_term),
                                            "startPos": str(pos), "installEnd": str(install_end)})
        self._start, self._prev_term, self._start_pos, self._install_end = start, prev_term, pos, install_end

    @property
    def start_pos(self) -> int:
        """Where the first entry lies (-1: not known until the next run arrives)."""
        return self._start_pos

    # ------------------------------------------------------------------ durability

    def sync(self) -> int:
        """fdatasync every file changed since the last sync (blocks); returns the last index
        now durable."""
        last = self._last
        sync_files(self.take_dirty_files())
        self.durable_index = last
        return last

    def take_dirty_files(self) -> list[MappedFile]:
        """The files changed since the last call (on the loop), for :func:`sync_files` in a
        thread: everything written before the call is durable once that returns."""
        return [*self.data.dirty_files(), *self.index.dirty_files()]

    def close(self) -> None:
        self.data.close()
        self.index.close()

    # ------------------------------------------------------------------ files

    def _data_file(self, pos: int) -> MappedFile:
        mf = self.data.find(pos)
        if mf is None:
            mf = self.data.create(pos - pos % self.segment_size)
        return mf

    def _index_entry(self, i: int) -> dledger.DLedgerIndexEntry:
        at = i * dledger.INDEX_ENTRY_SIZE
        mf = self.index.find(at)
        if mf is None:
            return dledger.DLedgerIndexEntry(0, 0, 0, -1, -1)
        return dledger.decode_index_entry(mf.view, at - mf.start)

    def _zero_after(self, last: int) -> None:
        at = (last + 1) * dledger.INDEX_ENTRY_SIZE
        for mf in list(self.index.files):
            if mf.end > at:
                mf.zero_from(max(0, at - mf.start))


def sync_files(files: list[MappedFile]) -> None:
    """fdatasync each file (blocks: call from a worker thread)."""
    for mf in files:
        try:
            mf.sync()
        except OSError:
            if not mf.closed:  # a file a truncation removed meanwhile has nothing left to sync
                raise


def _entry_fields(entries: Sequence[Entry]) -> Iterable[tuple[int, int, int, bytes]]:
    """``(index, term, magic, body)`` of each entry; a proposal's bodies without an Entry each."""
    if isinstance(entries, BodyRun):
        n = len(entries.bodies)
        return zip(range(entries.first_index, entries.first_index + n), repeat(entries.term, n),
                   repeat(dledger.MAGIC_NORMAL, n), entries.bodies)
    return ((e.index, e.term, e.magic, e.body) for e in entries)

