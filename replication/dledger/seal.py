"""Leaving raft: seal the stopped members of a raft group so they continue as a master-slave
group (``replication.mode`` back to async or sync).

```
 before (each member, stopped):  [classic era?][raft entries 0 .. its last, commit checkpoint c]
 1. the log raft would keep: the most up-to-date member's (highest last term, then last index):
    by Leader Completeness it holds every committed entry, and a new leader would commit it all
 2. every other member: cut where it stops agreeing with that log, copy the rest (run by run);
    a member that lacks entries that log no longer holds (retention deleted them there), or
    whose entries lie at other positions (it joined with an empty store before its leader
    placed them for it), is re-laid as an install does: its data files, ConsumeQueues and
    key index go, and it takes that log's retained files as they lie
 3. every member: committed = that log's last index; the store opens once as a raft store and
    dispatches all of it to the ConsumeQueues and the key index
 after:  [classic era?][raft entries 0 .. C][classic segments from the floor on]
         logfloor = the first segment start at or after entry C's end, the same on every member
```
Below the floor the CommitLog is history read by offset (ConsumeQueue entries and offset
msgIds point at the records inside the entries); a classic CommitLog continues at the floor, so
master and slaves agree on every offset. Entries cut from a member were never committed (no
send was answered SUCCESS for them); entries kept beyond the leader's last commit checkpoint
were stored by the last leader and may have been answered with a timeout, as after a raft
failover.

Re-laid members lose the classic segments of an earlier master-slave era, if they had any: the
master keeps them, and serves them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import trio

from core.clock import now_ms
from core.config import StoreConfig
from core.store.checkpoint import Checkpoint, write_checkpoint
from core.store.layout import CHECKPOINT_FILE, LOG_FLOOR_FILE, RAFT_STATE_DIR, holds_unsealed_raft
from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.proposals import record_at
from replication.dledger.recovery import read_data_base
from replication.dledger.state_files import load_commit_checkpoint, save_commit_checkpoint, write_properties

COPY_RUN_ENTRIES = 512
COPY_RUN_BYTES = 4 * 1024 * 1024


class MemberStore(Protocol):
    """A raft member's store, as sealing opens it once (``plugins.ha_dledger.raft_message_store``
    makes one): opening dispatches every committed entry; its log then ends at the last one."""

    @property
    def log_end(self) -> int: ...

    def open(self) -> object: ...

    async def close(self) -> None: ...


# Makes the store of the raft member under a folder (not opened yet).
MemberStoreMaker = Callable[[Path, StoreConfig], MemberStore]


class SealError(Exception):
    """The group's stores cannot be sealed as one master-slave group (the reason says why)."""


@dataclass(frozen=True, slots=True)
class SealedMember:
    root: Path
    last_index_before: int
    last_index: int  # the log's end now, the same on every member
    cut: int  # entries cut (never committed)
    copied: int  # entries copied from the most up-to-date member
    floor: int


def seal_group(roots: list[Path], config: StoreConfig, member_store: MemberStoreMaker) -> list[SealedMember]:
    """Seal the raft stores under ``roots`` (one group's members, all stopped) as described
    above; stores without unsealed raft entries are left alone; ``member_store`` makes the
    store of a member (step 3). Raises :class:`SealError`."""
    roots = [r for r in roots if holds_unsealed_raft(r)]
    if not roots:
        return []
    logs = {r: DiskRaftLog(r, config.segment_size_bytes, base=read_data_base(r) or 0, place_body=record_at)
            for r in roots}
    try:
        for r, raft_log in logs.items():
            raft_log.open(load_commit_checkpoint(r / RAFT_STATE_DIR / "checkpoint"))
        source = max(roots, key=lambda r: (logs[r].last_term, logs[r].last_index))
        last = logs[source].last_index
        aligned = {r: _align(logs[r], logs[source]) for r in roots}
        for r in roots:
            if aligned[r][3]:  # re-laid: what was derived from its old log goes
                shutil.rmtree(r / "consumequeue", ignore_errors=True)
                shutil.rmtree(r / "index", ignore_errors=True)
                (r / CHECKPOINT_FILE).unlink(missing_ok=True)
        for r, raft_log in logs.items():
            raft_log.sync()
            save_commit_checkpoint(r / RAFT_STATE_DIR / "checkpoint", last, last)
    finally:
        for raft_log in logs.values():
            raft_log.close()
    out = []
    for r in roots:
        before, cut, copied, _relaid = aligned[r]
        out.append(SealedMember(r, before, last, cut, copied, _seal_store(r, config, member_store)))
    if len({m.floor for m in out}) > 1:
        raise SealError("the sealed members' logs end at different offsets: "
                        + ", ".join(f"{m.root.name}: {m.floor}" for m in out))
    return out


def _align(ours: DiskRaftLog, theirs: DiskRaftLog) -> tuple[int, int, int, bool]:
    """Make ``ours`` hold exactly ``theirs``, at the same positions: (our last index before,
    entries cut, copied, whether it was re-laid)."""
    before = ours.last_index
    if ours is theirs:
        return before, 0, 0, False
    low = max(ours.first_index, theirs.first_index)
    agree = min(ours.last_index, theirs.last_index)
    while agree >= low and ours.term_at(agree) != theirs.term_at(agree):
        agree -= 1  # same index and term: the same entry and the same log before it
    # the entries after ``agree`` go where theirs lie only if ours lies as theirs does there
    relaid = agree < theirs.first_index or ours.position(agree) != theirs.position(agree)
    if relaid:
        cut = before - ours.first_index + 1
        prev_term = theirs.term_at(theirs.first_index - 1)
        ours.reset(theirs.first_index, -1 if prev_term is None else prev_term, -1)
    else:
        cut = ours.truncate_after(agree)
    copied = 0
    while ours.last_index < theirs.last_index:
        run = theirs.entries(ours.last_index + 1, COPY_RUN_ENTRIES, COPY_RUN_BYTES)
        ours.append(run)
        copied += len(run)
    return before, cut, copied, relaid


def _seal_store(root: Path, config: StoreConfig, member_store: MemberStoreMaker) -> int:
    """Open the store once as a raft member's (it dispatches every committed entry), then
    mark where the classic CommitLog continues; returns that floor."""
    store = member_store(root, config)
    store.open()
    end = store.log_end
    trio.run(store.close)
    stamp = now_ms()
    seg = config.segment_size_bytes
    floor = -(-end // seg) * seg
    write_checkpoint(root / CHECKPOINT_FILE, Checkpoint(stamp, stamp, stamp, floor, floor))
    write_properties(root / LOG_FLOOR_FILE, {"logFloor": str(floor)})
    return floor
