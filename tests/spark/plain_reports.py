"""The reports of spark/reports.py computed in plain Python from formats.segments.scan_log, to
check the Spark results number for number."""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path

from formats.consume_queue import CQ_ENTRY_SIZE, iter_cq_entries
from formats.segments import RecordAt, scan_log


def records(log_dir: Path) -> list[RecordAt]:
    return [item for item in scan_log(log_dir, check_crc=False) if isinstance(item, RecordAt)]


def host(h: tuple[str, int]) -> str:
    return f"[{h[0]}]:{h[1]}" if ":" in h[0] else f"{h[0]}:{h[1]}"


def topics(recs: list[RecordAt]) -> dict:
    out: dict = {}
    for r in recs:
        m, b, q = out.get(r.record.topic, (0, 0, set()))
        out[r.record.topic] = (m + 1, b + r.record.total_size, q | {r.record.queue_id})
    return {t: (m, b, len(q)) for t, (m, b, q) in out.items()}


def queues(recs: list[RecordAt]) -> dict:
    out: dict = {}
    for r in recs:
        rec = r.record
        m, b, lo, hi = out.get((rec.topic, rec.queue_id), (0, 0, math.inf, -1))
        out[(rec.topic, rec.queue_id)] = (m + 1, b + rec.total_size, min(lo, rec.queue_offset), max(hi, rec.queue_offset))
    return out


def time_histogram(recs: list[RecordAt], bucket_ms: int) -> dict:
    out: collections.Counter = collections.Counter()
    size: collections.Counter = collections.Counter()
    for r in recs:
        bucket = r.record.store_timestamp // bucket_ms * bucket_ms
        out[bucket] += 1
        size[bucket] += r.record.total_size
    return {k: (out[k], size[k]) for k in out}


def sizes(recs: list[RecordAt]) -> dict:
    out: dict = {}
    for r in recs:
        n = len(r.record.body)
        bits = n.bit_length()
        key = (0 if n == 0 else 1 << (bits - 1), 1 << bits)
        m, b = out.get(key, (0, 0))
        out[key] = (m + 1, b + n)
    return out


def top(counter: collections.Counter, limit: int) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


def keys(recs: list[RecordAt], limit: int = 20) -> list[tuple[str, int]]:
    return top(collections.Counter(k for r in recs for k in r.record.keys), limit)


def tags(recs: list[RecordAt], limit: int = 20) -> list[tuple[str, int]]:
    return top(collections.Counter(r.record.tags for r in recs if r.record.tags is not None), limit)


def producers(recs: list[RecordAt]) -> dict:
    out: dict = {}
    for r in recs:
        rec = r.record
        m, b, t, lo, hi = out.get(host(rec.born_host), (0, 0, set(), math.inf, -math.inf))
        out[host(rec.born_host)] = (m + 1, b + rec.total_size, t | {rec.topic}, min(lo, rec.born_timestamp),
                                    max(hi, rec.born_timestamp))
    return {h: (m, b, len(t), lo, hi) for h, (m, b, t, lo, hi) in out.items()}


def percentile(values: list[int], p: float) -> float:
    """Linear interpolation between the closest ranks (Spark's exact percentile)."""
    s = sorted(values)
    pos = p * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def latency(recs: list[RecordAt], ps: tuple[float, ...]) -> dict:
    by_topic: dict[str, list[int]] = collections.defaultdict(list)
    for r in recs:
        value = r.record.store_timestamp - r.record.born_timestamp
        by_topic[r.record.topic].append(value)
        by_topic["*"].append(value)
    return {t: (len(v), min(v), *[percentile(v, p) for p in ps], max(v)) for t, v in by_topic.items()}


def retries(recs: list[RecordAt]) -> dict:
    out: dict = {}
    for r in recs:
        rec = r.record
        for prefix, kind in (("%RETRY%", "retry"), ("%DLQ%", "dlq")):
            if rec.topic.startswith(prefix):
                m, b, mx = out.get((kind, rec.topic[len(prefix):]), (0, 0, 0))
                out[(kind, rec.topic[len(prefix):])] = (m + 1, b + rec.total_size, max(mx, rec.reconsume_times))
    return out


def duplicates(recs: list[RecordAt]) -> dict:
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for r in recs:
        if r.record.uniq_key is not None:
            seen[r.record.uniq_key].append(r.offset)
    return {k: (len(v), min(v), max(v)) for k, v in seen.items() if len(v) > 1}


def queue_lag(node_dir: Path) -> dict:
    """(topic, queue) -> (entries, min offset, max offset, {group: (committed, lag)})."""
    depth: dict = {}
    for f in sorted((node_dir / "consumequeue").glob("*/*/*")):
        topic, queue_id = f.parent.parent.name, int(f.parent.name)
        for index, entry in iter_cq_entries(f.read_bytes(), int(f.name) // CQ_ENTRY_SIZE):
            if entry.is_padding:
                continue
            n, lo, hi = depth.get((topic, queue_id), (0, math.inf, -1))
            depth[(topic, queue_id)] = (n + 1, min(lo, index), max(hi, index + 1))
    offsets_file = node_dir / "config" / "consumerOffsets.json"
    table = json.loads(offsets_file.read_text())["offsetTable"] if offsets_file.exists() else {}
    out = {}
    for (topic, queue_id), (n, lo, hi) in depth.items():
        groups = {}
        for key, committed in table.items():
            t, _, group = key.partition("@")
            if t == topic and str(queue_id) in committed:
                c = committed[str(queue_id)]
                groups[group] = (c, max(hi - c, 0))
        out[(topic, queue_id)] = (n, lo, hi, groups)
    return out


SIGNATURE = ("total_size", "topic", "queue_id", "queue_offset", "body_crc", "sysflag", "born_timestamp",
             "store_timestamp", "born_host", "uniq_key")


def divergence(first: list[RecordAt], second: list[RecordAt]) -> list[tuple[str, int, int, int]]:
    """(status, from, to, records) runs, as spark.reports.divergence defines them."""
    a = {r.offset: r.record for r in first}
    b = {r.offset: r.record for r in second}
    runs: list[list] = []
    previous_differed = False
    for off in sorted(a.keys() | b.keys()):
        ra, rb = a.get(off), b.get(off)
        if rb is None:
            status = "only_first"
        elif ra is None:
            status = "only_second"
        elif tuple(getattr(ra, f) for f in SIGNATURE) != tuple(getattr(rb, f) for f in SIGNATURE):
            status = "differs"
        else:
            previous_differed = False
            continue
        end = off + (ra or rb).total_size
        if previous_differed and runs[-1][0] == status:
            runs[-1][2] = end
            runs[-1][3] += 1
        else:
            runs.append([status, off, end, 1])
        previous_differed = True
    return [tuple(r) for r in runs]
