"""Progress while Spark runs: the report being computed and the tasks of its active stages (from
the SparkContext's status tracker), drawn by mqctl/common/progress.py. Off a terminal, one
``running: <report>`` line per report instead."""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack
from types import TracebackType
from typing import Any, Self

from mqctl.common.progress import Bar, progress_bar, shown

POLL_S = 0.5


class ProgressLine:
    def __init__(self, spark_context: Any, stream: Any = None) -> None:
        self.sc = spark_context
        self.stream = stream or sys.stderr
        self.live = shown()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="analyze-progress", daemon=True)
        self._stack = ExitStack()
        self._bar: Bar | None = None

    def __enter__(self) -> Self:
        if self.live:
            self._bar = self._stack.enter_context(progress_bar("analyze", None))
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._stack.close()

    def stage(self, label: str) -> None:
        if self._bar is not None:
            self._bar.update(description=label, completed=0, total=None)
        else:
            self.stream.write(f"running: {label}\n")
            self.stream.flush()

    def clear(self) -> None:
        """Nothing to clear: rich keeps the bar below what is printed."""

    def _run(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(POLL_S):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if self._bar is not None:
                self._bar.update(completed=done, total=total or None)
