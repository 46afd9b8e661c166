"""A batch send's items turned into the records the store appends (SEND_BATCH_MESSAGE, and
SEND_MESSAGE with ``batch`` set by the C++ client).

Every item is stored with the request's topic, queue, born time and hosts, and with its own
body, flag and properties, CLUSTER added (as RocketMQ's batch encoder does)."""

from __future__ import annotations

from dataclasses import dataclass

from formats.batch import decode_batch
from formats.properties import CLUSTER, DELAY, TRAN_MSG, WAIT
from formats.record import Host, MessageRecord
from formats.record_batch import RecordBatch

BATCH_DELAY_REFUSED = "delay levels are not supported for batched messages"  # as RocketMQ
BATCH_TRANSACTION_REFUSED = "transactional messages cannot be batched"
BATCH_EMPTY_REFUSED = "the batch is empty"


@dataclass(frozen=True, slots=True)
class BatchSend:
    """What every item of one batch request shares."""

    topic: str
    queue_id: int
    sysflag: int  # the items' (a compressed batch's items are stored inflated)
    born_timestamp: int
    born_host: Host
    store_host: Host
    reconsume_times: int
    cluster: str


def record_batch(send: BatchSend, body: bytes) -> RecordBatch | None:
    """Batch ``body`` as one :class:`RecordBatch`, or ``None`` when it takes the per-record
    path (:func:`batch_records`): see :mod:`formats.record_batch`."""
    return RecordBatch.of_body(
        body, topic=send.topic, queue_id=send.queue_id, sysflag=send.sysflag, born_timestamp=send.born_timestamp,
        born_host=send.born_host, store_host=send.store_host, reconsume_times=send.reconsume_times,
        suffix=cluster_property(send.cluster))


def cluster_property(cluster: str) -> bytes:
    """The CLUSTER pair every stored item ends with."""
    return f"{CLUSTER}\x01{cluster}\x02".encode()


def batch_records(send: BatchSend, body: bytes) -> list[MessageRecord] | str:
    """The records of batch ``body``, or the remark refusing it (MESSAGE_ILLEGAL); a malformed
    body raises :class:`formats.errors.FormatError`."""
    items = decode_batch(body)
    if not items:
        return BATCH_EMPTY_REFUSED
    cluster_pair = cluster_property(send.cluster)
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
        props[CLUSTER] = send.cluster
        records.append(MessageRecord(
            send.topic, item.body, props, send.queue_id, item.flag, 0, 0, send.sysflag,
            send.born_timestamp, send.born_host, 0, send.store_host, send.reconsume_times,
            properties_text=text))
    return records
