"""The epoch file of a store whose broker runs under a controller (RocketMQ's
``epochFileCheckpoint`` and its ``.bak``; layout in :mod:`formats.epoch_file`): at which
CommitLog offset each master epoch began.

A broker that becomes master appends its new epoch at its log's end; a broker that becomes a
slave cuts its log at the point it shares with its new master
(:func:`replication.controller.epochs.consistent_point`) and then the epochs from there on
(:meth:`EpochCheckpoint.truncate`). Every change is written to a temporary file, synced and
renamed over the file, whose previous copy becomes the ``.bak``: a damaged or missing file is
read from the ``.bak``, as RocketMQ reads it.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import StoreCorruptError
from core.store.checkpoint import replace_durably
from formats.epoch_file import EpochEntry, EpochFileError, decode_epoch_file, encode_epoch_file

EPOCH_FILE = "epochFileCheckpoint"
# the newest master epoch this broker itself served as master (slaves copy the epoch file, so it
# alone does not say who was master last; leaving controller mode asks)
MASTER_EPOCH_FILE = "masterEpoch"


def master_epoch_served(root: Path) -> int:
    """The newest master epoch the broker of store ``root`` served as master; 0: none."""
    try:
        return int((root / MASTER_EPOCH_FILE).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def note_master_epoch(root: Path, epoch: int) -> None:
    replace_durably(root / MASTER_EPOCH_FILE, f"{epoch}\n".encode())


class EpochCheckpoint:
    """The epochs of the store under ``root``, loaded at once."""

    def __init__(self, root: Path) -> None:
        self.path = root / EPOCH_FILE
        self.backup = root / (EPOCH_FILE + ".bak")
        self.entries: list[EpochEntry] = self._load()

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def begin(self, epoch: int, start_offset: int) -> None:
        """Master epoch ``epoch`` begins at ``start_offset`` (this broker's log end as it
        becomes master): later epochs only, never before the last one's start."""
        if self.entries and (epoch <= self.entries[-1].epoch or start_offset < self.entries[-1].start_offset):
            raise ValueError(f"epoch {epoch} at {start_offset} cannot follow {self.entries[-1]}")
        self.entries.append(EpochEntry(epoch, start_offset))
        self._save()

    def truncate(self, end: int) -> None:
        """The log was cut at ``end``: epochs that begin there or later held nothing that is left."""
        kept = [e for e in self.entries if e.start_offset < end]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _load(self) -> list[EpochEntry]:
        problems = []
        for path in (self.path, self.backup):
            try:
                return decode_epoch_file(path.read_bytes())
            except FileNotFoundError:
                continue
            except EpochFileError as exc:
                problems.append(f"{path.name}: {exc}")
        if problems:
            raise StoreCorruptError("no readable epoch file: " + "; ".join(problems), self.path)
        return []

    def _save(self) -> None:
        replace_durably(self.path, encode_epoch_file(self.entries), self.backup)
