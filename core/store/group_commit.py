"""Group commit: under ``store.flush = "sync"`` a put is answered once an fsync covers it, and
every put waiting when a flush starts shares that flush (RocketMQ's GroupCommitService); under
"async", a flush every ``store.flush_interval_ms``."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import trio

from core.config import StoreConfig
from core.store.commitlog import CommitLog
from core.store.mapped_file import MappedFile
from core.store.store_types import StoreStatistics
from core.store.write_gate import WriteGate

log = logging.getLogger("core.store.message_store")


def sync_all(files: list[MappedFile]) -> None:
    """fdatasync each of ``files`` still open (blocks: run it in a worker thread)."""
    for mf in files:
        if not mf.closed:
            mf.sync()


class GroupCommit:
    """The flushing of one store's CommitLog (a failed flush closes ``gate`` to writes)."""

    def __init__(self, root: Path, config: StoreConfig, commitlog: CommitLog, stats: StoreStatistics,
                 gate: WriteGate) -> None:
        self.root = root
        self.config = config
        self.commitlog = commitlog
        self.stats = stats
        self.gate = gate
        # every waiter of a round shares the event of the flush that starts next
        self._next_round_done = trio.Event()
        self._flush_waiters = 0
        self._round_in_flight: trio.Event | None = None
        self._round_started: float | None = None
        self._flush_wanted = trio.Event()

    async def wait_flushed(self, offset: int, timeout_s: float = math.inf) -> bool:
        """Wait until the CommitLog is durable up to ``offset``; False on timeout.

        Waiters share one event per flush round (no per-waiter cancel scope: that alone cost a
        quarter of a sync append); a watchdog wakes them when a flush stalls, so each checks
        its own deadline.
        """
        log_ = self.commitlog
        if log_.flushed_offset >= offset:
            return True
        deadline = trio.current_time() + timeout_s
        while self._flush_waiters >= self.config.sync_flush_waiters_max:
            await self._next_round_done.wait()  # bounded: wait for a round to drain
            if trio.current_time() >= deadline:
                return False
        self._flush_waiters += 1
        gate = self.gate
        try:
            while log_.flushed_offset < offset and gate.open:
                self._flush_wanted.set()
                await self._next_round_done.wait()
                if trio.current_time() >= deadline:
                    break
        finally:
            self._flush_waiters -= 1
        return log_.flushed_offset >= offset

    async def watchdog(self) -> None:
        """Wake flush waiters now and then while a flush is stalled, so timeouts fire."""
        period = self.config.sync_flush_timeout_ms / 1000 / 4
        while True:
            await trio.sleep(period)
            started = self._round_started
            if self._flush_waiters and started is not None and trio.current_time() - started >= period:
                if self._round_in_flight is not None:
                    self._round_in_flight.set()
                stale, self._next_round_done = self._next_round_done, trio.Event()
                stale.set()

    async def flush(self) -> None:
        """Make every appended CommitLog byte durable."""
        done, self._next_round_done = self._next_round_done, trio.Event()
        self._round_in_flight = done
        self._round_started = trio.current_time()
        target = self.commitlog.write_offset
        try:
            if target > self.commitlog.flushed_offset:
                segments = self.commitlog.segments_between(self.commitlog.flushed_offset, target)
                fsync_s = await trio.to_thread.run_sync(_timed_sync, segments)
                self.stats.fsync_latency.observe(None, fsync_s)
                self.stats.flush_latency.observe(None, trio.current_time() - self._round_started)
                self.commitlog.flushed_offset = max(self.commitlog.flushed_offset, target)
                self.stats.flushes += 1
        finally:
            self._round_in_flight = None
            self._round_started = None
            done.set()

    def release_waiters(self) -> None:
        """The store closes: whoever waits for a flush stops waiting."""
        self._next_round_done.set()

    async def loop(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        while True:
            if self.config.flush == "sync":
                await self._flush_wanted.wait()
                self._flush_wanted = trio.Event()
            else:
                with trio.move_on_after(interval):
                    await self._flush_wanted.wait()
                self._flush_wanted = trio.Event()
            try:
                await self.flush()
            except OSError as exc:
                # After a failed fsync the kernel may have dropped the dirty pages: nothing
                # written since can be promised durable. Refuse writes; waiters time out.
                log.critical("store %s: flush failed, refusing writes: %s", self.root, exc)
                self.gate.fail_flush(f"flushing the CommitLog failed ({exc}); writes refused")
                await trio.sleep(interval)

def _timed_sync(segments: list[MappedFile]) -> float:
    """:func:`sync_all` in a worker thread; the seconds it took."""
    started = time.perf_counter()
    sync_all(segments)
    return time.perf_counter() - started
