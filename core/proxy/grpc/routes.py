"""Routes and assignments as RocketMQ 5 clients read them: the name servers' queue data, each
queue named with its broker group and the proxy's own gRPC address as the group's endpoints.

A group is listed once, as broker id 0, whatever its state: the proxy follows masters and raft
leaders itself, so a client's route does not change on failover. Queue ids are the 4.x ones
(``0 .. max(read, write) - 1``), each with the permission it has: both, read only (beyond the
write count) or write only (beyond the read count); so a 4.x producer's queue N is a 5.x
consumer's queue N.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.addresses import split_address
from core.client.route import route_document
from core.topic_names import QUEUE_NUMS_MAX
from formats.rocketmq_v2 import messaging_pb2 as pb

PERM_READ, PERM_WRITE = 4, 2
# topics carry no message.type attribute here: every queue takes every type (RocketMQ's MIXED)
ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)


@dataclass(frozen=True, slots=True)
class QueueSpan:
    """One broker group's queues of a topic."""

    group: str
    read: int
    write: int
    perm: int

    def permission(self, queue_id: int) -> int:
        readable = self.perm & PERM_READ and queue_id < self.read
        writable = self.perm & PERM_WRITE and queue_id < self.write
        return pb.READ_WRITE if readable and writable else pb.READ if readable else \
            pb.WRITE if writable else pb.NONE


def queue_spans(body: bytes) -> list[QueueSpan]:
    """GET_ROUTEINFO_BY_TOPIC's queue data, by group name."""
    doc = route_document(body)
    spans = []
    for q in doc.get("queueDatas") or []:
        if not isinstance(q, dict) or not isinstance(q.get("brokerName"), str):
            continue
        read, write = (max(0, min(int(q.get(f, 0)), QUEUE_NUMS_MAX)) for f in ("readQueueNums", "writeQueueNums"))
        spans.append(QueueSpan(q["brokerName"], read, write, int(q.get("perm", 6))))
    return sorted(spans, key=lambda s: s.group)


def endpoints_of(address: str) -> pb.Endpoints:
    host, port = split_address(address)
    scheme = pb.IPv6 if ":" in host else pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def message_queues(topic: str, spans: list[QueueSpan], endpoints: pb.Endpoints) -> list[pb.MessageQueue]:
    out = []
    for span in spans:
        broker = pb.Broker(name=span.group, id=0, endpoints=endpoints)
        for queue_id in range(max(span.read, span.write, 1)):
            out.append(pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id, permission=span.permission(queue_id),
                                       broker=broker, accept_message_types=ACCEPTED_TYPES))
    return out


def writable(spans: list[QueueSpan]) -> list[tuple[str, int]]:
    """(group, queue id) of every queue a send may go to, in a stable order."""
    return [(s.group, q) for s in spans if s.perm & PERM_WRITE for q in range(s.write)]


def assignments(topic: str, spans: list[QueueSpan], endpoints: pb.Endpoints, *, fifo: bool) -> list[pb.Assignment]:
    """QueryAssignment: a FIFO group gets each readable queue (one receive per queue keeps the
    order); any other group one assignment per broker group, queue id -1 (POP from all)."""
    out = []
    for span in spans:
        if not span.perm & PERM_READ or span.read == 0:
            continue
        broker = pb.Broker(name=span.group, id=0, endpoints=endpoints)
        ids = range(span.read) if fifo else (-1,)
        for queue_id in ids:
            out.append(pb.Assignment(message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic), id=queue_id, permission=pb.READ_WRITE, broker=broker,
                accept_message_types=ACCEPTED_TYPES)))
    return out
