"""What a broker's hot paths count, per request or batch: a send of 100 messages adds 100 to
one row once (core/broker/metrics.py renders them when scraped)."""

from __future__ import annotations

from core.metrics.catalogue import OTHER
from core.metrics.counters import CappedRows, Histogram, answer_latency


class BrokerMeters:
    """The counts a broker's requests add to (rows of plain integers)."""

    def __init__(self, keys_max: int, *, timed: bool = True) -> None:
        self.messages_in = CappedRows(2, keys_max=keys_max)  # topic -> [messages, body bytes]
        self.messages_out = CappedRows(2, keys_max=keys_max, other=(OTHER, OTHER))  # (topic, group)
        self.pop_revived = CappedRows(1, keys_max=keys_max, other=(OTHER, OTHER))  # (group, topic)
        self.acl_refusals = CappedRows(1, keys_max=keys_max, other=-1)  # request code
        # (request code, response code) -> seconds; None when [metrics] enabled = false
        self.latency: Histogram | None = answer_latency(keys_max, timed=timed)
        self.keys_max = keys_max

    def sent(self, topic: str, messages: int, size_bytes: int) -> None:
        row = self.messages_in.row(topic)
        row[0] += messages
        row[1] += size_bytes

    def delivered(self, topic: str, group: str, messages: int, size_bytes: int) -> None:
        row = self.messages_out.row((topic, group))
        row[0] += messages
        row[1] += size_bytes
