"""The files of one store: its CommitLog, ConsumeQueues and key index under ``root``, and
what is derived from the log as one unit (recovered, cleared, cut and synced together). The
:class:`core.store.interfaces.LogHost` a mode's log parts are given."""

from __future__ import annotations

from pathlib import Path

from core.clock import Clock
from core.config import StoreConfig
from core.store.commitlog import CommitLog
from core.store.consume_queue import ConsumeQueueTable
from core.store.key_index import KeyIndex
from core.store.layout import read_log_floor
from core.store.mapped_file import MappedFile, MappedFileQueue
from core.store.store_types import StoreHooks


class StoreFiles:
    """The files under ``root`` (``data_dir/<node>``)."""

    def __init__(self, root: Path, config: StoreConfig, plugins: StoreHooks | None, clock: Clock) -> None:
        self.root = root
        self.config = config
        self.plugins = plugins
        self.clock = clock  # stamps every record's store time
        self.commitlog = CommitLog(root / "commitlog", config.segment_size_bytes)
        self.queues = ConsumeQueueTable(root / "consumequeue", config.cq_entries_per_file)
        self.index = KeyIndex(root / "index", config.index_slots, config.index_entries)
        self.index_enabled = config.index_enabled

    @property
    def data(self) -> MappedFileQueue:
        return self.commitlog.files

    def log_floor(self) -> int | None:
        """Where the CommitLog continues a sealed raft era (None: it has none)."""
        return read_log_floor(self.root)

    def set_readable_end(self, end: int) -> None:
        self.commitlog.write_offset = self.commitlog.flushed_offset = end

    def recover_derived(self, end: int) -> None:
        self.queues.recover(end, self.commitlog.min_offset)
        if self.index_enabled:
            self.index.recover(end)

    def truncate_derived(self, end: int) -> None:
        """Drop the queue and index entries that point at or past ``end``."""
        for cq in self.queues.queues.values():
            cq.truncate(end)
        self.index.truncate(end)

    def clear_derived(self) -> None:
        self.queues.clear()
        self.index.clear()

    def derived_dirty_files(self) -> list[MappedFile]:
        return self.queues.dirty_files() + self.index.dirty_files()

    def close(self) -> None:
        self.commitlog.close()
        self.queues.close()
        self.index.close()
