"""The CommitLog: every record of every topic, appended to fixed-size segments.

A record never spans segments: when one does not fit (with 8 spare bytes), the segment is
closed with a BLANK marker and the record goes to the next segment, which is created first so a
full disk leaves the log as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from core.errors import MessageTooLargeError, StoreCorruptError
from core.store.checkpoint import Checkpoint
from core.store.mapped_file import MappedFile, MappedFileQueue
from core.store.store_types import LogRecovery
from formats.record import (
    BLANK_SIZE,
    MessageRecord,
    PreparedRecord,
    decode_record,
    encode_blank,
    is_blank,
    record_size,
    write_record,
)
from formats.segments import (
    Damage,
    RecordAt,
    SegmentEnd,
    is_scan_start,
    last_nonzero_end,
    scan_segment,
)

log = logging.getLogger(__name__)


class CommitLog:
    """Segments under ``directory`` of ``segment_size`` bytes each."""

    def __init__(self, directory: Path, segment_size: int) -> None:
        self.files = MappedFileQueue(directory, segment_size)
        self.segment_size = segment_size
        self.write_offset = 0  # next append position = max offset
        self.flushed_offset = 0
        self._tail: MappedFile | None = None

    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def directory(self) -> Path:
        return self.files.directory

    def recover(self, checkpoint: Checkpoint | None, *, cut_damage: bool, floor: int = 0) -> LogRecovery:
        """Find the end of valid data and cut anything after it.

        Scanning starts at the checkpoint's flushed offset (everything below was fsynced).
        Damage after which nothing valid follows is a torn last write: it is cut. Damage
        followed by valid records is corruption: RocketMQ silently cuts everything after it;
        we raise :class:`StoreCorruptError` naming the file and offset, unless ``cut_damage``
        (the operator's explicit choice) says to cut there.

        ``floor`` (a segment start) is where this log continues a history it does not scan:
        segments below it hold another layout (a raft era's DLedger entries) and are read
        by offset only.
        """
        self.files.load()
        files = [f for f in self.files.files if f.start >= floor]
        if not files:
            self.write_offset = self.flushed_offset = floor
            return LogRecovery(floor, floor, 0, 0, None)
        index, pos = _scan_start(files, checkpoint)
        scanned_from = files[index].start + pos
        end = scanned_from
        records = 0
        cut_reason: str | None = None
        for i in range(index, len(files)):
            seg = files[i]
            stop = True
            for item in scan_segment(seg.view, seg.start, seg.path, start_pos=pos,
                                     is_last=i == len(files) - 1, with_body=False,
                                     strict_start=True):
                if isinstance(item, RecordAt):
                    records += 1
                    end = item.offset + item.record.total_size
                elif isinstance(item, Damage):
                    # A kill between creating the next segment and writing this one's BLANK
                    # leaves damage with only empty segments after it: a torn tail too.
                    at_tail = item.at_tail or item.ends_segment and all(
                        last_nonzero_end(f.view, 0, f.size) == 0 for f in files[i + 1:]
                    )
                    if not at_tail and not cut_damage:
                        raise StoreCorruptError(
                            f"damaged record ({item.reason}, log offset {item.offset}) followed by valid records; "
                            "inspect with `mqctl dump --verify`, or set "
                            "store.recover_cut_damage = true to cut the log there",
                            seg.path, item.offset - seg.start,
                        )
                    cut_reason = item.reason
                    end = item.offset
                    break
                elif isinstance(item, SegmentEnd):
                    end = item.offset
                    stop = item.kind != "blank"
                    if not stop:
                        end = seg.end
            pos = 0
            if stop or cut_reason is not None:
                break
        cut = self._truncate(end)
        if cut:
            log.warning("commitlog %s: cut %d bytes after offset %d (%s)", self.directory, cut,
                        end, cut_reason or "torn tail")
        self.write_offset = end
        self.flushed_offset = end
        return LogRecovery(scanned_from, end, records, cut, cut_reason)

    def _truncate(self, end: int) -> int:
        """Zero the bytes at and after ``end`` and delete later segments; bytes cut."""
        cut = 0
        keep: list[MappedFile] = []
        for seg in self.files.files:
            if seg.end <= end:
                keep.append(seg)
            elif seg.start <= end:
                pos = end - seg.start
                cut += last_nonzero_end(seg.view, pos, seg.size) - pos
                seg.zero_from(pos)
                if seg.dirty:
                    seg.sync()
                    seg.dirty = False
                keep.append(seg)
            else:
                cut += last_nonzero_end(seg.view, 0, seg.size)
                seg.destroy()
        self.files.files = keep
        return cut

    def append(self, rec: MessageRecord, prep: PreparedRecord, queue_offset: int,
               store_timestamp: int) -> int:
        """Encode ``rec`` straight into the mapped segment; returns its offset.

        When the record does not fit the current segment, the next one is created first and
        only then is the current one closed with a BLANK: a full disk changes nothing.
        """
        size = prep[0]
        seg = self._tail
        if seg is None or not (seg.start <= self.write_offset
                               and self.write_offset - seg.start + size + BLANK_SIZE <= seg.size):
            seg = self._roll(size)
        phys = self.write_offset
        write_record(seg.view, phys - seg.start, rec, prep, queue_offset, phys, store_timestamp)
        seg.dirty = True
        self.write_offset = phys + size
        return phys

    def append_many(self, records: Sequence[MessageRecord], preps: Sequence[PreparedRecord],
                    queue_offsets: Iterable[int], store_timestamp: int) -> list[int]:
        """:meth:`append` for records that fit the current segment together (the caller made
        room with :meth:`make_room`); returns their offsets."""
        seg = self._tail
        phys = self.write_offset
        total = sum(prep[0] for prep in preps)
        if seg is None or not (seg.start <= phys and phys - seg.start + total + BLANK_SIZE <= seg.size):
            raise ValueError("append_many needs room made first")
        view, start = seg.view, seg.start
        out = []
        for rec, prep, queue_offset in zip(records, preps, queue_offsets):
            write_record(view, phys - start, rec, prep, queue_offset, phys, store_timestamp)
            out.append(phys)
            phys += prep[0]
        seg.dirty = True
        self.write_offset = phys
        return out

    def append_parts(self, parts: list[bytes], size: int) -> int:
        """Write records already encoded (``size`` bytes in ``parts``) at ``write_offset``, in
        one copy; the caller made room with :meth:`make_room`. Returns where they begin."""
        seg = self._tail
        phys = self.write_offset
        if seg is None or not (seg.start <= phys and phys - seg.start + size + BLANK_SIZE <= seg.size):
            raise ValueError("append_parts needs room made first")
        at = phys - seg.start
        seg.view[at : at + size] = b"".join(parts)
        seg.dirty = True
        self.write_offset = phys + size
        return phys

    def make_room(self, size: int) -> bool:
        """Make ``size`` contiguous bytes available at ``write_offset`` (rolling to the next
        segment first when needed; may raise DiskFullError). False when ``size`` exceeds a
        segment."""
        if size + BLANK_SIZE > self.segment_size:
            return False
        seg = self._tail
        if seg is None or not (seg.start <= self.write_offset
                               and self.write_offset - seg.start + size + BLANK_SIZE <= seg.size):
            self._roll(size)
        return True

    def _roll(self, size: int) -> MappedFile:
        """The segment the next ``size``-byte record goes to, at ``write_offset``."""
        if size + BLANK_SIZE > self.segment_size:
            raise MessageTooLargeError(
                f"record of {size} bytes does not fit a {self.segment_size}-byte segment"
            )
        seg = self.files.find(self.write_offset)
        if seg is None:
            last = self.files.last
            start = self.write_offset - self.write_offset % self.segment_size
            seg = self.files.create(max(start, last.end) if last is not None else self.write_offset)
            self.write_offset = seg.start
        elif self.write_offset - seg.start + size + BLANK_SIZE > seg.size:
            nxt = self.files.find(seg.end) or self.files.create(seg.end)
            pos = self.write_offset - seg.start
            seg.write(pos, encode_blank(seg.size - pos))
            self.write_offset = nxt.start
            seg = nxt
        self._tail = seg
        return seg

    def append_replicated(self, offset: int, data: bytes) -> None:
        """Write bytes that another node's log holds at ``offset`` (a master's, on its slave).

        Both logs use the same segment size, so the files stay byte-identical: ``data`` never
        spans a segment (a master never sends across one), and ``offset`` is the end of this
        log, or a segment start when this log is empty (the master chose where to begin).
        """
        if not self.files.files and self.write_offset in (0, offset):
            if offset % self.segment_size:
                raise ValueError(f"a replica log must begin at a segment start, not at {offset}")
            self.files.create(offset)
            self.write_offset = self.flushed_offset = offset
        if offset != self.write_offset:
            raise ValueError(f"replicated bytes at {offset}, but this log ends at {self.write_offset}")
        seg = self.files.find(offset)
        if seg is None:
            last = self.files.last
            if last is None or last.end != offset:
                raise ValueError(f"no segment can hold offset {offset}")
            seg = self.files.create(offset)
        pos = offset - seg.start
        if pos + len(data) > seg.size:
            raise ValueError(f"{len(data)} replicated bytes at {offset} run past the segment end {seg.end}")
        seg.write(pos, data)
        self.write_offset = offset + len(data)

    def complete_record_end(self, offset: int) -> int:
        """Where the record at ``offset`` ends (the segment end for a BLANK), or ``offset``
        when no complete record starts there yet (a replica's chunk may end inside one)."""
        seg = self.files.find(offset)
        if seg is None:
            return offset
        pos = offset - seg.start
        available = self.write_offset - offset
        if available < BLANK_SIZE:
            return offset
        if is_blank(seg.view, pos):
            return seg.end
        size = record_size(seg.view, pos)
        return offset + size if 0 < size <= self.write_offset - offset else offset

    def record_start_at_or_before(self, target: int) -> int:
        """The start of the last complete record that begins at or before ``target`` (hopping
        record sizes from the start of its segment), or the segment start."""
        target = min(target, self.write_offset)
        seg = self.files.find(target) or self.files.find(target - 1)
        if seg is None:
            return self.min_offset
        pos = seg.start
        while pos < target:
            end = self.complete_record_end(pos)
            if end == pos or end > target or is_blank(seg.view, pos - seg.start):
                break
            pos = end
        return pos

    def first_difference(self, offset: int, data: bytes) -> int | None:
        """The offset of the first byte where ``data`` (bytes another log holds at ``offset``)
        differs from this log, comparing up to this log's end; ``None`` when they agree."""
        count = min(len(data), self.write_offset - offset)
        if count <= 0:
            return None
        seg = self.files.find(offset)
        if seg is None:
            return offset
        count = min(count, seg.end - offset)
        local = seg.read(offset - seg.start, count)
        if local == data[:count]:
            return None
        lo, hi = 0, count  # the first differing byte is in [lo, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if local[lo:mid] == data[lo:mid]:
                lo = mid
            else:
                hi = mid
        return offset + lo

    def truncate(self, end: int) -> int:
        """Cut the log at ``end`` (a replica dropping a tail its master does not have);
        returns the bytes cut."""
        cut = self._truncate(end)
        self.write_offset = min(self.write_offset, end)
        self.flushed_offset = min(self.flushed_offset, end)
        self._tail = None
        return cut

    def segment_of(self, offset: int) -> MappedFile | None:
        return self.files.find(offset)

    def read(self, offset: int, size: int) -> bytes:
        seg = self.files.find(offset)
        if seg is None or offset + size > self.write_offset:
            raise KeyError(offset)
        return seg.read(offset - seg.start, size)

    def read_record(self, offset: int) -> MessageRecord:
        """The record at ``offset`` (a KeyError when there is none in the log)."""
        seg = self.files.find(offset)
        if seg is None or offset >= self.write_offset:
            raise KeyError(offset)
        return decode_record(seg.view, offset - seg.start,
                             limit=min(seg.size, self.write_offset - seg.start))

    def segments_between(self, lo: int, hi: int) -> list[MappedFile]:
        """Segments overlapping ``[lo, hi)``."""
        return [seg for seg in self.files.files if seg.start < hi and seg.end > lo]

    def close(self) -> None:
        self.files.close()


def _scan_start(files: Sequence[MappedFile], checkpoint: Checkpoint | None) -> tuple[int, int]:
    """Where recovery scans from: (index in ``files``, position in that file).

    The checkpoint's flushed offset when a record or an end marker begins there. Unwritten space
    there proves nothing: a slave copies the master's log as bytes, not records, so its flushed
    offset may fall inside a record whose tail never arrived (RocketMQ's recovery always starts
    at a file's start). The scan then starts at the checkpoint's dispatched offset, which is
    always a record's start, when it is in the same file and not after; else at the file's start.
    """
    if checkpoint is None:
        return 0, 0
    start = min(max(checkpoint.commitlog_flushed_offset, files[0].start), files[-1].end)
    index = next((i for i, f in enumerate(files) if f.start <= start < f.end), len(files) - 1)
    seg = files[index]
    pos = start - seg.start
    if pos >= seg.size or not is_scan_start(seg.view, pos, seg.start):
        return index, 0
    if pos == 0 or pos + 8 <= seg.size and record_size(seg.view, pos) != 0:
        return index, pos  # a segment's start, or a valid record or end marker
    dispatched = checkpoint.dispatched_offset - seg.start
    if 0 <= dispatched <= pos and is_scan_start(seg.view, dispatched, seg.start):
        return index, dispatched
    return index, 0
