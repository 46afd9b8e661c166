"""The frame of a drill's client process whose client runs threads of its own (the stock C++
and 5.x clients): arguments, journal, flushing and the ``stop`` line on stdin. Standard
library only, as the stock clients' workers need."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from mqctl.chaos.journal import FLUSH_S, JournalWriter

Role = Callable[[dict[str, Any], JournalWriter, threading.Event], None]


def run_streams(stream: Callable[[int], None], count: int, stop: threading.Event, join_s: float) -> None:
    """Run ``stream(0..count-1)`` on a thread each until ``stop``; wait for each to finish its send."""
    threads = [threading.Thread(target=stream, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(join_s)


def shut_down(stop: threading.Event, journal: JournalWriter, shutdown: Callable[[], object]) -> None:
    """Once ``stop`` is set: the journal on disk first, then the client's own shutdown (which
    may hang or crash)."""
    stop.wait()
    journal.flush()
    shutdown()


def run_worker(produce: Role, consume: Role) -> None:
    """Run ``produce`` or ``consume`` (by the ``role`` argument) until stopped, then exit at
    once: these clients leave threads behind after their shutdown."""
    args = json.loads(sys.argv[1])
    journal = JournalWriter(args["journal"], args["t0"])
    stop = threading.Event()

    def flusher() -> None:
        while not stop.wait(FLUSH_S):
            journal.flush()

    def stdin_watch() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=flusher, daemon=True).start()
    threading.Thread(target=stdin_watch, daemon=True).start()
    (produce if args["role"] == "produce" else consume)(args, journal, stop)
    journal.close()
    sys.stdout.flush()
    os._exit(0)
