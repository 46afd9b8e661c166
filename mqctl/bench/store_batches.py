"""The store's batch path for ``mqctl bench store``: the same records as the per-record run,
arriving as batch bodies of N items (what SEND_BATCH_MESSAGE carries), each parsed into a
:class:`formats.record_batch.RecordBatch` and appended with ``put_batch``, timed together."""

from __future__ import annotations

import time
from pathlib import Path

import trio
import trio.lowlevel

from core.broker.produce.batch_send import cluster_property
from core.config import StoreConfig
from core.store.message_store import open_message_store
from formats.batch import BatchItem, encode_batch
from formats.record import MessageRecord
from formats.record_batch import BatchFields, RecordBatch

CLUSTER_SUFFIX = cluster_property("BenchCluster")


def batch_bodies(records: list[MessageRecord], size: int) -> list[tuple[BatchFields, bytes]]:
    """``records`` as batch bodies of ``size`` items, one queue a body (as a producer's batch)."""
    out = []
    for at in range(0, len(records), size):
        chunk = records[at : at + size]
        first = chunk[0]
        fields = BatchFields(first.topic, first.queue_id, 0, first.born_timestamp, first.born_host,
                             first.store_host, 0)
        props = [{k: v for k, v in rec.properties.items() if k != "WAIT"} for rec in chunk]
        out.append((fields, encode_batch(BatchItem(rec.body, p, rec.flag) for rec, p in zip(chunk, props))))
    return out


async def batch_append(directory: Path, bodies: list[tuple[BatchFields, bytes]], config: StoreConfig) -> tuple[int, int, float]:
    """Parse and append every body (yielding between them, as a broker between requests);
    records, bytes and seconds."""
    async with open_message_store(directory / "batches", config) as store:
        start = time.perf_counter()
        records = total = 0
        for fields, body in bodies:
            batch = RecordBatch.of_body(body, fields, CLUSTER_SUFFIX)
            assert batch is not None, "a bench batch took the per-record path"
            put = store.put_batch(batch)
            records += len(batch)
            total += put.end - put.offsets[0]
            await trio.lowlevel.checkpoint()
        store.dispatch_pending()
        elapsed = time.perf_counter() - start
    return records, total, elapsed
