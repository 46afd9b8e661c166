"""Reading a CommitLog: segments in a directory, single segments, ``.zst`` archives, classic or
DLedger-wrapped, from any physical offset, resyncing past damage.

A log is a sequence of fixed-size segment files named by their 20-digit start offset. Each
segment holds records back to back and, once full, an end marker (BLANK for a classic CommitLog,
padding for DLedger data files); unwritten space is zeros.

``scan_log`` yields :class:`RecordAt` for each message record and :class:`Damage` for each
stretch of bytes that is not one. After damage it searches for the next record whose magic,
structure, CRC and PHYSICALOFFSET (which must equal its own position) all check out, and goes on
from there. Damage after which no valid record follows in the last segment is marked
``at_tail`` (a torn last write: recovery truncates it).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from formats import dledger
from formats.archive import ARCHIVE_SUFFIX, open_archive
from formats.errors import FormatError, RecordError
from formats.record import (
    BLANK_MAGIC_BYTES,
    MAGIC_V1_BYTES,
    MAGIC_V2_BYTES,
    MessageRecord,
    decode_record,
    is_blank,
    record_size,
)

SEGMENT_NAME_DIGITS = 20
_SEGMENT_NAME = re.compile(r"^(\d{20})(\.zst)?$")
_ZERO_CHUNK = 1 << 20
_ZEROS = bytes(_ZERO_CHUNK)
_RESYNC_WINDOW, _RESYNC_WINDOW_MAX = 1 << 16, 1 << 24

# Segment contents as read: whole files, maps and spools (all support .find).
Buffer = bytes | bytearray | mmap.mmap


def segment_name(start_offset: int) -> str:
    """The file name of the segment starting at ``start_offset``."""
    return f"{start_offset:0{SEGMENT_NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    """The start offset a segment (or archive) name encodes, or ``None``."""
    m = _SEGMENT_NAME.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class SegmentSource:
    """One segment of a log: a plain file or a ``.zst`` archive."""

    start: int | None  # None when the file name does not encode an offset
    path: Path

    @property
    def archived(self) -> bool:
        return self.path.name.endswith(ARCHIVE_SUFFIX)


@dataclass(frozen=True, slots=True)
class RecordAt:
    """A valid record and where it lives."""

    offset: int  # physical offset of the message record
    record: MessageRecord
    segment: Path
    entry: dledger.DLedgerHeader | None = None


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes that are not a valid record."""

    offset: int
    length: int
    reason: str
    segment: Path
    at_tail: bool = False  # nothing valid follows, and this is the last segment
    ends_segment: bool = False  # nothing valid follows within this segment


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """Where the valid data of a segment stops, and why ("blank", "padding", "zeros", "end")."""

    offset: int
    kind: str
    segment: Path


ScanItem = RecordAt | Damage | SegmentEnd


def find_segments(path: Path, archive_dirs: tuple[Path, ...] = ()) -> list[SegmentSource]:
    """The segments of a log directory (plus archives), or the one file ``path`` names.

    Live files win over archives of the same start offset.
    """
    if path.is_file():
        return [SegmentSource(parse_segment_name(path.name), path)]
    if not path.is_dir():
        raise FormatError(f"{path} is neither a segment file nor a directory")
    by_start: dict[int, SegmentSource] = {}
    for directory in (*archive_dirs, path):  # later directories override earlier ones
        if not directory.is_dir():
            continue
        for child in directory.iterdir():
            start = parse_segment_name(child.name)
            if start is None or not child.is_file():
                continue
            current = by_start.get(start)
            if current is None or current.archived:
                by_start[start] = SegmentSource(start, child)
    return [by_start[k] for k in sorted(by_start)]


def log_dir_of(path: Path) -> Path:
    """The CommitLog a path names: a node directory means its ``commitlog/``."""
    return path / "commitlog" if path.is_dir() and (path / "commitlog").is_dir() else path


def default_archive_dirs(log_dir: Path) -> tuple[Path, ...]:
    """Where a node's archived segments live: ``<data_dir>/archive/<node>/`` for a log at
    ``<data_dir>/<node>/commitlog``."""
    if log_dir.is_dir() and log_dir.name == "commitlog":
        node_dir = log_dir.parent
        return (node_dir.parent / "archive" / node_dir.name,)
    return ()


@contextlib.contextmanager
def open_segment(source: SegmentSource) -> Iterator[Buffer]:
    """The bytes of a segment, read-only (archives are decompressed to a spool file)."""
    if source.archived:
        with open_archive(source.path) as view:
            yield view
        return
    with open(source.path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            yield b""
            return
        with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as view:
            yield view


def scan_log(
    path: Path,
    *,
    from_offset: int = 0,
    archive_dirs: tuple[Path, ...] | None = None,
    check_crc: bool = True,
    with_body: bool = True,
) -> Iterator[RecordAt | Damage]:
    """Every record (and every damaged stretch) of a log from ``from_offset`` on."""
    if archive_dirs is None:
        archive_dirs = default_archive_dirs(path)
    sources = find_segments(path, archive_dirs)
    expected_start: int | None = None
    for i, source in enumerate(sources):
        is_last = i == len(sources) - 1
        with open_segment(source) as buf:
            base = source.start
            if base is not None and expected_start is not None and base != expected_start:
                yield Damage(
                    expected_start, base - expected_start,
                    "missing or overlapping segment", source.path,
                )
            if base is not None:
                expected_start = base + len(buf)
                if expected_start <= from_offset:
                    continue
            start_pos = 0 if base is None else max(0, from_offset - base)
            for item in scan_segment(
                buf, base, source.path, start_pos=start_pos, is_last=is_last,
                check_crc=check_crc, with_body=with_body,
            ):
                if not isinstance(item, SegmentEnd):
                    yield item


def scan_segment(
    buf: Buffer,
    base: int | None,
    name: Path,
    *,
    start_pos: int = 0,
    is_last: bool = True,
    check_crc: bool = True,
    with_body: bool = True,
    strict_start: bool = False,
    stop_pos: int | None = None,
) -> Iterator[ScanItem]:
    """Scan one segment's bytes. ``base`` is its start offset (``None``: inferred from the
    first record). A ``start_pos`` that is not a record start is skipped silently to the next
    record, unless ``strict_start``. With ``stop_pos`` only what starts before it is yielded,
    so byte ranges ``[a, b)``, ``[b, c)`` of one segment give each record exactly once.
    Ends with a :class:`SegmentEnd` (kind "stop" at ``stop_pos``)."""
    wrapped = dledger.looks_like_entry(buf, 0)
    stop = len(buf) if stop_pos is None else min(stop_pos, len(buf))
    pos = start_pos
    if pos > 0 and not strict_start:
        probe = _valid_at(buf, pos, base, wrapped)
        if probe is None:
            found = _next_valid(buf, pos + 1, base, wrapped, stop)
            pos = found if found is not None else stop
    limit = len(buf)
    while True:
        if pos >= stop and stop < limit:
            yield SegmentEnd(_abs(base, pos), "stop", name)
            return
        if pos + 8 > limit:
            yield SegmentEnd(_abs(base, pos), "end", name)
            return
        if wrapped:
            if dledger.is_padding(buf, pos):
                yield SegmentEnd(_abs(base, pos), "padding", name)
                return
        elif is_blank(buf, pos):
            yield SegmentEnd(_abs(base, pos), "blank", name)
            return
        if record_size(buf, pos) == 0:
            bounded = stop < limit  # what lies past ``stop`` is the next range's to find
            found = _next_valid(buf, pos + 1, base, wrapped, stop if bounded else None)
            if found is None and bounded:
                yield SegmentEnd(_abs(base, pos), "stop", name)
                return
            if found is None:
                if not is_last and not wrapped:
                    yield Damage(_abs(base, pos), limit - pos,
                                 "segment ends without an end-of-segment marker", name,
                                 ends_segment=True)
                yield SegmentEnd(_abs(base, pos), "zeros", name)
                return
            yield Damage(_abs(base, pos), found - pos, "zeroed bytes before valid records", name)
            pos = found
            continue
        try:
            header, rec, rec_pos = _decode_at(buf, pos, wrapped, check_crc, with_body)
            if rec is None:  # a DLedger NOOP or config entry: no message inside
                assert header is not None
                pos += header.size
                continue
            if base is None:
                base = rec.phys_offset - rec_pos
            if rec.phys_offset != base + rec_pos:
                raise RecordError(
                    f"physical offset field {rec.phys_offset} does not match position "
                    f"{base + rec_pos}", pos,
                )
        except (RecordError, FormatError) as exc:
            reason = exc.reason if isinstance(exc, RecordError) else str(exc)
            found = _next_valid(buf, pos + 1, base, wrapped)
            if found is None:
                end = last_nonzero_end(buf, pos, limit)
                yield Damage(_abs(base, pos), end - pos, reason, name, at_tail=is_last,
                             ends_segment=True)
                yield SegmentEnd(_abs(base, pos), "damage", name)
                return
            yield Damage(_abs(base, pos), found - pos, reason, name)
            pos = found
            continue
        if rec is not None:
            yield RecordAt(base + rec_pos, rec, name, header)
        pos += header.size if header is not None else rec.total_size


def _abs(base: int | None, pos: int) -> int:
    return pos if base is None else base + pos


def _decode_at(
    buf: Buffer, pos: int, wrapped: bool, check_crc: bool, with_body: bool
) -> tuple[dledger.DLedgerHeader | None, MessageRecord | None, int]:
    if not wrapped:
        return None, decode_record(buf, pos, check_crc=check_crc, with_body=with_body), pos
    header = dledger.decode_header(buf, pos)
    rec_pos = pos + dledger.HEADER_SIZE
    if pos + header.size > len(buf):
        raise RecordError("DLedger entry runs past the end of data", pos)
    if header.magic != dledger.MAGIC_NORMAL:
        return header, None, rec_pos
    rec = decode_record(buf, rec_pos, limit=pos + header.size, check_crc=check_crc,
                        with_body=with_body)
    if rec.total_size != header.body_len:
        raise RecordError("DLedger body length differs from the record size", pos)
    return header, rec, rec_pos


def is_scan_start(buf: Buffer, pos: int, base: int | None) -> bool:
    """Whether scanning may start at ``pos``: a valid record, an end marker or unwritten
    space begins there."""
    if pos + 8 > len(buf) or record_size(buf, pos) == 0:
        return True
    return _valid_at(buf, pos, base, dledger.looks_like_entry(buf, 0)) is not None


def _valid_at(buf: Buffer, pos: int, base: int | None, wrapped: bool) -> int | None:
    """``pos`` if a fully valid record (or end marker) starts there."""
    try:
        if not wrapped and is_blank(buf, pos):
            return pos if record_size(buf, pos) == len(buf) - pos else None
        if wrapped and dledger.is_padding(buf, pos):
            return pos
        _, rec, rec_pos = _decode_at(buf, pos, wrapped, True, False)
    except (RecordError, FormatError):
        return None
    if rec is not None and base is not None and rec.phys_offset != base + rec_pos:
        return None
    return pos


def _next_valid(buf: Buffer, start: int, base: int | None, wrapped: bool,
                before: int | None = None) -> int | None:
    """The first position >= ``start`` (and < ``before``) where a valid record or end marker
    begins."""
    shift = dledger.HEADER_SIZE if wrapped else 0
    # needle -> its distance from the start of the candidate it would belong to
    needles = {MAGIC_V1_BYTES: 4 + shift, MAGIC_V2_BYTES: 4 + shift}
    if not wrapped:
        needles[BLANK_MAGIC_BYTES] = 4
    limit = len(buf) if before is None else min(len(buf), before)
    # Window by growing window: a record found near ``start`` must not cost a search, through the
    # rest of the range, for a magic the log never uses.
    lo, window = start, _RESYNC_WINDOW
    while lo < limit:
        hi = min(limit, lo + window)
        candidates = []
        for needle, distance in needles.items():
            end = min(len(buf), hi + distance + len(needle) - 1)  # needles of candidates before hi
            hit = buf.find(needle, lo + distance, end)
            while hit >= 0:
                candidates.append(hit - distance)
                hit = buf.find(needle, hit + 1, end)
        for candidate in sorted(candidates):
            if _valid_at(buf, candidate, base, wrapped) is not None:
                return candidate
        lo, window = hi, min(window * 2, _RESYNC_WINDOW_MAX)
    return None


def last_nonzero_end(buf: Buffer, start: int, limit: int) -> int:
    """One past the last non-zero byte in ``buf[start:limit]`` (``start`` if all zero)."""
    end = limit
    while end > start:
        lo = max(start, end - _ZERO_CHUNK)
        chunk = buf[lo:end]
        if len(chunk) == _ZERO_CHUNK and chunk == _ZEROS:  # memcmp: unwritten space goes by fast
            end = lo
            continue
        stripped = bytes(chunk).rstrip(b"\0")
        if stripped:
            return lo + len(stripped)
        end = lo
    return start
