"""The wall clock in milliseconds since the epoch, as RocketMQ stamps messages, files and
liveness. One definition: parts that read time take a :data:`Clock` in their constructor, so a
test hands them a fixed one instead of patching module attributes."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000
