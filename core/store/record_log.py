"""The seam between a store's write path and the log that holds its records.

```
 MessageStore.put / put_many / put_batch   refuse what the store refuses; claim queue offsets,
        |                                  index room and a store time (every allocation first)
        |  log.placements(sizes)           where the records will lie, back to back
        |  log.write_records / write_batch the records encoded once, with their offsets
        |  log.keep(units, ...)            what dispatch needs of them
        v
  CommitLogWriter (here)                   RaftProposals (replication.dledger.proposals)
  copied into the CommitLog's mapped       proposed to the raft node as one run of entries;
  segment; dispatched on the loop's        kept until they commit, dispatched then
  next turn
```
The write path is one straight line whichever log a store has; the log is chosen once, when
the store is made, and can be driven and measured on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Protocol

from core.store.commitlog import CommitLog
from core.store.dispatch import Appended, BatchAppended
from formats.record import MessageRecord, PreparedRecord
from formats.record_batch import RecordBatch

# What a store keeps of records just written until they are dispatched: one record each, or a
# batch put as one.
KeptUnits = list[Appended] | list[BatchAppended]


class RecordLog(Protocol):
    """Where a store's puts go."""

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


class CommitLogWriter:
    """A master's (or a single broker's) :class:`RecordLog`: records go into the CommitLog
    and are dispatched soon after (``keep`` is the store's pending list)."""

    def __init__(self, commitlog: CommitLog, keep: Callable[[KeptUnits, int, int], None]) -> None:
        self.commitlog = commitlog
        self.keep = keep

    def placements(self, sizes: list[int]) -> list[int] | None:
        if not self.commitlog.make_room(sum(sizes)):
            return None
        return list(accumulate(sizes[:-1], initial=self.commitlog.write_offset))

    def write_records(self, records: Sequence[MessageRecord], preps: Sequence[PreparedRecord],
                      queue_offsets: Sequence[int], stamp: int) -> list[int]:
        if len(records) == 1:  # anywhere: the CommitLog rolls a segment for it when needed
            return [self.commitlog.append(records[0], preps[0], queue_offsets[0], stamp)]
        return self.commitlog.append_many(records, preps, queue_offsets, stamp)

    def write_batch(self, batch: RecordBatch, offsets: list[int], queue_offsets: Sequence[int], stamp: int) -> None:
        self.commitlog.append_parts(batch.encode(offsets, queue_offsets, stamp), offsets[-1] + batch.sizes[-1] - offsets[0])
