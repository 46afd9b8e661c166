"""Pre-faulting: a worker thread faults in the pages of the mapped segment the next appends
will write (``madvise(MADV_POPULATE_WRITE)``), so the event loop takes no page faults on append.
Writers call :meth:`Prefaulter.wanted` ``.set()`` once they come within half a window of
:attr:`Prefaulter.populated_until`."""

from __future__ import annotations

import logging

import trio

from core.store.commitlog import CommitLog

log = logging.getLogger("core.store.message_store")


class Prefaulter:
    """Keeps ``window_bytes`` past the CommitLog's write offset faulted in."""

    def __init__(self, commitlog: CommitLog, window_bytes: int) -> None:
        self.commitlog = commitlog
        self.window_bytes = window_bytes
        self.enabled = window_bytes > 0
        self.half_window = window_bytes // 2
        self.populated_until = 0
        self.wanted = trio.Event()

    async def loop(self) -> None:
        window = self.window_bytes
        commitlog = self.commitlog
        while True:
            await self.wanted.wait()
            self.wanted = trio.Event()
            seg = commitlog.segment_of(commitlog.write_offset)
            if seg is None:
                continue
            lo = max(commitlog.write_offset, self.populated_until, seg.start)
            hi = min(commitlog.write_offset + window, seg.end)
            if hi > lo:
                ok = await trio.to_thread.run_sync(seg.populate, lo - seg.start, hi - lo)
                if not ok:
                    log.info("page pre-faulting unsupported here; appends take their own faults")
                    return
            self.populated_until = min(seg.end, hi)
