"""What ``mqctl top`` shows, computed from two rounds of scrapes (sans-IO: no sockets, no clock).

Rates are the counters' growth between the rounds over the time between them (a counter that
went down, a restarted node, counts from zero). Lag is read from the masters (replicas do not
export it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from mqctl.top.scrape import Scrape


def _rate(before: Scrape | None, after: Scrape, name: str, key: tuple[tuple[str, str], ...]) -> float:
    now = after.series(name).get(key, 0.0)
    if before is None or before.error:
        return 0.0
    then = before.series(name).get(key, 0.0)
    seconds = after.at - before.at
    if seconds <= 0:
        return 0.0
    return max(0.0, now - then if now >= then else now) / seconds


def snapshot(before: Sequence[Scrape], after: Sequence[Scrape]) -> dict[str, Any]:
    """Rates, lag, replication, raft and proxies of the cluster, as plain data (--json prints it)."""
    previous = {s.target.node: s for s in before}
    topics: defaultdict[str, dict[str, float]] = defaultdict(
        lambda: dict.fromkeys(("in_per_s", "in_total", "out_per_s"), 0.0))
    groups: defaultdict[tuple[str, str], dict[str, float]] = defaultdict(
        lambda: dict.fromkeys(("lag", "lag_seconds", "out_per_s"), 0.0))
    nodes, brokers, proxies = [], [], []
    for scrape in after:
        last = previous.get(scrape.target.node)
        node: dict[str, Any] = {"node": scrape.target.node, "kind": scrape.target.kind, "up": not scrape.error}
        if scrape.error:
            node["error"] = scrape.error
            nodes.append(node)
            continue
        node["cpu_percent"] = round(100 * _rate(last, scrape, "process_cpu_seconds_total", ()), 1)
        node["rss_bytes"] = int(scrape.value("process_resident_memory_bytes"))
        nodes.append(node)
        for key, total in scrape.series("rocketmq_messages_in_total").items():
            row = topics[dict(key)["topic"]]
            row["in_per_s"] += _rate(last, scrape, "rocketmq_messages_in_total", key)
            row["in_total"] += total
        for key in scrape.series("rocketmq_messages_out_total"):
            labels = dict(key)
            rate = _rate(last, scrape, "rocketmq_messages_out_total", key)
            topics[labels["topic"]]["out_per_s"] += rate
            groups[(labels["group"], labels["topic"])]["out_per_s"] += rate
        for key, lag in scrape.series("rocketmq_consumer_lag_messages").items():
            labels = dict(key)
            groups[(labels["group"], labels["topic"])]["lag"] += lag
        for key, seconds in scrape.series("rocketmq_consumer_lag_seconds").items():
            group = groups[(dict(key)["group"], dict(key)["topic"])]
            group["lag_seconds"] = max(group["lag_seconds"], seconds)
        if scrape.target.kind == "broker":
            brokers.append(_broker(scrape))
        elif scrape.target.kind == "proxy":
            proxies.append(_proxy(scrape))
    return {
        "topics": [{"topic": t, **{k: round(v, 1) for k, v in row.items()}} for t, row in sorted(topics.items())
                   if not t.startswith(("rmq_sys_", "%", "TBW102", "SCHEDULE_TOPIC"))],
        "groups": [{"group": g, "topic": t, "lag": int(row["lag"]), "lag_seconds": round(row["lag_seconds"], 1),
                    "out_per_s": round(row["out_per_s"], 1)}
                   for (g, t), row in sorted(groups.items()) if not g.startswith(("CID_RMQ_SYS", "REVIVE"))],
        "brokers": brokers, "proxies": proxies, "nodes": nodes,
    }


def _broker(scrape: Scrape) -> dict[str, Any]:
    mode = next(iter(scrape.series("rocketmq_replication_mode_info")), ())
    labels = dict(mode)
    row: dict[str, Any] = {"node": scrape.target.node, "mode": labels.get("mode", "?"), "role": labels.get("role", "?"),
                           "slaves": int(scrape.value("rocketmq_replication_slaves_connected")),
                           "lag_bytes": int(max(scrape.series("rocketmq_replication_lag_bytes").values(), default=0)),
                           "store_bytes": int(scrape.value("rocketmq_store_size_bytes"))}
    if scrape.series("rocketmq_raft_term"):
        row.update(term=int(scrape.value("rocketmq_raft_term")), commit=int(scrape.value("rocketmq_raft_commit_index")),
                   elections=int(scrape.value("rocketmq_raft_elections_total")))
    if scrape.series("rocketmq_controller_master_epoch"):  # under a controller: the epoch as the term
        row.update(term=int(scrape.value("rocketmq_controller_master_epoch")),
                   in_sync=int(scrape.value("rocketmq_controller_sync_state_set_size")),
                   elections=int(scrape.value("rocketmq_controller_role_changes_total")))
    return row


def _proxy(scrape: Scrape) -> dict[str, Any]:
    return {"node": scrape.target.node, "sessions": int(scrape.value("rocketmq_proxy_upstream_sessions")),
            "failovers": int(scrape.value("rocketmq_proxy_failovers_total")),
            "writes_waiting": int(scrape.value("rocketmq_proxy_writes_waiting")),
            "resent": int(scrape.value("rocketmq_proxy_resent_total")),
            "grpc_clients": int(scrape.value("rocketmq_proxy_grpc_clients"))}
