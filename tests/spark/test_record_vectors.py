"""formats.record_vectors (through spark.arrow_batches.RunBatches): runs decoded as vectors give
exactly the rows of the careful scanner record by record, over any cut into ranges, through odd
records and through damage (no Spark here)."""

from __future__ import annotations

import itertools
import random
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from formats.columns import scan_columns
from formats.record import MAGIC_V2
from formats.segments import Damage, SegmentSource, find_segments, open_segment, segment_name
from spark.arrow_batches import RunBatches, commitlog_batch
from spark.schema import commitlog_fields
from tests.independent_encoder import record_bytes

FIELDS = commitlog_fields(with_body=True)
BASE = 3 << 20


def read(buf, base: int, path: Path, cuts: list[int], vectors: bool) -> tuple[list[dict], list[tuple], int]:
    """Rows, damage and how many rows came as vector runs."""
    rows, damage, from_runs = [], [], 0
    for lo, hi in itertools.pairwise([0, *cuts, len(buf)]):
        runs = RunBatches("s", FIELDS, batch_rows=5) if vectors else None
        for item in scan_columns(
            buf, base, path, start_pos=lo, stop_pos=hi, with_body=True, batch_rows=5, runs=runs
        ):
            if isinstance(item, Damage):
                damage.append((item.offset, item.length, item.reason))
                continue
            if isinstance(item, pa.RecordBatch):
                from_runs += item.num_rows
            else:
                item = commitlog_batch("s", item, FIELDS)
            rows.extend(item.to_pylist())
    return rows, damage, from_runs


def assert_same(buf, base: int, path: Path, cuts: list[int]) -> tuple[int, int]:
    expected, expected_damage, _ = read(buf, base, path, cuts, vectors=False)
    got, damage, from_runs = read(buf, base, path, cuts, vectors=True)
    assert damage == expected_damage
    assert got == expected
    return len(got), from_runs


@pytest.mark.parametrize("kind", ["broker", "raft"])
@pytest.mark.parametrize("pieces", [1, 7])
def test_stores_read_the_same_as_vectors(logs, kind, pieces):
    sources = find_segments(logs[kind], (logs[kind].parent.parent / "archive" / logs[kind].parent.name,))
    total = from_runs = 0
    for source in sources:
        with open_segment(source) as buf:
            step = len(buf) // pieces + 1
            rows, runs = assert_same(buf, source.start, source.path, list(range(step, len(buf), step)))
            total, from_runs = total + rows, from_runs + runs
    assert total == (420 if kind == "broker" else 260)
    assert from_runs > total * 0.6  # the runs did most of the work; IPv6 records and range starts not


def v2(record: bytes) -> bytes:
    """The same record as MAGIC_V2: a two-byte topic length."""
    body_len = struct.unpack_from(">i", record, 84)[0]
    at = 88 + body_len
    out = bytearray(record[:at]) + struct.pack(">h", record[at]) + record[at + 1 :]
    out[0:8] = struct.pack(">ii", len(out), MAGIC_V2)
    return bytes(out)


ODD_PROPS = [
    "TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1",
    "TAGS\x01a\x02TAGS\x01b",  # a repeated name: the last value wins
    "KEYS\x01k1\tk2",  # whitespace str.split knows and a plain split on spaces does not
    "KEYS\x01k1\u3000k2",
    "KEYS\x01\u8ba2\u5355 \u5ba2\u6237  x ",  # non-ASCII keys, runs of spaces
    "\x02\x01novalue\x02noseparator\x02a\x01b\x01c\x02\x02",
    "",
    "KEYS\x01",
    "UNIQ_KEY\x01u\x02KEYS\x01   ",
]


def odd_segment(path: Path) -> bytes:
    rng = random.Random(5)
    data = bytearray()
    for i in range(120):
        props = ODD_PROPS[i % len(ODD_PROPS)] if i % 2 else f"TAGS\x01t{i % 3}\x02KEYS\x01id-{i}"
        topic = "BADTOPIC" if i == 50 else ("Orders", "\u8ba2\u5355")[i % 2]
        rec = record_bytes(
            topic=topic,
            body=rng.randbytes(rng.randrange(0, 300)),
            props=props,
            queue_id=i % 3,
            queue_offset=i,
            phys_offset=BASE + len(data),
            born_ts=1_700_000_000_000 + i,
            born=(f"10.0.{i % 2}.{i % 5}", 40000 + i % 3),
            store_ts=1_700_000_000_009 + i,
            store=("127.0.0.1", 10911),
            reconsume=i % 4,
        )
        if i == 50:  # a topic that is not UTF-8 (an encoded surrogate)
            rec = rec.replace(b"BADTOPIC", b"\xed\xa0\x80BADTO")
        if i == 70:  # properties that are not UTF-8
            rec = rec.replace(b"id-70", b"id\xff70")
        if i % 3 == 0:
            rec = v2(rec)
        data += rec
    data += bytes(4096)
    path.write_bytes(data)
    return bytes(data)


def test_odd_records_read_the_same_and_runs_decline_only_what_they_must(tmp_path):
    path = tmp_path / segment_name(BASE)
    data = odd_segment(path)
    with open_segment(SegmentSource(BASE, path)) as buf:
        for cuts in ([], [1000, 5000, 5001, 9000]):
            rows, from_runs = assert_same(buf, BASE, path, cuts)
            assert rows == 118  # the two records that are not UTF-8 are damage
            assert from_runs > 60
    by_offset = {r["phys_offset"]: r for r in read(data, BASE, path, [], vectors=True)[0]}
    by_queue_offset = {r["queue_offset"]: r for r in by_offset.values()}
    assert by_queue_offset[1]["tags"] == "b" and by_queue_offset[1]["properties"] == [("TAGS", "b")]
    assert by_queue_offset[3]["keys"] == by_queue_offset[11]["keys"] == ["k1", "k2"]
    assert by_queue_offset[13]["keys"] == ["\u8ba2\u5355", "\u5ba2\u6237", "x"]
    assert by_queue_offset[5]["properties"] == [("a", "b\x01c")]


@pytest.mark.parametrize("seed", range(6))
def test_damage_reads_the_same_as_vectors(tmp_path, seed):
    path = tmp_path / segment_name(BASE)
    data = bytearray(odd_segment(path))
    rng = random.Random(seed)
    for _ in range(12):
        at = rng.randrange(len(data) - 4096)
        data[at] = rng.randrange(256)
    path.write_bytes(bytes(data))
    with open_segment(SegmentSource(BASE, path)) as buf:
        rows, _ = assert_same(buf, BASE, path, [len(buf) // 3])
    assert rows > 0
