"""A name server's metrics as a scrape reads them: its answers' latency, its route table, and
the controller it hosts (controller mode)."""

from __future__ import annotations

from core.metrics.counters import Histogram
from core.metrics.exposition import Samples
from core.metrics.labels import REMOTING, rpc_labels
from core.namesrv.processor import NameServerProcessor


def fill_nameserver(processor: NameServerProcessor, latency: Histogram | None, out: Samples) -> None:
    out.answers(latency, rpc_labels(REMOTING))
    routes = processor.routes
    out.add("rocketmq_namesrv_brokers", len(getattr(routes, "live", ())))
    out.add("rocketmq_namesrv_topics", len(getattr(routes, "topics", ())))
    if processor.controller is not None:
        for name, value in processor.controller.metrics().items():
            out.add(name, value)
