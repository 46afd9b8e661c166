"""The history a drill's client process writes, one JSON array a line, and its reader.

```
 ["a", key, started, ended, outcome, queue, queue_offset, why, producer]   a send attempt
 ["d", key, queue, queue_offset, at, consumer, ordered]                    a delivery
```

Times are seconds since the drill's start (``t0``, epoch seconds, the same for every process:
they share this machine's clock). ``queue`` is ``"ChaosDrill@broker-a/3"`` (:func:`queue_label`;
"" when the client was not told), ``outcome`` ``ok`` | ``failed`` | ``unknown``. ``ordered``: 1 when the consumer
promises queue order (a push consumer), 0 for a POP consumer.

This module imports nothing but the standard library: the stock clients' workers run it on a
PYTHONPATH of their own.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import IO, Any

FLUSH_S = 0.2


def queue_label(topic: str, broker: str, queue_id: int | str) -> str:
    return f"{topic}@{broker}/{queue_id}"


class JournalWriter:
    """Appends rows from any thread; a row is on disk within ``FLUSH_S`` of :meth:`flush_due`
    (or at once with :meth:`flush`)."""

    def __init__(self, path: Path | str, t0: float) -> None:
        self.t0 = t0
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._rows: list[str] = []
        self._lock = threading.Lock()
        self._flushed = time.monotonic()

    def now(self) -> float:
        return round(time.time() - self.t0, 4)

    def attempt(self, key: str, started: float, ended: float, outcome: str, queue: str = "", offset: int = -1,
                why: str = "", producer: str = "") -> None:
        self._add(["a", key, started, ended, outcome, queue, offset, why[:300], producer])

    def delivery(self, key: str, queue: str, offset: int, at: float, consumer: str, ordered: bool) -> None:
        self._add(["d", key, queue, offset, at, consumer, int(ordered)])

    def _add(self, row: list[Any]) -> None:
        line = json.dumps(row, separators=(",", ":"))
        with self._lock:
            self._rows.append(line)
        self.flush_due()

    def flush_due(self) -> None:
        if time.monotonic() - self._flushed >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            self._flushed = time.monotonic()
            if rows:
                self._file.write("\n".join(rows) + "\n")
                self._file.flush()

    def close(self) -> None:
        self.flush()
        self._file.close()


class JournalReader:
    """Reads the rows written since the last read (whole lines only: a line being written is
    left for the next read)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read_new(self) -> list[list[Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        return [json.loads(line) for line in data[:end].splitlines() if line.strip()]
