"""A store's upkeep: checkpoints, the disk-usage and retention checks, and pre-faulting the
pages the next appends will write (the MessageStore's background work besides flushing)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from core.config import StoreConfig
from core.store.checkpoint import Checkpoint, write_checkpoint
from core.store.commitlog import CommitLog
from core.store.consume_queue import ConsumeQueueTable
from core.store.key_index import KeyIndex
from core.store.mapped_file import MappedFile
from core.store.retention import disk_used_ratio, expired_segments
from core.store.store_types import StoreHooks, StoreStatistics
from formats.archive import archive_segment

log = logging.getLogger("core.store.message_store")

CHECKPOINT_FILE = "checkpoint"


def sync_all(files: list[MappedFile]) -> None:
    """fdatasync each of ``files`` still open (blocks: run it in a worker thread)."""
    for mf in files:
        if not mf.closed:
            mf.sync()


class StoreUpkeep:
    """Background work of :class:`core.store.message_store.MessageStore` (a mixin)."""

    root: Path
    config: StoreConfig
    plugins: StoreHooks | None
    archive_dir: Path
    commitlog: CommitLog
    queues: ConsumeQueueTable
    index: KeyIndex
    reput_offset: int
    stats: StoreStatistics
    _disk_full: str | None
    _read_only: str | None
    _refusal: str | None
    _flush_failed: bool
    _open: bool
    _last_store_ts: int
    _last_dispatch_ts: int
    _prefault_wanted: trio.Event
    _populated_until: int

    if TYPE_CHECKING:
        def dispatch_pending(self) -> int: ...

    async def checkpoint(self) -> None:
        """Flush the queues and the index, then record how far everything is durable."""
        self.dispatch_pending()
        dispatched = self.reput_offset
        files = self.queues.dirty_files() + self.index.dirty_files()
        await trio.to_thread.run_sync(sync_all, files)
        point = Checkpoint(
            physic_msg_timestamp=self._last_store_ts,
            logics_msg_timestamp=self._last_dispatch_ts,
            index_msg_timestamp=self._last_dispatch_ts,
            commitlog_flushed_offset=self.commitlog.flushed_offset,
            dispatched_offset=dispatched,
        )
        await trio.to_thread.run_sync(write_checkpoint, self.root / CHECKPOINT_FILE, point)
        self.stats.checkpoints += 1

    async def _checkpoint_loop(self) -> None:
        while True:
            await trio.sleep(self.config.checkpoint_interval_ms / 1000)
            try:
                await self.checkpoint()
            except OSError as exc:  # the previous checkpoint stays valid; retry next period
                log.error("store %s: checkpoint failed: %s", self.root, exc)

    async def _maintenance_loop(self) -> None:
        next_retention = trio.current_time()
        while True:
            self._update_disk_state()
            if trio.current_time() >= next_retention:
                await self.apply_retention()
                next_retention = trio.current_time() + self.config.retention_check_interval_ms / 1000
            await trio.sleep(self.config.disk_check_interval_ms / 1000)

    def _update_disk_state(self) -> None:
        ratio = disk_used_ratio(self.root)
        limit = self.config.disk_max_used_ratio
        if ratio > limit:
            if self._disk_full is None:
                log.error("disk %.1f%% used, above the %.1f%% limit: refusing writes", ratio * 100, limit * 100)
            self._disk_full = (
                f"disk {ratio:.1%} used, above the {limit:.1%} limit (store.disk_max_used_ratio): "
                "writes refused, reads still served"
            )
        else:
            self._disk_full = None
        if self._open and not self._flush_failed:
            self._refusal = self._read_only or self._disk_full

    async def apply_retention(self, now: float | None = None) -> list[Path]:
        """Delete (or archive, then delete) segments past the retention time; drop queue and
        index files that only point below the new start of the log."""
        return await self.retire_segments(expired_segments(self.commitlog.files.files, self.commitlog.flushed_offset,
                                                           self.config.retention_hours, now))

    async def retire_segments(self, segments: list[MappedFile]) -> list[Path]:
        """Archive (when configured) and delete ``segments``, the first files of the log in
        order, then what points only below the log's new start."""
        retired: list[Path] = []
        for seg in segments:
            archive = None
            if self.config.archive:
                try:
                    archive = await trio.to_thread.run_sync(archive_segment, seg.path, self.archive_dir)
                except OSError as exc:  # keep the segment until it can be archived
                    log.error("store %s: archiving %s failed: %s", self.root, seg.path, exc)
                    break
            if not self.commitlog.files.files or self.commitlog.files.files[0] is not seg:
                break  # the log changed meanwhile (a raft member's was installed anew)
            self.commitlog.files.drop_first()
            retired.append(seg.path)
            self.stats.retired_segments += 1
            log.info("retired segment %s%s", seg.path, f" (archived to {archive})" if archive else "")
            if self.plugins is not None:
                self.plugins.segment_retired(seg.path, archive)
        if retired:
            low = self.commitlog.min_offset
            self.queues.delete_below(low)
            self.index.delete_below(low)
            self.reput_offset = max(self.reput_offset, low)
        return retired

    async def _prefault_loop(self) -> None:
        window = self.config.prefault_window_bytes
        while True:
            await self._prefault_wanted.wait()
            self._prefault_wanted = trio.Event()
            seg = self.commitlog.segment_of(self.commitlog.write_offset)
            if seg is None:
                continue
            lo = max(self.commitlog.write_offset, self._populated_until, seg.start)
            hi = min(self.commitlog.write_offset + window, seg.end)
            if hi > lo:
                ok = await trio.to_thread.run_sync(seg.populate, lo - seg.start, hi - lo)
                if not ok:
                    log.info("page pre-faulting unsupported here; appends take their own faults")
                    return
            self._populated_until = min(seg.end, hi)
