"""A batch send's items turned into the records the store appends (SEND_BATCH_MESSAGE, and
SEND_MESSAGE with ``batch`` set by the C++ client).

Every item is stored with the request's fields (:class:`formats.record_batch.BatchFields`) and
its own body, flag and properties, CLUSTER added (as RocketMQ's batch encoder does)."""

from __future__ import annotations

from formats.batch import decode_batch
from formats.properties import CLUSTER, DELAY, TRAN_MSG, WAIT
from formats.record import MessageRecord
from formats.record_batch import BatchFields, RecordBatch

BATCH_DELAY_REFUSED = "delay levels are not supported for batched messages"  # as RocketMQ
BATCH_TRANSACTION_REFUSED = "transactional messages cannot be batched"
BATCH_EMPTY_REFUSED = "the batch is empty"


def record_batch(fields: BatchFields, cluster: str, body: bytes) -> RecordBatch | None:
    """Batch ``body`` as one :class:`RecordBatch`, or ``None`` when it takes the per-record
    path (:func:`batch_records`): see :mod:`formats.record_batch`."""
    return RecordBatch.of_body(body, fields, cluster_property(cluster))


def cluster_property(cluster: str) -> bytes:
    """The CLUSTER pair every stored item ends with."""
    return f"{CLUSTER}\x01{cluster}\x02".encode()


def batch_records(fields: BatchFields, cluster: str, body: bytes) -> list[MessageRecord] | str:
    """The records of batch ``body``, or the remark refusing it (MESSAGE_ILLEGAL); a malformed
    body raises :class:`formats.errors.FormatError`."""
    items = decode_batch(body)
    if not items:
        return BATCH_EMPTY_REFUSED
    cluster_pair = cluster_property(cluster)
    records = []
    for item in items:
        props, text = item.properties, item.properties_text
        if DELAY in props and props[DELAY] not in ("", "0"):
            return BATCH_DELAY_REFUSED
        if TRAN_MSG in props:
            return BATCH_TRANSACTION_REFUSED
        if WAIT in props or CLUSTER in props or text is None or (text and not text.endswith(b"\x02")):
            props = {k: v for k, v in props.items() if k != WAIT}
            text = None  # re-encoded from the dict
        else:
            text += cluster_pair  # the item's own bytes, CLUSTER appended: no re-encode
        props[CLUSTER] = cluster
        records.append(MessageRecord(
            fields.topic, item.body, props, fields.queue_id, item.flag, 0, 0, fields.sysflag,
            fields.born_timestamp, fields.born_host, 0, fields.store_host, fields.reconsume_times,
            properties_text=text))
    return records
