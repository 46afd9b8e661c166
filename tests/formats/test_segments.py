from pathlib import Path

import pytest

from formats.archive import archive_segment
from formats.segments import Damage, RecordAt, find_segments, scan_log, segment_name
from tests.independent_encoder import blank, dledger_entry, dledger_padding, record_bytes

SEGMENT = 1024


def write_classic_log(directory: Path, bodies: list[bytes], segment: int = SEGMENT) -> list[int]:
    """Records laid out as a CommitLog would: BLANK when one does not fit. Returns offsets."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[int, bytearray] = {0: bytearray()}
    start, offsets = 0, []
    for i, body in enumerate(bodies):
        probe = record_bytes(topic="T", body=body, props=f"KEYS\x01k{i}\x02", phys_offset=0)
        cur = files[start]
        if len(cur) + len(probe) + 8 > segment:
            cur += blank(segment - len(cur))
            start += segment
            files[start] = bytearray()
            cur = files[start]
        phys = start + len(cur)
        cur += record_bytes(topic="T", body=body, props=f"KEYS\x01k{i}\x02", phys_offset=phys, queue_offset=i)
        offsets.append(phys)
    for s, data in files.items():
        (directory / segment_name(s)).write_bytes(bytes(data.ljust(segment, b"\0")))
    return offsets


def records(items):
    return [i for i in items if isinstance(i, RecordAt)]


def damages(items):
    return [i for i in items if isinstance(i, Damage)]


def test_reads_records_across_segments_in_order(tmp_path):
    bodies = [bytes([65 + i % 26]) * (100 + i) for i in range(20)]
    offsets = write_classic_log(tmp_path / "commitlog", bodies)
    items = list(scan_log(tmp_path / "commitlog"))
    assert not damages(items)
    assert [r.offset for r in records(items)] == offsets
    assert [r.record.body for r in records(items)] == bodies
    assert len(find_segments(tmp_path / "commitlog")) > 2


def test_reads_from_any_offset(tmp_path):
    offsets = write_classic_log(tmp_path / "log", [b"x" * 200] * 12)
    assert [r.offset for r in scan_log(tmp_path / "log", from_offset=offsets[5])] == offsets[5:]
    # an offset inside a record resumes at the next record, without reporting damage
    items = list(scan_log(tmp_path / "log", from_offset=offsets[5] + 3))
    assert not damages(items) and [r.offset for r in items] == offsets[6:]


def test_resyncs_after_a_damaged_record_and_reports_it(tmp_path):
    offsets = write_classic_log(tmp_path / "log", [b"y" * 150] * 10)
    seg0 = tmp_path / "log" / segment_name(0)
    raw = bytearray(seg0.read_bytes())
    raw[offsets[1] + 100] ^= 0x10  # a body byte of the second record
    seg0.write_bytes(bytes(raw))
    items = list(scan_log(tmp_path / "log"))
    (damage,) = damages(items)
    assert damage.offset == offsets[1] and damage.reason == "body crc mismatch"
    assert damage.length == offsets[2] - offsets[1] and not damage.at_tail
    assert [r.offset for r in records(items)] == offsets[:1] + offsets[2:]


def test_garbage_between_records_is_skipped(tmp_path):
    offsets = write_classic_log(tmp_path / "log", [b"z" * 100] * 6)
    seg0 = tmp_path / "log" / segment_name(0)
    raw = bytearray(seg0.read_bytes())
    raw[offsets[2]:offsets[2] + 20] = b"\xff" * 20  # clobber the header of record 3
    seg0.write_bytes(bytes(raw))
    items = list(scan_log(tmp_path / "log"))
    assert [d.offset for d in damages(items)] == [offsets[2]]
    assert len(records(items)) == 5


def test_torn_tail_is_reported_at_tail(tmp_path):
    offsets = write_classic_log(tmp_path / "log", [b"w" * 100] * 3)
    last = tmp_path / "log" / segment_name(0)
    raw = bytearray(last.read_bytes())
    end = offsets[2] + int.from_bytes(raw[offsets[2]:offsets[2] + 4], "big")
    torn = record_bytes(topic="T", body=b"q" * 200, props="", phys_offset=end)[:120]
    raw[end:end + len(torn)] = torn
    last.write_bytes(bytes(raw))
    items = list(scan_log(tmp_path / "log"))
    (damage,) = damages(items)
    assert damage.at_tail and damage.offset == end and damage.length == 120
    assert len(records(items)) == 3


def test_archived_segments_read_transparently(tmp_path):
    node = tmp_path / "data" / "broker-a"
    offsets = write_classic_log(node / "commitlog", [b"a" * 300] * 12)
    first = node / "commitlog" / segment_name(0)
    archive = archive_segment(first, tmp_path / "data" / "archive" / "broker-a")
    first.unlink()
    assert archive.name == segment_name(0) + ".zst"
    assert [r.offset for r in scan_log(node / "commitlog")] == offsets
    # a single archive can be read on its own too
    only = list(scan_log(archive))
    assert only and all(r.offset < SEGMENT for r in only)


def test_dledger_wrapped_segments(tmp_path):
    log_dir = tmp_path / "dledger"
    log_dir.mkdir()
    seg_size = 1024
    files = {0: bytearray(), seg_size: bytearray()}
    expected = []
    index = 0
    start = 0
    for i in range(9):
        body = f"m{i}".encode() * 20
        cur = files[start]
        size = 48 + len(record_bytes(topic="D", body=body, props="", phys_offset=0))
        if len(cur) + size + 8 > seg_size:
            cur += dledger_padding(seg_size - len(cur))
            start += seg_size
            cur = files[start]
        pos = start + len(cur)
        rec = record_bytes(topic="D", body=body, props="", phys_offset=pos + 48, queue_offset=i)
        cur += dledger_entry(index, 2, pos, rec)
        expected.append((pos + 48, index, body))
        index += 1
    # a NOOP entry (magic 2) carries no message and is skipped
    noop_pos = start + len(files[start])
    files[start] += dledger_entry(index, 2, noop_pos, b"")[:0] or (
        (2).to_bytes(4, "big") + (48).to_bytes(4, "big") + index.to_bytes(8, "big") + (2).to_bytes(8, "big")
        + noop_pos.to_bytes(8, "big") + bytes(16))
    for s, data in files.items():
        (log_dir / segment_name(s)).write_bytes(bytes(data.ljust(seg_size, b"\0")))
    items = list(scan_log(log_dir))
    assert not damages(items)
    got = [(r.offset, r.entry.raft_index, r.record.body) for r in records(items)]
    assert got == expected
    assert all(r.record.phys_offset == r.offset for r in records(items))


def test_missing_path_is_a_format_error(tmp_path):
    from formats.errors import FormatError

    with pytest.raises(FormatError):
        list(scan_log(tmp_path / "nope"))
