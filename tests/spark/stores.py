"""Stores the Spark tests read: one written by our broker's store, one by the independent encoder
(DLedger-wrapped, its first segment archived as .zst), and a diverged copy of the second."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.broker.consume.offsets import ConsumerOffsets
from core.config import StoreConfig
from core.store.message_store import opened_store
from formats import sysflag as sf
from formats.archive import archive_segment
from formats.compression import compress
from formats.record import MessageRecord
from formats.segments import segment_name
from tests.independent_encoder import dledger_entry, dledger_padding, record_bytes

SEGMENT = 32 * 1024


def broker_store(node_dir: Path) -> int:
    """Records of several topics, retries, a DLQ, IPv6 and compressed ones, duplicate ids, written
    by MessageStore into small segments; committed offsets for two groups. Returns the count."""
    config = StoreConfig(segment_size_bytes=SEGMENT, cq_entries_per_file=64, index_slots=97, index_entries=400)
    count = 0
    with opened_store(node_dir, config) as store:
        for i in range(420):
            topic = ("Orders", "Payments", "Audit")[i % 3]
            if i % 37 == 0:
                topic = "%RETRY%billing"
            elif i % 53 == 0:
                topic = "%DLQ%billing"
            body = bytes([i % 251]) * (i * 7 % 1500)
            flags = 0
            if i % 41 == 0:
                body, flags = compress(body + b"x" * 200, sf.CompressionType.ZLIB), sf.COMPRESSED
            props = {"TAGS": ("created", "paid", "shipped")[i % 3], "KEYS": f"order-{i % 17} cust-{i % 5}",
                     "UNIQ_KEY": f"{(i - 1 if i % 29 == 0 else i):032X}"}
            if i % 11 == 0:
                del props["TAGS"]
            born = ("2001:db8::7", 41000) if i % 13 == 0 else (f"10.1.0.{i % 4 + 1}", 40000 + i % 4)
            store.put(MessageRecord(
                topic=topic, body=body, properties=props, queue_id=i % 4, sysflag=flags,
                born_timestamp=1_700_000_000_000 + i * 150 - (i % 9) * 3, born_host=born,
                store_host=("127.0.0.1", 10911), reconsume_times=i % 5 if topic.startswith("%") else 0))
            count += 1
        store.dispatch_pending()
    offsets = ConsumerOffsets(node_dir / "config" / "consumerOffsets.json")
    for queue_id in range(4):
        offsets.commit("billing", "Orders", queue_id, 10 + queue_id)
        offsets.commit("audit", "Orders", queue_id, 1000)  # beyond the queue: lag 0
    offsets.commit("billing", "Payments", 2, 3)
    offsets.save()
    return count


def encoder_store(node_dir: Path, records: int = 260) -> None:
    """A DLedger-wrapped log from the independent encoder; its first segment archived."""
    log_dir = node_dir / "commitlog"
    log_dir.mkdir(parents=True)
    seg_start, seg = 0, bytearray()
    for i in range(records):
        body = f"payload-{i}".encode() * (1 + i % 40)
        props = f"TAGS\x01t{i % 4}\x02KEYS\x01k{i % 6}\x02UNIQ_KEY\x01U{i:05d}\x02"
        rec_len = len(record_bytes(topic="Raft", body=body, props=props))
        if len(seg) + 48 + rec_len + 8 > SEGMENT:
            seg += dledger_padding(SEGMENT - len(seg))
            (log_dir / segment_name(seg_start)).write_bytes(bytes(seg).ljust(SEGMENT, b"\0"))
            seg_start += SEGMENT
            seg = bytearray()
        phys = seg_start + len(seg) + 48
        rec = record_bytes(topic="Raft", body=body, props=props, queue_id=i % 2, queue_offset=i // 2,
                           phys_offset=phys, born_ts=1_700_000_100_000 + i * 10, born=("10.2.0.1", 50000),
                           store_ts=1_700_000_100_000 + i * 10 + i % 7, store=("10.2.0.9", 20911))
        seg += dledger_entry(i, 1, seg_start + len(seg), rec)
    (log_dir / segment_name(seg_start)).write_bytes(bytes(seg).ljust(SEGMENT, b"\0"))
    first = log_dir / segment_name(0)
    archive_segment(first, node_dir.parent / "archive" / node_dir.name)
    first.unlink()


def diverged_copy(src: Path, dst: Path, changed_offset: int, cut_from: int) -> None:
    """A copy of an encoder store whose record at ``changed_offset`` has another store time, and
    whose log ends (zeros) at ``cut_from``, a record start in the last segment."""
    shutil.copytree(src, dst)
    archive = src.parent / "archive" / src.name
    if archive.exists():
        shutil.copytree(archive, dst.parent / "archive" / dst.name)
    for f in sorted((dst / "commitlog").iterdir()):
        start = int(f.name)
        data = bytearray(f.read_bytes())
        if start <= changed_offset < start + len(data):
            data[changed_offset - start + 56 + 7] ^= 0x01  # STORETIMESTAMP's low byte
        if start <= cut_from < start + len(data):
            cut = cut_from - start - 48  # the entry header before the record
            data[cut:] = bytes(len(data) - cut)
        f.write_bytes(bytes(data))
