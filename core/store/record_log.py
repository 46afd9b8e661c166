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
the store is made (its interface is :class:`core.store.interfaces.RecordLog`), and can be
driven and measured on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate

from core.store.commitlog import CommitLog
from core.store.interfaces import KeptUnits, RecordLog, Recovery, Retention
from formats.record import MessageRecord, PreparedRecord
from formats.record_batch import RecordBatch


class CommitLogWriter:
    """A master's (or a single broker's) :class:`RecordLog`: records go into the CommitLog
    and are dispatched soon after (``keep`` is the dispatcher's pending list)."""

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

    def truncate(self, end: int) -> int:
        return self.commitlog.truncate(end)

    def writes_resumed(self) -> None:
        pass  # nothing outlives a put here: it is dispatched on the loop's next turn


class ClassicParts:
    """The classic CommitLog's :class:`core.store.interfaces.LogParts`."""

    def __init__(self, log: RecordLog, recovery: Recovery, retention: Retention) -> None:
        self.log = log
        self.recovery = recovery
        self.retention = retention

    def close(self) -> None:
        pass  # the store closes the CommitLog itself

