"""What the hot paths count, in plain Python objects: no lock and no label lookup per call.

A send, a pull or an answer adds to a row of integers found by one dict lookup; the scrape turns
rows into Prometheus families (core/metrics/exposition.py). Label values that users choose
(topics, groups, request codes from the wire) are capped: beyond ``keys_max`` distinct keys, new
ones add to the row under :data:`~core.metrics.catalogue.OTHER`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterator

from core.metrics.catalogue import LABEL_VALUES_MAX_DEFAULT, LATENCY_BUCKETS_S, OTHER


class CappedRows:
    """Rows of ``width`` integers by key, at most ``keys_max`` keys (then one for the rest)."""

    __slots__ = ("rows", "width", "keys_max", "other")

    def __init__(self, width: int, *, keys_max: int = LABEL_VALUES_MAX_DEFAULT, other: Hashable = OTHER) -> None:
        self.rows: dict[Hashable, list[int]] = {}
        self.width = width
        self.keys_max = keys_max
        self.other = other  # the key the rest add to (a tuple key needs a tuple here)

    def row(self, key: Hashable) -> list[int]:
        """The row to add to for ``key`` (callers add in place: ``row[0] += n``)."""
        row = self.rows.get(key)
        if row is None:
            if len(self.rows) >= self.keys_max:
                key = self.other
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = [0] * self.width
        return row

    def items(self) -> Iterator[tuple[Hashable, list[int]]]:
        return iter(list(self.rows.items()))


class Histogram:
    """Observations by key: a count per bucket (not cumulative; the last is +Inf) and the sum."""

    __slots__ = ("bounds", "rows", "keys_max", "other")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S, *, keys_max: int = LABEL_VALUES_MAX_DEFAULT,
                 other: Hashable = OTHER) -> None:
        self.bounds = bounds
        self.rows: dict[Hashable, list[float]] = {}
        self.keys_max = keys_max
        self.other = other

    def observe(self, key: Hashable, value: float) -> None:
        row = self.rows.get(key)
        if row is None:
            row = self._new(key)
        row[bisect_left(self.bounds, value)] += 1  # bucket i holds values <= bounds[i]
        row[-1] += value

    def _new(self, key: Hashable) -> list[float]:
        if len(self.rows) >= self.keys_max:
            key = self.other
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0] * (len(self.bounds) + 1) + [0.0]
        return row

    def cumulative(self, row: list[float]) -> list[tuple[str, float]]:
        """``row`` as Prometheus buckets: (upper bound, observations at or below it)."""
        out, running = [], 0.0
        for bound, count in zip((*self.bounds, float("inf")), row[:-1]):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out

    def items(self) -> Iterator[tuple[Hashable, list[float]]]:
        return iter(list(self.rows.items()))


def answer_latency(keys_max: int, *, timed: bool, other: Hashable = (-1, -1)) -> Histogram | None:
    """The histogram a door times its answers into, by (request, response code); None when
    metrics are off (nothing is timed)."""
    return Histogram(keys_max=keys_max, other=other) if timed else None
