"""The narrow interfaces a message store is assembled from, and the ones replication sees.

A :class:`core.store.message_store.MessageStore` is made of parts, each given what it needs
when it is made (never the store itself). Three of them come from the replication mode, as a
:class:`LogParts` made by a :data:`LogPartsFactory` (Kafka's ``Log`` over its segments, etcd
raft's ``Storage``: one narrow interface, two implementations):

```
              classic (core.store)                  raft (replication.dledger)
 RecordLog    CommitLogWriter: copy into the        RaftProposals: propose to the raft node,
              mapped segment, dispatch next turn    dispatch at commit
 Recovery     CommitLogRecovery: scan the log       RaftRecovery: open the raft log, dispatch
              from the checkpoint, re-dispatch      the committed entries
 Retention    AgeRetention: segments past           RaftRetention: data files committed,
              retention_hours                       durable, applied and old enough
```
A factory is handed the store's files (:class:`LogHost`), its dispatch cursor
(:class:`DispatchCursor`) and the classic recovery (for a CommitLog kept below a raft log).

Replication sees a store through :class:`ReplicatedStore`: the log by offset (a master
streams it, a slave compares it), a replica's appends and their dispatch, truncation, and the
role switch.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from core.clock import Clock
from core.config import StoreConfig
from core.store.dispatch import Appended, BatchAppended
from core.store.mapped_file import MappedFile, MappedFileQueue
from core.store.store_types import RecoveryReport, StoreRole
from formats.record import MessageRecord, PreparedRecord
from formats.record_batch import RecordBatch

# What a store keeps of records just written until they are dispatched: one record each, or a
# batch put as one.
KeptUnits = list[Appended] | list[BatchAppended]

# Called with the new end after the store cut its log and everything it derives from it.
TruncationListener = Callable[[int], None]


class RecordLog(Protocol):
    """Where a store's puts go (the write path is drawn in :mod:`core.store.record_log`)."""

    def placements(self, sizes: list[int]) -> list[int] | None:
        """Where records of these sizes will lie, stored back to back next (room is made for
        them); None when they cannot be stored together (more than a segment)."""

    def write_records(self, records: Sequence[MessageRecord], preps: Sequence[PreparedRecord],
                      queue_offsets: Sequence[int], stamp: int) -> list[int]:
        """Write records of one topic, queue and sysflag (room made with :meth:`placements`
        when more than one); their physical offsets. Raises when the log refuses them."""

    def write_batch(self, batch: RecordBatch, offsets: list[int], queue_offsets: Sequence[int], stamp: int) -> None:
        """Write a batch's records at ``offsets`` (from :meth:`placements`)."""

    def keep(self, units: KeptUnits, count: int, last_phys: int) -> None:
        """Hold the ``count`` records just written for dispatch (``last_phys``: the last one's
        offset)."""

    def truncate(self, end: int) -> int:
        """Cut the log's bytes at ``end`` (a record boundary); the bytes cut. A log that only
        its own protocol may cut (raft) raises :class:`core.errors.StoreError`."""

    def writes_resumed(self) -> None:
        """The store takes local writes again (it was a replica): forget what an earlier
        term left behind."""


class Recovery(Protocol):
    """Brings the store's log and what is derived from it back from disk, before it serves."""

    def recover(self) -> RecoveryReport:
        """Recover the log, the ConsumeQueues, the key index and the dispatch cursor (blocking)."""


class Retention(Protocol):
    """Which of the log's first files may go now."""

    def take(self, now: float | None) -> list[MappedFile]:
        """The leading files to retire, oldest first (the log's new start is recorded before
        this returns, when the log keeps one)."""


class LogParts(Protocol):
    """What a replication mode passes into the store: its log, recovery and retention."""

    @property
    def log(self) -> RecordLog: ...

    @property
    def recovery(self) -> Recovery: ...

    @property
    def retention(self) -> Retention: ...

    def close(self) -> None:
        """Close what these parts opened themselves (the store closes its own files)."""


class LogBatch(Protocol):
    """A dispatch of records found in the log (:class:`core.store.log_dispatch.LogDispatch`)."""

    def add(self, view: mmap.mmap | bytes, pos: int, total: int, phys: int) -> None: ...

    def add_put(self, put: Appended) -> None: ...

    def add_batch_put(self, put: BatchAppended) -> None: ...

    def finish(self) -> int: ...


class DispatchCursor(Protocol):
    """How far the log is dispatched to the ConsumeQueues and the key index, and a way to
    dispatch more (:class:`core.store.dispatcher.Dispatcher`)."""

    reput_offset: int
    last_store_ts: int
    last_dispatch_ts: int

    def batch(self) -> LogBatch: ...

    def dispatch_pending(self) -> int: ...


class LogHost(Protocol):
    """The store's files as its log parts use them (:class:`core.store.files.StoreFiles`)."""

    @property
    def root(self) -> Path: ...

    @property
    def config(self) -> StoreConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def data(self) -> MappedFileQueue:
        """The CommitLog's files (a raft log writes its entries into them)."""

    def set_readable_end(self, end: int) -> None:
        """Readers see the log up to ``end`` (a raft log: the committed entries dispatched)."""

    def recover_derived(self, end: int) -> None:
        """Load the ConsumeQueues and key index, dropping what points at or past ``end``."""

    def clear_derived(self) -> None:
        """Delete every ConsumeQueue and key-index file (the log they pointed into is gone)."""

    def derived_dirty_files(self) -> list[MappedFile]:
        """ConsumeQueue and key-index files written since last asked (to sync)."""

    def log_floor(self) -> int | None: ...


# Makes a mode's log parts on the store's files, its dispatch cursor and the classic recovery.
LogPartsFactory = Callable[[LogHost, DispatchCursor, Recovery], LogParts]


class ReplicatedStore(Protocol):
    """A store as replication uses it (master-slave and raft)."""

    @property
    def root(self) -> Path: ...

    @property
    def config(self) -> StoreConfig: ...

    @property
    def log_end(self) -> int: ...

    @property
    def log_start(self) -> int: ...

    @property
    def log_segment_size(self) -> int: ...

    def read_log(self, position: int, size_max: int) -> bytes: ...

    def read_record(self, phys_offset: int) -> MessageRecord: ...

    def record_start_at_or_before(self, target: int) -> int: ...

    def first_difference(self, offset: int, data: bytes) -> int | None: ...

    async def wait_log_beyond(self, offset: int) -> None: ...

    def append_replicated(self, offset: int, data: bytes) -> None: ...

    def dispatch_replicated(self) -> int: ...

    def truncate(self, end: int) -> int: ...

    def on_truncate(self, listener: TruncationListener) -> None: ...

    def set_role(self, role: StoreRole, reason: str | None = None) -> None: ...

    def set_replicas_short(self, reason: str | None) -> None: ...

    def set_readable_limit(self, limit: int | None) -> None: ...
