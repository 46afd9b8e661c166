"""Topic routes as a client uses them: queues to publish to and read from, broker addresses."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from core.node_specs import MASTER_ID
from core.topic_names import QUEUE_NUMS_MAX

PERM_READ = 4
PERM_WRITE = 2
_UNQUOTED_KEY = re.compile(rb"([{,])(-?\d+):")


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    brokers: dict[str, dict[int, str]]  # broker name -> broker id -> address
    write_queues: tuple[MessageQueue, ...]
    read_queues: tuple[MessageQueue, ...]

    def master(self, broker_name: str) -> str | None:
        return self.brokers.get(broker_name, {}).get(MASTER_ID)

    def any_address(self, broker_name: str, preferred_id: int = MASTER_ID) -> str | None:
        """The preferred node of a broker group, else its lowest id (a slave when the master is gone)."""
        addrs = self.brokers.get(broker_name, {})
        if preferred_id in addrs:
            return addrs[preferred_id]
        return addrs[min(addrs)] if addrs else None


def route_document(body: bytes) -> dict[str, Any]:
    """TopicRouteData's JSON, standard or with fastjson's unquoted numeric keys."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return orjson.loads(_UNQUOTED_KEY.sub(rb'\1"\2":', body))


def parse_route(topic: str, body: bytes) -> TopicRoute:
    """TopicRouteData, standard JSON or fastjson's unquoted numeric keys."""
    doc = route_document(body)
    brokers = {b["brokerName"]: {int(k): v for k, v in (b.get("brokerAddrs") or {}).items()}
               for b in doc.get("brokerDatas") or []}
    write, read = [], []
    for q in sorted(doc.get("queueDatas") or [], key=lambda q: q["brokerName"]):
        name, perm = q["brokerName"], int(q.get("perm", 6))
        # a name server's counts size these lists: no more than a broker can have
        writes, reads = (min(int(q.get(f, 0)), QUEUE_NUMS_MAX) for f in ("writeQueueNums", "readQueueNums"))
        if perm & PERM_WRITE and MASTER_ID in brokers.get(name, {}):
            write += [MessageQueue(topic, name, i) for i in range(writes)]
        if perm & PERM_READ:
            read += [MessageQueue(topic, name, i) for i in range(reads)]
    return TopicRoute(topic, brokers, tuple(write), tuple(read))
