"""A generated CommitLog with the variety of a real one, for `mqctl bench analyze` and the tests of
the Spark reports: several topics, retry and DLQ topics, producers on several hosts, keys, tags,
a few compressed bodies, duplicate UNIQ_KEYs (producer retries) and a spread of store latencies.

Records are laid out exactly as the store lays them out: back to back in fixed-size segments,
each full segment closed by a BLANK (classic) or by padding (DLedger-wrapped, one raft entry per
record). Deterministic for a seed, so two calls give byte-identical stores.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from formats import dledger
from formats import sysflag as sf
from formats.compression import compress
from formats.msgid import UniqKeyGenerator
from formats.record import BLANK_SIZE, MessageRecord, encode_blank, prepare_record, write_record
from formats.segments import segment_name

TOPICS = ("Orders", "Payments", "Audit", "Clicks", "Inventory")
RETRY_TOPIC = "%RETRY%billing"
DLQ_TOPIC = "%DLQ%billing"
PRODUCER_HOSTS = (("10.0.0.11", 40001), ("10.0.0.12", 40002), ("10.0.0.13", 40003))
STORE_HOST = ("10.0.0.1", 10911)
QUEUES = 8
START_MS = 1_763_700_000_000  # 2025-11-21


@dataclass(frozen=True, slots=True)
class GeneratedStore:
    records: int
    bytes: int  # record bytes (without end markers and unwritten space)
    segments: int


def generate_store(commitlog: Path, total_bytes: int, *, segment_size: int = 1 << 30, body_max: int = 8192,
                   seed: int = 7, dledger_wrapped: bool = False) -> GeneratedStore:
    """Write segments into ``commitlog`` until ``total_bytes`` of records are stored."""
    commitlog.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    uniq = UniqKeyGenerator("10.0.0.11", pid=4242)
    queue_offsets: dict[tuple[str, int], int] = {}
    seg = bytearray(segment_size)
    seg_start = pos = written = records = segments = 0
    raft_index = 0
    store_ms = START_MS
    last_uniq: str | None = None
    head = dledger.HEADER_SIZE if dledger_wrapped else 0
    while written < total_bytes:
        rec = _random_record(rng, uniq, last_uniq, body_max)
        last_uniq = rec.properties["UNIQ_KEY"]
        prep = prepare_record(rec)
        size = prep[0]
        if pos + head + size + BLANK_SIZE > segment_size:
            _close_segment(commitlog, seg, seg_start, pos, dledger_wrapped)
            segments += 1
            seg_start += segment_size
            seg = bytearray(segment_size)
            pos = 0
        key = (rec.topic, rec.queue_id)
        queue_offset = queue_offsets.get(key, 0)
        queue_offsets[key] = queue_offset + 1
        store_ms += rng.choice((0, 0, 1, 2))
        rec.born_timestamp = store_ms - rng.randint(0, 40) - (rng.random() < 0.01) * rng.randint(100, 3000)
        if dledger_wrapped:
            seg[pos:pos + head] = dledger.encode_header(raft_index, 1, seg_start + pos, size)
            raft_index += 1
        write_record(seg, pos + head, rec, prep, queue_offset, seg_start + pos + head, store_ms)
        pos += head + size
        written += size
        records += 1
    _write(commitlog / segment_name(seg_start), seg[:segment_size])
    return GeneratedStore(records, written, segments + 1)


def _random_record(rng: random.Random, uniq: UniqKeyGenerator, last_uniq: str | None,
                   body_max: int) -> MessageRecord:
    roll = rng.random()
    topic = RETRY_TOPIC if roll < 0.03 else DLQ_TOPIC if roll < 0.04 else rng.choice(TOPICS)
    body = rng.randbytes(rng.randint(16, body_max))
    flags = 0
    if rng.random() < 0.02:
        body = compress(body * 2, sf.CompressionType.ZLIB)
        flags = sf.COMPRESSED
    props = {"TAGS": rng.choice(("created", "paid", "shipped", "cancelled")),
             "KEYS": f"order-{rng.randint(0, 5000)}",
             # one record in fifty repeats the previous id: a producer retry stored twice
             "UNIQ_KEY": last_uniq if last_uniq and rng.random() < 0.02 else uniq.next(START_MS),
             "WAIT": "true"}
    reconsume = 0
    if topic in (RETRY_TOPIC, DLQ_TOPIC):
        props["RETRY_TOPIC"] = "Orders"
        reconsume = rng.randint(1, 16)
    return MessageRecord(topic=topic, body=body, properties=props, queue_id=rng.randrange(QUEUES),
                         sysflag=flags, born_host=rng.choice(PRODUCER_HOSTS), store_host=STORE_HOST,
                         reconsume_times=reconsume)


def _close_segment(commitlog: Path, seg: bytearray, start: int, pos: int, wrapped: bool) -> None:
    remaining = len(seg) - pos
    seg[pos:pos + 8] = dledger.encode_padding(remaining) if wrapped else encode_blank(remaining)
    _write(commitlog / segment_name(start), seg)


def _write(path: Path, data: bytearray) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
