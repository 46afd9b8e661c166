"""A raft leader's :class:`core.store.interfaces.RecordLog`: a put's records are encoded once
with their final offsets (each entry's position + 48, as :class:`DiskRaftLog` will place it)
and proposed to the raft node as one run of entries; what dispatch needs of them is kept, by
first raft index and term, until :meth:`replication.dledger.commits.RaftCommits.dispatch_committed`
finds them committed (same index and term: same entries).

Also :func:`record_at`, how the raft log places a message record's body (its
``place_body``): the engine itself stores any bytes.
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable, Sequence

from core.errors import ReadOnlyStoreError, StoreError
from core.store.dispatch import Appended, BatchAppended
from core.store.interfaces import KeptUnits
from formats.record import MAGIC_V1, MAGIC_V2, OFF_PHYSICALOFFSET, MessageRecord, PreparedRecord, write_record
from formats.record_batch import RecordBatch
from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.messages import Code

Proposer = Callable[[list[bytes]], "range | Code"]
_PHYS = struct.Struct(">q")
_RECORD_HEAD = struct.Struct(">ii")


class RaftProposals:
    """Puts proposed through the raft member's :data:`Proposer` (refused NOT_LEADER until one
    is attached)."""

    def __init__(self, raft_log: DiskRaftLog) -> None:
        self.raft_log = raft_log
        self.proposer: Proposer | None = None
        # (first raft index, term, what dispatch needs), oldest first
        self.kept: collections.deque[tuple[int, int, Appended | BatchAppended]] = collections.deque()

    def placements(self, sizes: list[int]) -> list[int]:
        return self.raft_log.record_offsets(sizes)

    def write_records(self, records: Sequence[MessageRecord], preps: Sequence[PreparedRecord],
                      queue_offsets: Sequence[int], stamp: int) -> list[int]:
        offsets = self.raft_log.record_offsets([prep[0] for prep in preps])
        bodies = []
        for rec, prep, phys, qo in zip(records, preps, offsets, queue_offsets):
            buf = bytearray(prep[0])
            write_record(buf, 0, rec, prep, qo, phys, stamp)
            bodies.append(bytes(buf))
        self._propose(bodies)
        return offsets

    def write_batch(self, batch: RecordBatch, offsets: list[int], queue_offsets: Sequence[int], stamp: int) -> None:
        self._propose(batch.records_bytes(offsets, queue_offsets, stamp))

    def keep(self, units: KeptUnits, count: int, last_phys: int) -> None:
        index, term = self.raft_log.last_index - count + 1, self.raft_log.last_term
        for unit in units:
            self.kept.append((index, term, unit))
            index += len(unit.offsets) if type(unit) is BatchAppended else 1

    def truncate(self, end: int) -> int:
        raise StoreError("a raft log is cut only by its leader's entries (raft), not by the store")

    def writes_resumed(self) -> None:
        """Leading again: proposals of an earlier term that never committed are not coming."""
        self.kept.clear()

    def _propose(self, bodies: list[bytes]) -> None:
        """Hand encoded records to the raft node (ReadOnlyStoreError when it is not leading)."""
        outcome = Code.NOT_LEADER if self.proposer is None else self.proposer(bodies)
        if isinstance(outcome, Code):
            raise ReadOnlyStoreError(f"raft: {outcome.name} (this member cannot take writes now)")


def record_at(body: bytes, phys: int) -> bytes:
    """A message record's bytes with PHYSICALOFFSET set to where the record now lies (other
    bodies as they are): a broker's raft log's ``place_body``."""
    if len(body) < OFF_PHYSICALOFFSET + 8 or _RECORD_HEAD.unpack_from(body)[1] not in (MAGIC_V1, MAGIC_V2):
        return body
    if _PHYS.unpack_from(body, OFF_PHYSICALOFFSET)[0] == phys:
        return body
    patched = bytearray(body)
    _PHYS.pack_into(patched, OFF_PHYSICALOFFSET, phys)
    return bytes(patched)
