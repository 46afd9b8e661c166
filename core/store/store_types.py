"""What a store hands back and what it calls: where a put went, what recovery found, its
statistics, its role, and the plugin hooks it invokes (the plugin host satisfies
:class:`StoreHooks`; the store does not import it)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from core.metrics.counters import Histogram
from core.store.dispatch import DispatchRequest


class PutResult(NamedTuple):
    """Where a record went. ``flushed`` is False when a sync-flush wait timed out (the record
    is stored all the same: RocketMQ's FLUSH_DISK_TIMEOUT)."""

    phys_offset: int
    queue_offset: int
    size: int
    store_timestamp: int
    flushed: bool = True


class BatchPut(NamedTuple):
    """Where a batch's records went: each one's physical offset, the first's queue offset
    (the rest follow it), where the last one ends, and their store time."""

    offsets: list[int]
    queue_offset: int
    end: int
    store_timestamp: int


class StoreRole(enum.Enum):
    """Whether a store takes local writes (``WRITER``: a master, a raft leader, a single
    broker) or is a replica whose log grows only from outside (``REPLICA``: a slave's bytes
    copied from its master, a raft follower's commits): see ``MessageStore.set_role``."""

    WRITER = "writer"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True)
class LogRecovery:
    """What CommitLog recovery found."""

    scanned_from: int
    end: int
    records_scanned: int
    cut_bytes: int  # bytes of a torn or damaged tail that were zeroed
    cut_reason: str | None


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    clean_shutdown: bool
    log: LogRecovery
    redispatched: int


@dataclass(slots=True)
class StoreStatistics:
    appended: int = 0
    flushes: int = 0
    checkpoints: int = 0
    retired_segments: int = 0
    refused_disk_full: int = 0
    # seconds: a flush round (thread hop and waits included), and its fsyncs alone
    flush_latency: Histogram = field(default_factory=Histogram)
    fsync_latency: Histogram = field(default_factory=Histogram)


class StoreHooks(Protocol):
    """The plugin hooks a store calls (the plugin host is one): after records are dispatched,
    and when a segment is retired."""

    def listens_to_dispatch(self) -> bool: ...

    def records_dispatched(self, store_dir: Path, requests: Sequence[DispatchRequest]) -> None: ...

    def segment_retired(self, segment: Path, archive: Path | None) -> None: ...
