"""The built-in selection plugin: producers pick queues round robin, away from the broker that
just failed, skipping brokers isolated for their latency (core.client.selection)."""

from __future__ import annotations

from core.client.fault import FaultSettings
from core.client.selection import QueueSelector, RoundRobinSelector
from core.plugin_markers import hookimpl


@hookimpl
def mq_queue_selector(settings: FaultSettings) -> QueueSelector:
    return RoundRobinSelector(settings)
