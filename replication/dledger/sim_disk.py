"""The simulator's disk log: the real :class:`DiskRaftLog` over real files, beside a
:class:`MemoryLog` model of what it must hold, and a power loss that tears what was not synced.

```
 writes  -> DiskRaftLog (mapped files)      and the model (MemoryLog), in lockstep
 reads   <- DiskRaftLog                     (what the raft core sees is what the disk code reads)
 sync    :  the files written since the last sync, as their bytes were when it began, become
            the durable image of each file (fdatasync)
 power loss: every file as the disk may hold it: each 512-byte sector written since its last
            sync from before or after the write, at random (torn, reordered, lost writes); a
            file made since then kept in part or gone; one deleted since then back or gone
            (unlinks are not synced); then DiskRaftLog.open recovers it
 scripted:  a test may name the sectors that reached the disk instead (SectorsReached); files
            made since the last sync are then kept, and unlinks reach the disk
```
After recovery the log must hold every entry the model had synced, and past that only a prefix
of what it held before the loss: nothing torn is taken for an entry. The ``start``, ``currterm``
and checkpoint files are written with fsync and rename, so they survive as written.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.raft_log import Entry, MemoryLog, _LogImage

SECTOR = 512

SectorsReached = Callable[[Path, int], bool]
"""A scripted power loss: whether the sector at this byte offset of this data or index file,
written since the file's last sync, reached the disk before the power went."""


@dataclass(frozen=True, slots=True)
class DiskSnapshot:
    """A sync as it began: the model's image, and the bytes of each file changed since the last."""

    image: _LogImage
    files: dict[Path, bytes]

    @property
    def last_index(self) -> int:
        return self.image.last_index


class RecoveryViolation(AssertionError):
    """The disk log recovered from a power loss into something it must not hold."""


class DiskModelLog:
    """A :class:`replication.dledger.raft_log.RaftLog` for the simulator (see the module docstring)."""

    def __init__(self, root: Path, segment_size: int, rng: random.Random) -> None:
        self.root = root
        self.segment_size = segment_size
        self.rng = rng
        self.disk = DiskRaftLog(root, segment_size, index_file_entries=256)
        self.disk.open()
        self.model = MemoryLog()
        self._durable_bytes: dict[Path, bytes] = {}  # each data and index file as its last sync left it
        self.power_losses = 0

    # ------------------------------------------------------------------ RaftLog: reads from disk

    @property
    def first_index(self) -> int:
        return self.disk.first_index

    @property
    def last_index(self) -> int:
        return self.disk.last_index

    @property
    def last_term(self) -> int:
        return self.disk.last_term

    @property
    def install_end(self) -> int:
        return self.disk.install_end

    def term_at(self, index: int) -> int | None:
        return self.disk.term_at(index)

    def entry(self, index: int) -> Entry | None:
        return self.disk.entry(index)

    def entries(self, start: int, count_max: int, bytes_max: int) -> Sequence[Entry]:
        return self.disk.entries(start, count_max, bytes_max)

    # ------------------------------------------------------------------ RaftLog: writes to both

    def append(self, entries: Sequence[Entry]) -> None:
        self.disk.append(entries)
        self.model.append(list(entries))

    def truncate_after(self, index: int) -> int:
        dropped = self.disk.truncate_after(index)
        if self.model.truncate_after(index) != dropped:
            raise RecoveryViolation(f"the disk log and its model disagree on a cut after {index}")
        return dropped

    def reset(self, start: int, prev_term: int, install_end: int) -> None:
        self.disk.reset(start, prev_term, install_end)
        self.model.reset(start, prev_term, install_end)

    def compact(self, upto: int) -> int:
        """Retention as the store does it: delete the data files whose entries all lie at or
        before ``upto``; returns the last index deleted (maybe less than ``upto``)."""
        gone = [f for f, last in itertools.takewhile(lambda fl: fl[1] <= upto, self.disk.closed_files())]
        if not gone:
            return self.disk.first_index - 1
        start = self.disk.begin_at(self.disk.data.files[len(gone)].start)
        for _ in gone:
            self.disk.data.drop_first()
        self.model.compact(start - 1)  # nothing when they all lay below the start already
        return start - 1

    # ------------------------------------------------------------------ what the simulator asks

    @property
    def changed_from(self) -> int:
        return self.model.changed_from

    @changed_from.setter
    def changed_from(self, value: int) -> None:
        self.model.changed_from = value

    @property
    def dirty(self) -> bool:
        return self.model.dirty

    @property
    def durable(self) -> _LogImage:
        return self.model.durable

    def all(self) -> list[Entry]:
        return self.model.all()

    def snapshot(self) -> DiskSnapshot:
        """What a sync starting now makes durable: the model's image and the changed files."""
        files = {mf.path: bytes(mf.view) for mf in self.disk.take_dirty_files()}
        return DiskSnapshot(self.model.snapshot(), files)

    def make_durable(self, snapshot: DiskSnapshot) -> None:
        self.model.make_durable(snapshot.image)
        self._durable_bytes.update(snapshot.files)

    def sync(self) -> int:
        """Count every write as kept (store.flush = "async": the page cache survives a process
        crash); the files are not synced."""
        return self.model.sync()

    def process_crash(self, trusted_through: int) -> None:
        """The process dies, the machine does not: the files stay as written; recovery must
        find exactly the log it had."""
        self.disk.close()
        self.disk = DiskRaftLog(self.root, self.segment_size, index_file_entries=256)
        self.disk.open(trusted_through)
        model = self.model
        found = (self.disk.first_index, self.disk.last_index, self.disk.install_end)
        if found != (model.first_index, model.last_index, model.install_end) or any(
                self.disk.entry(i) != model.entry(i) for i in range(model.first_index, model.last_index + 1)):
            raise RecoveryViolation(f"after a process crash the log is {found}, not "
                                    f"{(model.first_index, model.last_index, model.install_end)} as written")

    # ------------------------------------------------------------------ power loss

    def power_loss(self, trusted_through: int, reached: SectorsReached | None = None) -> None:
        """Lose power: tear what was not synced (the sectors ``reached`` names, else a seeded
        draw), recover, check, and go on from what the disk kept (the model becomes that)."""
        self.power_losses += 1
        live = self.model
        self.disk.close()
        paths = {p for d in ("commitlog", "dledger/index") if (self.root / d).is_dir()
                 for p in (self.root / d).iterdir() if p.name.isdigit()}
        for path in sorted(paths | set(self._durable_bytes)):
            kept = self._after_loss(path, path.read_bytes() if path.exists() else None, self._durable_bytes.get(path),
                                    reached)
            if kept is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(kept)
        self._durable_bytes = {p: p.read_bytes() for p in paths | set(self._durable_bytes) if p.exists()}
        self.disk = DiskRaftLog(self.root, self.segment_size, index_file_entries=256)
        self.disk.open(trusted_through)
        self._check_recovered(live)
        model = MemoryLog()
        prev_term = self.disk.term_at(self.disk.first_index - 1)
        model.reset(self.disk.first_index, -1 if prev_term is None else prev_term, self.disk.install_end)
        model.append([e for i in range(self.disk.first_index, self.disk.last_index + 1)
                      if (e := self.disk.entry(i)) is not None])
        model.sync()
        self.model = model

    def _after_loss(self, path: Path, now: bytes | None, synced: bytes | None,
                    reached: SectorsReached | None) -> bytes | None:
        rng = self.rng
        if now is None:  # deleted since its last sync: the unlink may not have reached the disk
            return synced if synced is not None and reached is None and rng.random() < 0.5 else None
        if synced is None:  # made since the last sync
            if reached is None and rng.random() < 0.3:
                return None
            synced = bytes(len(now))
        if len(synced) != len(now):
            synced = synced[: len(now)].ljust(len(now), b"\0")
        out = bytearray(synced)
        for at in range(0, len(now), SECTOR):
            if now[at: at + SECTOR] != synced[at: at + SECTOR] and (
                    rng.random() < 0.5 if reached is None else reached(path, at)):
                out[at: at + SECTOR] = now[at: at + SECTOR]
        return bytes(out)

    def _check_recovered(self, before: MemoryLog) -> None:
        """The recovered log is some synced prefix continued by what the log held before the
        loss, and it keeps every synced entry the log still held then."""
        disk, durable = self.disk, before.durable
        if disk.first_index not in (durable.start, before.first_index):
            raise RecoveryViolation(f"after a power loss the log begins at {disk.first_index}, neither its "
                                    f"synced start {durable.start} nor its start {before.first_index}")
        kept = durable.start - 1  # synced and still held before the loss: must survive
        while kept < min(durable.last_index, before.last_index) and durable.entry(kept + 1) == before.entry(kept + 1):
            kept += 1
        if disk.first_index == durable.start and disk.last_index < kept:
            raise RecoveryViolation(f"after a power loss the log ends at {disk.last_index}: "
                                    f"synced entries up to {kept} are lost")
        continued = False  # past the synced prefix: only what the log held before the loss
        for i in range(disk.first_index, disk.last_index + 1):
            e = disk.entry(i)
            synced, held = e == durable.entry(i), e == before.entry(i)
            if not held and (continued or not synced):
                raise RecoveryViolation(f"after a power loss the log holds entry {i} as {e}: neither synced "
                                        f"({durable.entry(i)}) nor held before ({before.entry(i)}) after what precedes it")
            continued = continued or not synced

    def close(self) -> None:
        self.disk.close()
