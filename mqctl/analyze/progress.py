"""One self-rewriting progress line on the terminal while Spark runs: the report being computed and
the tasks of the active stages (from the SparkContext's status tracker)."""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any, Self

POLL_S = 0.5


class ProgressLine:
    def __init__(self, spark_context: Any, stream: Any = None) -> None:
        self.sc = spark_context
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.label = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="analyze-progress", daemon=True)
        self._width = 0
        self._lock = threading.Lock()  # the poller and the main thread share the line

    def __enter__(self) -> Self:
        if self.live:
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.clear()

    def stage(self, label: str) -> None:
        self.label = label
        if not self.live:
            self.stream.write(f"running: {label}\n")
            self.stream.flush()

    def clear(self) -> None:
        with self._lock:
            if self.live and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0

    def _run(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(POLL_S):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            text = f"{self.label}: tasks {done}/{total}" if total else f"{self.label} ..."
            with self._lock:
                self.stream.write("\r" + text.ljust(self._width))
                self.stream.flush()
                self._width = max(self._width, len(text))
