"""A client's concurrent 5.x acks as BATCH_ACK_MESSAGE (core/proxy/batching.py lines them up,
per client session and broker group; core/proxy/grpc/consuming.py flushes them).

The official SDKs ack one message a call (a push consumer's threads, or ``ack_async`` over a
received batch, ack concurrently). Acks that gather go upstream as one BATCH_ACK_MESSAGE, whose
body names, per POP checkpoint (group, topic, retry flag, start offset, queue, revive queue, pop
time), the acked offsets as a bitset over ``offset - start``:

```
{"brokerName": "broker-a", "acks": [{"c": group, "t": topic, "r": retry flag, "so": start offset,
  "q": queue id, "rq": revive queue, "pt": pop time ms, "b": base64(little-endian bitset)}]}
```

The broker writes one ack record per entry instead of one per message. A batch of one stays an
ACK_MESSAGE (whose answer tells an unknown offset apart, NO_MESSAGE). FIFO acks do not merge:
each moves the group's offset (core/broker/pop/order.py) and goes alone; nor do acks whose
offset is ``CHECKPOINT_MESSAGES_MAX`` or more past their checkpoint's start (a filtered POP).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import orjson

from core.broker.pop.headers import AckHeader
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from formats.pop import CHECKPOINT_MESSAGES_MAX, ReceiptHandle

ACKS_MAX = 1024  # entries of one BATCH_ACK_MESSAGE, as the broker bounds it


@dataclass(frozen=True, slots=True)
class AckOf:
    """One message to ack: its group, its topic as the client named it, and its handle."""

    group: str
    topic: str
    handle: ReceiptHandle

    @property
    def mergeable(self) -> bool:
        return not self.handle.ordered and 0 <= self.handle.queue_offset - self.handle.ck_start_offset \
            < CHECKPOINT_MESSAGES_MAX


def ack_request(ack: AckOf, *, invisible_ms: int | None = None) -> RemotingCommand:
    """ACK_MESSAGE (or, with ``invisible_ms``, CHANGE_MESSAGE_INVISIBLETIME) for one message."""
    handle = ack.handle
    header = AckHeader(group=ack.group, topic=handle.real_topic(ack.group, ack.topic), queue_id=handle.queue_id,
                       handle=handle, offset=handle.queue_offset, invisible_time_ms=invisible_ms or 0)
    return header.request(change=invisible_ms is not None)


def changed_handle(handle: ReceiptHandle, resp: RemotingCommand) -> ReceiptHandle | None:
    """The new handle a CHANGE_MESSAGE_INVISIBLETIME answer makes (the old one is spent); None
    when the answer lacks the fields."""
    try:
        return ReceiptHandle(
            handle.ck_start_offset if handle.ordered else handle.queue_offset,
            int(resp.ext_fields["popTime"]), int(resp.ext_fields["invisibleTime"]),
            int(resp.ext_fields.get("reviveQid", handle.revive_qid)), handle.retry_flag, handle.broker_name,
            handle.queue_id, handle.queue_offset, handle.commit_log_offset)
    except (KeyError, ValueError):
        return None


def batch_ack_request(acks: list[AckOf]) -> RemotingCommand:
    """BATCH_ACK_MESSAGE for acks of one broker group (see the module's docstring)."""
    entries: dict[tuple[str, str, int, int, int, int, int], int] = {}
    for ack in acks:
        h = ack.handle
        key = (ack.group, ack.topic, h.retry_flag, h.ck_start_offset, h.queue_id, h.revive_qid, h.pop_time_ms)
        entries[key] = entries.get(key, 0) | 1 << (h.queue_offset - h.ck_start_offset)
    body = {"brokerName": acks[0].handle.broker_name, "acks": [
        {"c": c, "t": t, "r": r, "so": so, "q": q, "rq": rq, "pt": pt,
         "b": base64.b64encode(bits.to_bytes((bits.bit_length() + 7) // 8, "little")).decode()}
        for (c, t, r, so, q, rq, pt), bits in entries.items()]}
    return RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, language="PYTHON", body=orjson.dumps(body))
