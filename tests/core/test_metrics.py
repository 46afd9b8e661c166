"""The metrics cores: capped rows, histograms, the families a scrape builds, the HTTP endpoint,
the catalogue's naming rules, docs/metrics.md and the Grafana dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import trio
from prometheus_client import generate_latest

from core.metrics.catalogue import (
    CATALOGUE,
    LATENCY_BUCKETS_S,
    OTHER,
    PROCESS_METRICS,
    catalogue_table,
    specs_for,
)
from core.metrics.counters import CappedRows, Histogram
from core.metrics.exposition import node_registry
from core.metrics.http import HEAD_BYTES_MAX, serve_metrics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_rows_beyond_the_cap_add_up_under_other() -> None:
    rows = CappedRows(2, keys_max=2)
    for topic in ("a", "b", "c", "d", "a"):
        row = rows.row(topic)
        row[0] += 1
        row[1] += 10
    assert dict(rows.items()) == {"a": [2, 20], "b": [1, 10], OTHER: [2, 20]}


def test_a_histogram_puts_a_value_on_a_bound_in_that_bound_s_bucket_and_sums() -> None:
    hist = Histogram(keys_max=1, other="rest")
    hist.observe("send", LATENCY_BUCKETS_S[0])  # on the first bound: le="0.0001"
    hist.observe("send", 0.003)
    hist.observe("send", 99.0)  # beyond every bound: only +Inf
    hist.observe("pull", 1.0)  # past the cap
    row = hist.rows["send"]
    buckets = dict(hist.cumulative(row))
    assert buckets["0.0001"] == 1 and buckets["0.0025"] == 1 and buckets["0.005"] == 2
    assert buckets["30.0"] == 2 and buckets["+Inf"] == 3
    assert row[-1] == pytest.approx(0.0001 + 0.003 + 99.0)
    assert set(hist.rows) == {"send", "rest"}


def test_a_scrape_exports_every_family_of_the_node_s_kind_with_cluster_and_node_labels() -> None:
    def fill(out):  # type: ignore[no-untyped-def]
        out.add("rocketmq_messages_in_total", 7, "T")
        hist = Histogram()
        hist.observe((10, 0), 0.002)
        out.histogram("rocketmq_rpc_latency_seconds", hist, lambda key: ("remoting", "SEND_MESSAGE", "SUCCESS"))
    text = generate_latest(node_registry("broker", "C1", "broker-a-0", fill)).decode()
    types = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert types == {s.name for s in specs_for("broker")} | set(PROCESS_METRICS)
    assert 'rocketmq_messages_in_total{cluster="C1",node="broker-a-0",topic="T"} 7.0' in text
    assert ('rocketmq_rpc_latency_seconds_bucket{cluster="C1",code="SUCCESS",le="0.0025",node="broker-a-0",'
            'protocol="remoting",request="SEND_MESSAGE"} 1.0') in text
    assert re.search(r'process_cpu_seconds_total\{cluster="C1",node="broker-a-0"\} ', text)
    with pytest.raises(KeyError):  # a proxy's family is not a broker's
        generate_latest(node_registry("broker", "C1", "b", lambda out: out.add("rocketmq_proxy_resent_total", 1)))


def test_names_follow_prometheus_conventions() -> None:
    for spec in CATALOGUE.values():
        assert re.fullmatch(r"rocketmq_[a-z_]+", spec.name), spec.name
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        if spec.kind == "histogram":
            assert spec.name.endswith("_seconds"), spec.name
        assert not set(spec.labels) & {"cluster", "node", "le", "instance", "job"}, spec.name


async def _http(port: int, raw: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        out = b""
        with trio.move_on_after(5):
            while chunk := await stream.receive_some(65536):
                out += chunk
        return out


async def test_the_endpoint_serves_metrics_in_either_format_and_refuses_the_rest(nursery) -> None:
    registry = node_registry("nameserver", "C1", "ns1", lambda out: out.add("rocketmq_namesrv_brokers", 3))
    port = await nursery.start(serve_metrics, registry, "127.0.0.1", 0)
    plain = await _http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert plain.startswith(b"HTTP/1.1 200 OK") and b"text/plain; version=0.0.4" in plain
    assert b'rocketmq_namesrv_brokers{cluster="C1",node="ns1"} 3.0' in plain
    open_metrics = await _http(port, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0"
                                     b"\r\nConnection: close\r\n\r\n")
    assert b"application/openmetrics-text" in open_metrics and open_metrics.rstrip().endswith(b"# EOF")
    assert (await _http(port, b"GET /nowhere HTTP/1.1\r\nConnection: close\r\n\r\n")).startswith(b"HTTP/1.1 404")
    assert (await _http(port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
    huge = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * (HEAD_BYTES_MAX + 10)
    assert (await _http(port, huge)).startswith(b"HTTP/1.1 431")
    # two requests on one kept-alive connection
    both = await _http(port, b"GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert both.count(b"HTTP/1.1 200 OK") == 2


def test_docs_show_the_catalogue_as_it_is() -> None:
    doc = (DOCS / "metrics.md").read_text()
    assert catalogue_table() in doc, "docs/metrics.md must show catalogue_table() as it is:\n" + catalogue_table()


def _exprs(node: object) -> list[str]:
    if isinstance(node, dict):
        return ([node["expr"]] if isinstance(node.get("expr"), str) else []) + [e for v in node.values() for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def test_the_grafana_dashboard_uses_only_metrics_the_nodes_export() -> None:
    dashboard = json.loads((DOCS / "grafana" / "mqctl-dashboard.json").read_text())
    exprs = _exprs(dashboard["panels"])
    assert len(exprs) >= 20
    exported = set(CATALOGUE) | set(PROCESS_METRICS)
    used = set()
    for expr in exprs:
        for name in re.findall(r"\b((?:rocketmq|process)_[a-z_]+)", expr):
            family = re.sub(r"_(bucket|count|sum)$", "", name) if name.endswith(("_bucket", "_count", "_sum")) \
                and re.sub(r"_(bucket|count|sum)$", "", name) in CATALOGUE else name
            assert family in exported, f"the dashboard reads {name}, which no node exports"
            used.add(family)
    # the pictures cover what matters: traffic, lag, latency, store, replication, raft, proxies
    for needed in ("rocketmq_messages_in_total", "rocketmq_consumer_lag_messages", "rocketmq_rpc_latency_seconds",
                   "rocketmq_store_fsync_latency_seconds", "rocketmq_replication_lag_bytes", "rocketmq_raft_term",
                   "rocketmq_proxy_failovers_total", "process_cpu_seconds_total"):
        assert needed in used, needed
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
