"""A store's upkeep: checkpoints, the disk-usage check, and retention with archiving (the
store's background work besides flushing, dispatching and pre-faulting)."""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from core.store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from core.store.dispatcher import Dispatcher
from core.store.files import StoreFiles
from core.store.group_commit import sync_all
from core.store.interfaces import Retention
from core.store.layout import CHECKPOINT_FILE
from core.store.mapped_file import MappedFile
from core.store.retention import disk_used_ratio
from core.store.store_types import StoreStatistics
from core.store.write_gate import WriteGate
from formats.archive import archive_segment

log = logging.getLogger("core.store.message_store")


class Upkeep:
    """Checkpoints, disk state and retention of the store under ``files``; which segments
    retention takes is ``retention``'s to say (the mode's)."""

    def __init__(self, files: StoreFiles, dispatcher: Dispatcher, gate: WriteGate, stats: StoreStatistics,
                 retention: Retention, archive_dir: Path) -> None:
        self.files = files
        self.root = files.root
        self.config = files.config
        self.dispatcher = dispatcher
        self.gate = gate
        self.stats = stats
        self.retention = retention
        self.archive_dir = archive_dir

    async def checkpoint(self) -> None:
        """Flush the queues and the index, then record how far everything is durable."""
        dispatcher = self.dispatcher
        dispatcher.dispatch_pending()
        dispatched = dispatcher.reput_offset
        await trio.to_thread.run_sync(sync_all, self.files.derived_dirty_files())
        point = Checkpoint(
            physic_msg_timestamp=dispatcher.last_store_ts,
            logics_msg_timestamp=dispatcher.last_dispatch_ts,
            index_msg_timestamp=dispatcher.last_dispatch_ts,
            commitlog_flushed_offset=self.files.commitlog.flushed_offset,
            dispatched_offset=dispatched,
        )
        await trio.to_thread.run_sync(write_checkpoint, self.root / CHECKPOINT_FILE, point)
        self.stats.checkpoints += 1

    def clamp_checkpoint(self, end: int) -> None:
        """The log was cut at ``end``: the checkpoint on disk points no further (blocking, and
        rare: a replica cut where it stops agreeing with its master)."""
        path = self.root / CHECKPOINT_FILE
        point = read_checkpoint(path)
        if point is not None and max(point.commitlog_flushed_offset, point.dispatched_offset) > end:
            write_checkpoint(path, Checkpoint(point.physic_msg_timestamp, point.logics_msg_timestamp,
                                              point.index_msg_timestamp, min(point.commitlog_flushed_offset, end),
                                              min(point.dispatched_offset, end)))

    async def checkpoint_loop(self) -> None:
        while True:
            await trio.sleep(self.config.checkpoint_interval_ms / 1000)
            try:
                await self.checkpoint()
            except OSError as exc:  # the previous checkpoint stays valid; retry next period
                log.error("store %s: checkpoint failed: %s", self.root, exc)

    async def maintenance_loop(self) -> None:
        next_retention = trio.current_time()
        while True:
            self.update_disk_state()
            if trio.current_time() >= next_retention:
                await self.apply_retention()
                next_retention = trio.current_time() + self.config.retention_check_interval_ms / 1000
            await trio.sleep(self.config.disk_check_interval_ms / 1000)

    def update_disk_state(self) -> None:
        ratio = disk_used_ratio(self.root)
        limit = self.config.disk_max_used_ratio
        if ratio > limit:
            if self.gate.disk_full is None:
                log.error("disk %.1f%% used, above the %.1f%% limit: refusing writes", ratio * 100, limit * 100)
            self.gate.set_disk_full(
                f"disk {ratio:.1%} used, above the {limit:.1%} limit (store.disk_max_used_ratio): "
                "writes refused, reads still served"
            )
        else:
            self.gate.set_disk_full(None)

    async def apply_retention(self, now: float | None = None) -> list[Path]:
        """Delete (or archive, then delete) the segments retention takes; drop queue and
        index files that only point below the new start of the log."""
        return await self.retire_segments(self.retention.take(now))

    async def retire_segments(self, segments: list[MappedFile]) -> list[Path]:
        """Archive (when configured) and delete ``segments``, the first files of the log in
        order, then what points only below the log's new start."""
        retired: list[Path] = []
        commitlog = self.files.commitlog
        for seg in segments:
            archive = None
            if self.config.archive:
                try:
                    archive = await trio.to_thread.run_sync(archive_segment, seg.path, self.archive_dir)
                except OSError as exc:  # keep the segment until it can be archived
                    log.error("store %s: archiving %s failed: %s", self.root, seg.path, exc)
                    break
            if not commitlog.files.files or commitlog.files.files[0] is not seg:
                break  # the log changed meanwhile (a raft member's was installed anew)
            commitlog.files.drop_first()
            retired.append(seg.path)
            self.stats.retired_segments += 1
            log.info("retired segment %s%s", seg.path, f" (archived to {archive})" if archive else "")
            if self.files.plugins is not None:
                self.files.plugins.segment_retired(seg.path, archive)
        if retired:
            low = commitlog.min_offset
            self.files.queues.delete_below(low)
            self.files.index.delete_below(low)
            self.dispatcher.reput_offset = max(self.dispatcher.reput_offset, low)
        return retired
