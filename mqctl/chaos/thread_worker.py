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
