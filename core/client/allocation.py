"""How the members of a consumer group share a topic's queues (RocketMQ's
AllocateMessageQueueStrategy), sans-IO: every member computes its own share from the same
sorted queue and member lists, so the shares never overlap and leave nothing out.

- ``average`` (AllocateMessageQueueAveragely): contiguous blocks, the first ones one bigger.
- ``consistent-hash`` (AllocateMessageQueueConsistentHash): members sit on a hash ring at
  ``VIRTUAL_NODES`` points each; a queue goes to the member at or after its own point. When a
  member joins or leaves, only the queues next to its points move; the others keep their
  consumer (and their in-memory state).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Mapping
from types import MappingProxyType

from core.client.route import MessageQueue

VIRTUAL_NODES = 10

Allocator = Callable[[list[MessageQueue], list[str], str], list[MessageQueue]]


def allocate_average(queues: list[MessageQueue], members: list[str], me: str) -> list[MessageQueue]:
    """RocketMQ's AllocateMessageQueueAveragely: contiguous blocks, the first ones one bigger."""
    if me not in members or not queues:
        return []
    index, n = members.index(me), len(members)
    mod = len(queues) % n
    size = len(queues) // n + (1 if index < mod else 0) if len(queues) > n else 1
    start = index * size if mod > 0 and index < mod else index * size + mod
    take = min(size, len(queues) - start)
    return [queues[(start + i) % len(queues)] for i in range(max(0, take))]


def ring_hash(key: str) -> int:
    """The first four bytes of the key's MD5, big-endian (as RocketMQ's MD5Hash)."""
    return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:4], "big")


def allocate_consistent_hash(queues: list[MessageQueue], members: list[str], me: str,
                             virtual_nodes: int = VIRTUAL_NODES) -> list[MessageQueue]:
    """The queues whose point on the ring falls to ``me``."""
    if me not in members or not queues:
        return []
    ring = sorted((ring_hash(f"{member}-{i}"), member) for member in members for i in range(virtual_nodes))
    points = [p for p, _ in ring]
    mine = []
    for mq in queues:
        at = bisect.bisect_left(points, ring_hash(f"{mq.topic}@{mq.broker_name}@{mq.queue_id}")) % len(ring)
        if ring[at][1] == me:
            mine.append(mq)
    return mine


ALLOCATORS: Mapping[str, Allocator] = MappingProxyType({"average": allocate_average,
                                                       "consistent-hash": allocate_consistent_hash})
