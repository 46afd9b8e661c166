"""formats.columns: the column decoder gives exactly what the careful scanner gives, over any cut
of a segment into byte ranges (no Spark here)."""

from __future__ import annotations

import itertools
import zlib

import pytest

from formats.columns import scan_columns
from formats.segments import Damage, RecordAt, SegmentSource, find_segments, open_segment, scan_segment
from tests.spark.plain_reports import host


def careful_rows(buf, base, path) -> list[tuple]:
    return [(i.offset, i.record.topic, i.record.queue_id, i.record.queue_offset, i.record.total_size,
             len(i.record.body), zlib.crc32(i.record.body) & 0x7FFFFFFF == i.record.body_crc,
             i.record.born_timestamp, i.record.store_timestamp, host(i.record.born_host), host(i.record.store_host),
             i.record.tags, i.record.keys, i.record.uniq_key, i.record.properties,
             i.entry.raft_index if i.entry else None)
            for i in scan_segment(buf, base, path, check_crc=False) if isinstance(i, RecordAt)]


def column_rows(buf, base, path, cuts: list[int]) -> tuple[list[tuple], list[Damage]]:
    rows, damage = [], []
    bounds = [0, *cuts, len(buf)]
    for lo, hi in itertools.pairwise(bounds):
        for item in scan_columns(buf, base, path, start_pos=lo, stop_pos=hi, batch_rows=7):
            if isinstance(item, Damage):
                damage.append(item)
                continue
            props, at = [], 0
            for n in item["prop_counts"]:
                props.append(dict(zip(item["prop_names"][at:at + n], item["prop_values"][at:at + n])))
                at += n
            rows.extend(zip(item["phys_offset"], item["topic"], item["queue_id"], item["queue_offset"], item["size"],
                            item["body_size"], item["body_crc_ok"], item["born_ts"], item["store_ts"],
                            item["born_host"], item["store_host"], item["tags"], item["keys"], item["uniq_key"],
                            props, item["raft_index"]))
    return rows, damage


@pytest.mark.parametrize("kind", ["broker", "raft"])
@pytest.mark.parametrize("pieces", [1, 3, 11, 64])
def test_any_cut_into_ranges_gives_each_record_once(logs, kind, pieces):
    sources = find_segments(logs[kind], (logs[kind].parent.parent / "archive" / logs[kind].parent.name,))
    assert len(sources) >= 3 and (kind == "broker" or sources[0].archived)
    seen: list[tuple] = []
    for source in sources:
        with open_segment(source) as buf:
            expected = careful_rows(buf, source.start, source.path)
            step = len(buf) // pieces + 1
            got, damage = column_rows(buf, source.start, source.path, list(range(step, len(buf), step)))
            assert damage == []
            assert got == expected
            seen.extend(got)
    assert len(seen) == (420 if kind == "broker" else 260)
    if kind == "broker":  # records with an IPv6 host went through the careful path
        assert sum(r[9] == "[2001:db8::7]:41000" for r in seen) == len(range(0, 420, 13))


def test_damage_is_reported_once_and_the_records_after_it_still_read(logs, tmp_path):
    src = find_segments(logs["broker"])[1]
    data = bytearray(src.path.read_bytes())
    with open_segment(SegmentSource(src.start, src.path)) as buf:
        offsets = [i.offset - src.start for i in scan_segment(buf, src.start, src.path) if isinstance(i, RecordAt)]
    victim = offsets[len(offsets) // 2]
    data[victim + 4:victim + 8] = b"\0\0\0\1"  # the magic
    broken = tmp_path / src.path.name
    broken.write_bytes(bytes(data))
    with open_segment(SegmentSource(src.start, broken)) as buf:
        expected = careful_rows(buf, src.start, broken)
        for cuts in ([], [victim - 3], [victim + 100, victim + 200]):
            got, damage = column_rows(buf, src.start, broken, cuts)
            assert got == expected and len(got) == len(offsets) - 1
            assert [(d.offset, d.reason) for d in damage] == [(src.start + victim, "bad magic")][:len(damage)]
            assert len(damage) == (0 if cuts == [victim - 3] else 1)  # a range that starts in damage resyncs silently
