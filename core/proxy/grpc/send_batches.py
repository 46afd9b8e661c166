"""A client's concurrent 5.x sends as batch requests (core/proxy/batching.py lines them up;
core/proxy/grpc/producing.py flushes them).

Lines are per (client session, broker group, topic, the queues they may go to): a message
group's line has its one queue and is ordered, so a group's messages are stored in the order the
proxy read them. A batch of one is SEND_MESSAGE_V2 as before; more are SEND_BATCH_MESSAGE (at
most ``BATCH_MESSAGES_MAX`` messages and ``BATCH_BYTES_MAX`` bytes) to one queue: the line's
next queue in turn. Transactional halves, delayed or timed messages and
compressed bodies do not merge (the broker refuses them in batches). A batch request carries one
born timestamp, the earliest of its messages'. The broker's answer to a batch is every
message's: the status is shared, the offsets follow on from the first.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.client.producer import send_request
from core.proxy.session import ClientSession
from core.remoting.command import RemotingCommand
from formats.batch import BatchItem, encode_batch

BATCH_MESSAGES_MAX = 128
BATCH_BYTES_MAX = 512 * 1024


@dataclass(frozen=True, slots=True)
class SendLine:
    """Where a line's batches go: on ``session``, to ``group``'s ``topic``, one of ``queue_ids``
    in turn (a message group's line: its one queue)."""

    session: ClientSession
    group: str
    topic: str
    queue_ids: tuple[int, ...]
    ordered: bool


@dataclass(slots=True)
class Send:
    """One message to send: what its request is made of."""

    topic: str
    body: bytes
    sysflag: int
    properties: dict[str, str]
    born_ms: int


@dataclass(slots=True)
class SendAnswer:
    """The broker's answer for one message of a request: the response, and which message of
    the request it was (``index``: its msgId is the index-th, its offset the first plus index)."""

    response: RemotingCommand | None
    index: int = 0

    def offset(self) -> int:
        return int(self.response.ext_fields.get("queueOffset", "-1")) + self.index if self.response else -1

    def msg_id(self) -> str:
        if self.response is None:
            return ""
        ids = self.response.ext_fields.get("msgId", "").split(",")
        return ids[self.index] if self.index < len(ids) else ""


def send_batch_request(sends: list[Send], queue_id: int) -> RemotingCommand:
    """SEND_MESSAGE_V2 for one, SEND_BATCH_MESSAGE for more (RocketMQ's proxy sends with the
    topic as the producer group)."""
    first = sends[0]
    if len(sends) == 1:
        return send_request(first.topic, first.topic, queue_id, first.body, first.sysflag, 0, first.properties,
                            born_ms=first.born_ms)
    body = encode_batch([BatchItem(s.body, s.properties) for s in sends])
    return send_request(first.topic, first.topic, queue_id, body, 0, 0, {},
                        born_ms=min(s.born_ms for s in sends), batch=True)
