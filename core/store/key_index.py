"""The key index: find records by ``KEYS`` or ``UNIQ_KEY`` (RocketMQ's IndexFile layout).

Files live under ``index/``, named by their creation time (``yyyyMMddHHmmssSSS``):

```
 header (40 bytes)
   0  8  beginTimestamp     store time of the first entry (ms)
   8  8  endTimestamp       store time of the last entry
  16  8  beginPhyOffset     CommitLog offset of the first entry
  24  8  endPhyOffset       CommitLog offset of the last entry
  32  4  hashSlotCount      slots in use
  36  4  indexCount         next entry number (starts at 1; entry 0 is never used)
 slots (slots x 4 bytes)    number of the newest entry whose key hashes to the slot, 0 = none
 entries (entries x 20 bytes)
   0  4  keyHash            crc32("topic#key") & 0x7FFFFFFF (see below)
   4  8  phyOffset
  12  4  timeDiff           seconds since beginTimestamp
  16  4  prevIndex          previous entry of the same slot, 0 = end of chain
```
Hashes collide, so a lookup returns candidate offsets that the store checks against the record.

The layout is RocketMQ's; the key hash is not. RocketMQ hashes with Java's String.hashCode,
which costs about 3 us per UNIQ_KEY in Python (a third of an append); CRC-32 is computed in C.
These files are read only by this store.
"""

from __future__ import annotations

import array
import functools
import logging
import struct
import sys
import time
import zlib
from collections.abc import Iterable
from itertools import chain, repeat
from operator import and_, itemgetter
from pathlib import Path

from core.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_SWAP = sys.byteorder == "little"  # slots are read and written as native ints, swapped


@functools.lru_cache(maxsize=256)
def _entries_struct(count: int) -> struct.Struct:
    return struct.Struct(">" + "iqii" * count)


HASH_MASK = 0x7FFFFFFF


@functools.lru_cache(maxsize=4096)
def topic_hash_seed(topic: str) -> int:
    """crc32("topic#"): a key's hash continues from it (``crc32(key, seed) & HASH_MASK``)."""
    return zlib.crc32(f"{topic}#".encode())


def key_hash(topic: str, key: str) -> int:
    """The 31-bit hash an index entry stores for ``key`` of ``topic``: crc32("topic#key")."""
    return zlib.crc32(key.encode(), topic_hash_seed(topic)) & HASH_MASK


def key_hashes(topic: str, keys: list[bytes]) -> list[int]:
    """:func:`key_hash` of each of ``keys`` (UTF-8), computed without a Python step a key."""
    return list(map(and_, map(zlib.crc32, keys, repeat(topic_hash_seed(topic))), repeat(HASH_MASK)))


def keyed_entries(topic: str, keys_by_record: Iterable[list[bytes]], offsets: Iterable[int],
                  stamps: Iterable[int]) -> list[tuple[int, int, int]]:
    """Index entries ``(hash, phys, store_ts)`` for each record's keys (UTF-8), in order."""
    seed = topic_hash_seed(topic)
    return [(zlib.crc32(key, seed) & HASH_MASK, phys, stamp)
            for keys, phys, stamp in zip(keys_by_record, offsets, stamps) for key in keys]


class IndexFile:
    """One index file."""

    def __init__(self, mf: MappedFile, slots: int, entries: int) -> None:
        self.mf = mf
        self.slots = slots
        self.entries = entries
        (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
         self.index_count) = _HEADER.unpack_from(mf.view, 0)
        if self.index_count <= 0:
            self.index_count = 1
        self._recount()

    def _recount(self) -> None:
        """Count entries written after the header was last saved (a crash between a put and
        the next flush leaves them there, and slots may already point at them)."""
        view = self.mf.view
        while self.index_count < self.entries:
            h, phys, diff, _prev = _ENTRY.unpack_from(view, self._entry_pos(self.index_count))
            if h == 0 and phys == 0 and diff == 0:
                break
            if self.index_count <= 1:
                self.begin_phy = phys
            self.end_phy = max(self.end_phy, phys)
            self.end_ts = max(self.end_ts, self.begin_ts + diff * 1000)
            self.index_count += 1

    @property
    def full(self) -> bool:
        return self.index_count >= self.entries

    def room(self) -> int:
        return self.entries - self.index_count

    def _entry_pos(self, index: int) -> int:
        return HEADER_SIZE + self.slots * SLOT_SIZE + index * ENTRY_SIZE

    def put(self, h: int, phys: int, store_ts: int) -> bool:
        if self.full:
            return False
        slot_pos = HEADER_SIZE + (h % self.slots) * SLOT_SIZE
        view = self.mf.view
        prev = _SLOT.unpack_from(view, slot_pos)[0]
        if prev <= 0 or prev > self.index_count:
            prev = 0
        if self.index_count <= 1:
            self.begin_ts, self.begin_phy = store_ts, phys
        diff = max(0, min((store_ts - self.begin_ts) // 1000, 2**31 - 1))
        index = self.index_count
        _ENTRY.pack_into(view, self._entry_pos(index), h, phys, diff, prev)
        _SLOT.pack_into(view, slot_pos, index)
        if prev == 0:
            self.slot_count += 1
        self.index_count += 1
        self.end_ts, self.end_phy = store_ts, phys
        self.mf.dirty = True  # the header is written when the file is flushed (write_header)
        return True

    def put_many(self, entries: list[tuple[int, int, int]]) -> int:
        """:meth:`put` for each entry until the file is full; returns how many went in."""
        view = self.mf.view
        slots = self.slots
        entries_base = HEADER_SIZE + slots * SLOT_SIZE
        pack_entry = _ENTRY.pack_into
        pack_slot = _SLOT.pack_into
        read_slot = _SLOT.unpack_from
        index = self.index_count
        capacity = self.entries
        begin_ts = self.begin_ts
        new_slots = 0
        done = 0
        for h, phys, store_ts in entries:
            if index >= capacity:
                break
            if index <= 1:
                begin_ts = self.begin_ts = store_ts
                self.begin_phy = phys
            slot_pos = HEADER_SIZE + (h % slots) * SLOT_SIZE
            prev = read_slot(view, slot_pos)[0]
            if prev <= 0 or prev > index:
                prev = 0
                new_slots += 1
            diff = (store_ts - begin_ts) // 1000
            pack_entry(view, entries_base + index * ENTRY_SIZE, h, phys,
                       diff if 0 <= diff < 2**31 else (0 if diff < 0 else 2**31 - 1), prev)
            pack_slot(view, slot_pos, index)
            index += 1
            done += 1
        if done:
            last = entries[done - 1]
            self.index_count = index
            self.slot_count += new_slots
            self.end_ts, self.end_phy = last[2], last[1]
            self.mf.dirty = True
        return done

    def put_run(self, hashes: list[int], offsets: list[int], stamps: list[int]) -> int:
        """:meth:`put_many` for one key a record (a batch's UNIQ_KEYs): the entries in one
        packing, the slots they hit read in one gather, when the run fits the file, is not its
        first entry and hits each slot once; else one by one."""
        count = len(hashes)
        index = self.index_count
        slots = self.slots
        slot_of = [h % slots for h in hashes]
        if index <= 1 or index + count > self.entries or len(set(slot_of)) != count or count < 2:
            return self.put_many(list(zip(hashes, offsets, stamps)))
        view = self.mf.view
        with memoryview(view) as whole, whole[HEADER_SIZE : HEADER_SIZE + slots * SLOT_SIZE] as table, \
                table.cast("i") as slot_ints:
            prevs = array.array("i", itemgetter(*slot_of)(slot_ints))
            if _SWAP:
                prevs.byteswap()  # the file is big-endian
            ids = range(index, index + count)
            links = [p if 0 < p <= i else 0 for p, i in zip(prevs, ids)]
            begin = self.begin_ts
            diffs = [(s - begin) // 1000 for s in stamps]
            if min(diffs) < 0 or max(diffs) >= 2**31:
                diffs = [d if 0 <= d < 2**31 else (0 if d < 0 else 2**31 - 1) for d in diffs]
            _entries_struct(count).pack_into(view, HEADER_SIZE + slots * SLOT_SIZE + index * ENTRY_SIZE,
                                             *chain.from_iterable(zip(hashes, offsets, diffs, links)))
            new_ids = array.array("i", ids)
            if _SWAP:
                new_ids.byteswap()
            for slot, entry_id in zip(slot_of, new_ids):
                slot_ints[slot] = entry_id
        self.index_count = index + count
        self.slot_count += links.count(0)
        self.end_ts, self.end_phy = stamps[count - 1], offsets[count - 1]
        self.mf.dirty = True
        return count

    def write_header(self) -> None:
        _HEADER.pack_into(self.mf.view, 0, self.begin_ts, self.end_ts, self.begin_phy,
                          self.end_phy, self.slot_count, self.index_count)

    def lookup(self, h: int, begin_ts: int, end_ts: int, limit: int) -> list[int]:
        view = self.mf.view
        index = _SLOT.unpack_from(view, HEADER_SIZE + (h % self.slots) * SLOT_SIZE)[0]
        out: list[int] = []
        seen = 0
        while 0 < index < self.index_count and len(out) < limit and seen < self.entries:
            seen += 1
            eh, phys, diff, prev = _ENTRY.unpack_from(view, self._entry_pos(index))
            stamp = self.begin_ts + diff * 1000
            if eh == h and begin_ts <= stamp <= end_ts:
                out.append(phys)
            if prev <= 0 or prev >= index:
                break
            index = prev
        return out

    def clamp_end(self, log_end: int) -> None:
        """After recovery cut the CommitLog at ``log_end``: entries past it become stale (the
        lookup's record check drops them) and new records there must be indexed again."""
        if self.end_phy >= log_end:
            self.end_phy = log_end - 1
            self.write_header()
            self.mf.dirty = True


class KeyIndex:
    """All index files of a store, newest last."""

    def __init__(self, directory: Path, slots: int, entries: int) -> None:
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.files: list[IndexFile] = []
        self.reserved = 0
        self._room = 0  # free entries of the newest file when last looked at
        self.file_size = HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE

    def recover(self, log_end: int) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for child in sorted(self.directory.iterdir()):
            if not (child.is_file() and child.name.isdigit()):
                continue
            size = child.stat().st_size
            if size == 0:
                child.unlink()  # its creation was interrupted
                continue
            if size != self.file_size:
                log.warning("index file %s was made with another slot/entry geometry; ignored", child)
                continue
            ix = IndexFile(MappedFile(child, self.file_size, 0, create=False), self.slots,
                           self.entries)
            if ix.index_count > 1 and ix.begin_phy >= log_end:
                ix.mf.destroy()
                continue
            ix.clamp_end(log_end)
            self.files.append(ix)
        self._room = self.files[-1].room() if self.files else 0

    def truncate(self, log_end: int) -> None:
        """The CommitLog was cut at ``log_end``: files that begin at or past it go, the others
        end before it (their entries past it are stale: lookups check every record they find,
        and records written there anew are indexed again)."""
        while self.files and self.files[-1].index_count > 1 and self.files[-1].begin_phy >= log_end:
            self.files.pop().mf.destroy()
        for ix in self.files:
            ix.clamp_end(log_end)
        self._room = self.files[-1].room() if self.files else 0

    def _new_file(self) -> IndexFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        now = time.time()
        while True:
            name = time.strftime("%Y%m%d%H%M%S", time.localtime(now)) + f"{int(now * 1000) % 1000:03d}"
            path = self.directory / name
            if not path.exists() and (not self.files or name > self.files[-1].mf.path.name):
                break
            now += 0.001
        ix = IndexFile(MappedFile(path, self.file_size, 0, create=True), self.slots, self.entries)
        self.files.append(ix)
        self._room = ix.room()
        return ix

    def ensure_room(self, count: int) -> None:
        """Make sure ``count`` more entries fit (may create a file; may raise DiskFullError)."""
        if count and (not self.files or self.files[-1].room() < count):
            self._new_file()

    def reserve(self, count: int) -> None:
        """Reserve room for the entries of a record put but not yet dispatched (they will go
        to the newest file, created here when it is too full)."""
        wanted = self.reserved + count
        if wanted > self._room:
            # more than one file holds goes on in files made at dispatch: one fresh file here,
            # not one per record of a burst
            self.ensure_room(min(wanted, self.entries - 1))  # may raise DiskFullError: nothing reserved then
            self._room = self.files[-1].room()
        self.reserved = wanted

    def put_many(self, entries: list[tuple[int, int, int]]) -> None:
        """Index ``(hash, phys, store_ts)`` entries reserved with :meth:`reserve`."""
        if not entries:
            return
        self.reserved = max(0, self.reserved - len(entries))
        ix = self.files[-1]
        done = ix.put_many(entries)
        while done < len(entries):
            ix = self._new_file()
            done += ix.put_many(entries[done:])
        self._room = ix.room()

    def put_run(self, hashes: list[int], offsets: list[int], stamps: list[int]) -> None:
        """:meth:`put_many` for one reserved key a record: ``(hashes[i], offsets[i], stamps[i])``."""
        if not hashes:
            return
        self.reserved = max(0, self.reserved - len(hashes))
        ix = self.files[-1]
        done = ix.put_run(hashes, offsets, stamps)
        while done < len(hashes):
            ix = self._new_file()
            done += ix.put_run(hashes[done:], offsets[done:], stamps[done:])
        self._room = ix.room()

    def indexed_below(self, phys: int) -> bool:
        """Whether records before ``phys`` are all indexed (re-dispatch after recovery)."""
        return bool(self.files) and self.files[-1].index_count > 1 and phys <= self.files[-1].end_phy

    def put(self, topic: str, key: str, phys: int, store_ts: int) -> None:
        """Index ``key``; room must have been reserved (or ensured) for it."""
        if not self.files[-1].put(key_hash(topic, key), phys, store_ts):
            self._new_file().put(key_hash(topic, key), phys, store_ts)

    def lookup(self, topic: str, key: str, limit: int, begin_ts: int, end_ts: int) -> list[int]:
        """Candidate CommitLog offsets for ``key``, newest first, without duplicates."""
        h = key_hash(topic, key)
        out: list[int] = []
        for ix in reversed(self.files):
            if ix.index_count <= 1 or ix.end_ts < begin_ts - 1000 or ix.begin_ts > end_ts:
                continue
            for phys in ix.lookup(h, begin_ts, end_ts, limit):
                if phys not in out:
                    out.append(phys)
            if len(out) >= limit:
                break
        return out[:limit]

    def dirty_files(self) -> list[MappedFile]:
        """Files changed since the last call, headers brought up to date, dirty flags cleared."""
        out = []
        for ix in self.files:
            if ix.mf.dirty:
                ix.write_header()
                ix.mf.dirty = False
                out.append(ix.mf)
        return out

    def clear(self) -> None:
        """Delete every index file (the log they pointed into is gone)."""
        for ix in self.files:
            ix.mf.destroy()
        self.files.clear()
        self.reserved = self._room = 0

    def delete_below(self, log_min: int) -> int:
        dropped = 0
        while len(self.files) > 1 and self.files[0].end_phy < log_min:
            self.files.pop(0).mf.destroy()
            dropped += 1
        return dropped

    def close(self) -> None:
        for ix in self.files:
            if not ix.mf.closed:
                ix.write_header()
            ix.mf.close()
