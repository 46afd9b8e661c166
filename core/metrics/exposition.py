"""A node's metrics as prometheus_client families, built when scraped.

A node hands :func:`node_registry` a function that fills a :class:`Samples` from its live state
(rows of core/metrics/counters.py, tables, the store). Every family of the node's kind is
exported on every scrape, even with no samples yet, so a dashboard finds every name at once.
Names, types, help and label names come from the catalogue only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from core.metrics.catalogue import COMMON_LABELS, NodeKind, specs_for
from core.metrics.counters import Histogram

VERSION = "0.1.0"


class Samples:
    """One scrape's values, added by metric name; :meth:`families` renders them."""

    def __init__(self, kind: NodeKind, cluster: str, node: str) -> None:
        self.kind = kind
        self.common = (cluster, node)
        self._families: dict[str, Metric] = {}
        for spec in specs_for(kind):
            labels = [*COMMON_LABELS, *spec.labels]
            if spec.kind == "counter":
                family: Metric = CounterMetricFamily(spec.family_name, spec.help, labels=labels)
            elif spec.kind == "gauge":
                family = GaugeMetricFamily(spec.family_name, spec.help, labels=labels)
            else:
                family = HistogramMetricFamily(spec.family_name, spec.help, labels=labels)
            self._families[spec.name] = family
        self.add("rocketmq_node_info", 1, kind, VERSION)

    def add(self, name: str, value: float, *labels: str) -> None:
        """A counter's or gauge's value; ``labels`` in the catalogue's order."""
        family = self._families[name]
        family.add_metric([*self.common, *labels], value)  # type: ignore[attr-defined]

    def histogram(self, name: str, histogram: Histogram, label_of: Callable[[object], tuple[str, ...]]) -> None:
        """Every row of ``histogram``, labelled by ``label_of(key)``."""
        family = self._families[name]
        for key, row in histogram.items():
            family.add_metric([*self.common, *label_of(key)], histogram.cumulative(row),  # type: ignore[attr-defined]
                              row[-1])

    def answers(self, latency: Histogram | None, label_of: Callable[[object], tuple[str, ...]]) -> None:
        """A door's answers: their latency histogram, and from its rows the answers by code
        (no second count on the hot path). Nothing when metrics time nothing."""
        if latency is None:
            return
        self.histogram("rocketmq_rpc_latency_seconds", latency, label_of)
        for key, row in latency.items():
            self.add("rocketmq_answers_total", sum(row[:-1]), *label_of(key))

    def families(self) -> list[Metric]:
        return list(self._families.values())


class NodeCollector(Collector):
    """Calls the node's ``fill`` on each scrape."""

    def __init__(self, kind: NodeKind, cluster: str, node: str, fill: Callable[[Samples], None]) -> None:
        self._kind, self._cluster, self._node, self._fill = kind, cluster, node, fill

    def collect(self) -> Iterable[Metric]:
        samples = Samples(self._kind, self._cluster, self._node)
        self._fill(samples)
        return samples.families()


class ProcessMetrics(Collector):
    """prometheus_client's process collector (CPU, memory, descriptors), its samples labelled
    with cluster and node like every other family here."""

    def __init__(self, cluster: str, node: str) -> None:
        self._inner = ProcessCollector(registry=None)
        self._labels = {"cluster": cluster, "node": node}

    def collect(self) -> Iterable[Metric]:
        for family in self._inner.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                labelled.add_sample(sample.name, {**sample.labels, **self._labels}, sample.value)
            yield labelled


def node_registry(kind: NodeKind, cluster: str, node: str, fill: Callable[[Samples], None]) -> CollectorRegistry:
    """A registry with the node's families and the process's CPU, memory and descriptors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(kind, cluster, node, fill))
    registry.register(ProcessMetrics(cluster, node))
    return registry

