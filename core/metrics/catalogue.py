"""Every metric a node exports: its name, type, labels, which nodes export it, and what it mirrors.

One table, so the nodes cannot export a name it does not hold, docs/metrics.md is generated from
it, and the Grafana dashboard is checked against it. Names follow Prometheus's conventions: the
unit in the name (``_seconds``, ``_bytes``, ``_messages``), ``_total`` on counters. Where RocketMQ
5's own metrics (its OpenTelemetry names) or the rocketmq-exporter's have the same meaning, the
``mirrors`` column says which. Every sample also carries ``cluster`` and ``node`` (RocketMQ 5
labels every metric with its cluster and node id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]
NodeKind = Literal["nameserver", "broker", "proxy"]

EVERY_NODE: tuple[NodeKind, ...] = ("nameserver", "broker", "proxy")
BROKER: tuple[NodeKind, ...] = ("broker",)
PROXY: tuple[NodeKind, ...] = ("proxy",)
COMMON_LABELS = ("cluster", "node")

# seconds: from 100 us (a send answered from memory) to 30 s (a long-polling pull held)
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                     1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str  # as exported: counters end in _total
    kind: Kind
    help: str
    labels: tuple[str, ...]
    nodes: tuple[NodeKind, ...]
    mirrors: str = ""  # the RocketMQ 5 or rocketmq-exporter metric with this meaning

    @property
    def family_name(self) -> str:
        """The name prometheus_client's families take (a counter's without ``_total``)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


_SPECS = (
    MetricSpec("rocketmq_node_info", "gauge", "1 for each node; its kind and version in labels",
               ("node_type", "version"), EVERY_NODE, "RocketMQ 5: node_type, node_id labels"),
    MetricSpec("rocketmq_rpc_latency_seconds", "histogram",
               "Time from a request's arrival to its answer, by door, request and response code",
               ("protocol", "request", "code"), EVERY_NODE, "RocketMQ 5: rocketmq_rpc_latency (ms)"),
    MetricSpec("rocketmq_answers_total", "counter", "Answers sent, by door, request and response code",
               ("protocol", "request", "code"), EVERY_NODE, "RocketMQ 5: rocketmq_rpc_latency_count"),
    MetricSpec("rocketmq_acl_refusals_total", "counter", "Requests refused by access control, by request",
               ("request",), ("broker", "proxy")),
    # broker: traffic
    MetricSpec("rocketmq_messages_in_total", "counter", "Messages stored from producers, by topic",
               ("topic",), BROKER, "RocketMQ 5: rocketmq_messages_in_total; exporter: rocketmq_producer_tps"),
    MetricSpec("rocketmq_messages_in_bytes_total", "counter", "Body bytes producers sent (a batch's whole body), by topic",
               ("topic",), BROKER, "RocketMQ 5: rocketmq_throughput_in_total; exporter: rocketmq_producer_message_size"),
    MetricSpec("rocketmq_messages_out_total", "counter", "Messages delivered to consumers (pull and POP), by topic and group",
               ("topic", "group"), BROKER, "RocketMQ 5: rocketmq_messages_out_total; exporter: rocketmq_consumer_tps"),
    MetricSpec("rocketmq_messages_out_bytes_total", "counter", "Record bytes delivered to consumers, by topic and group",
               ("topic", "group"), BROKER, "RocketMQ 5: rocketmq_throughput_out_total; exporter: rocketmq_consumer_message_size"),
    MetricSpec("rocketmq_consumer_lag_messages", "gauge",
               "Messages stored and not yet consumed (committed), by group, topic and queue",
               ("group", "topic", "queue"), BROKER,
               "RocketMQ 5: rocketmq_consumer_lag_messages; exporter: rocketmq_group_diff"),
    MetricSpec("rocketmq_consumer_lag_seconds", "gauge",
               "Age of the oldest message a group has not consumed, by group and topic",
               ("group", "topic"), BROKER, "RocketMQ 5: rocketmq_consumer_lag_latency (ms); exporter: rocketmq_group_get_latency_by_storetime"),
    MetricSpec("rocketmq_held_pulls", "gauge", "Pulls, POPs and notifications held by long polling",
               (), BROKER),
    # broker: store
    MetricSpec("rocketmq_store_size_bytes", "gauge", "CommitLog bytes held (its end minus its start)",
               (), BROKER, "RocketMQ 5: rocketmq_storage_size"),
    MetricSpec("rocketmq_store_flush_behind_bytes", "gauge", "CommitLog bytes written and not yet flushed",
               (), BROKER, "RocketMQ 5: rocketmq_storage_flush_behind_bytes"),
    MetricSpec("rocketmq_store_flush_latency_seconds", "histogram",
               "One flush round of the CommitLog, from its start to its end", (), BROKER),
    MetricSpec("rocketmq_store_fsync_latency_seconds", "histogram",
               "The fsync calls of one flush round (time in the kernel)", (), BROKER),
    # broker: replication
    MetricSpec("rocketmq_replication_mode_info", "gauge", "1, with the group's replication mode and this member's role",
               ("mode", "role"), BROKER),
    MetricSpec("rocketmq_replication_slaves_connected", "gauge", "Slaves connected to this master (async and sync modes; raft: see the raft metrics)",
               (), BROKER),
    MetricSpec("rocketmq_replication_lag_bytes", "gauge", "Log bytes a slave (a raft leader's follower) does not hold yet, by slave",
               ("slave",), BROKER, "exporter: rocketmq_brokeruntime_commitlog_diff (per slave)"),
    MetricSpec("rocketmq_replication_lag_seconds", "gauge", "Age of the oldest log byte (raft: entry) a slave or follower does not hold yet",
               ("slave",), BROKER),
    MetricSpec("rocketmq_raft_term", "gauge", "This member's raft term", (), BROKER, "DLedger: term"),
    MetricSpec("rocketmq_raft_role", "gauge", "1 on this member's raft role (leader, candidate, follower)",
               ("role",), BROKER, "DLedger: role"),
    MetricSpec("rocketmq_raft_commit_index", "gauge", "Highest raft index known committed", (), BROKER,
               "DLedger: committedIndex"),
    MetricSpec("rocketmq_raft_applied_index", "gauge", "Highest raft index applied to the store", (), BROKER),
    MetricSpec("rocketmq_raft_last_index", "gauge", "Highest raft index in this member's log", (), BROKER,
               "DLedger: ledgerEndIndex"),
    MetricSpec("rocketmq_raft_elections_total", "counter", "Elections this member stood in", (), BROKER),
    MetricSpec("rocketmq_controller_master_epoch", "gauge", "The master epoch a broker under a controller knows",
               (), BROKER),
    MetricSpec("rocketmq_controller_sync_state_set_size", "gauge",
               "Brokers in the master's SyncStateSet (0 on a slave)", (), BROKER),
    MetricSpec("rocketmq_controller_role_changes_total", "counter",
               "Roles (master, slave) a broker under a controller took since it started", (), BROKER),
    # broker: POP
    MetricSpec("rocketmq_pop_inflight_messages", "gauge",
               "Messages popped and neither acked nor come back yet (invisible), by group and topic",
               ("group", "topic"), BROKER, "RocketMQ 5: rocketmq_consumer_inflight_messages"),
    MetricSpec("rocketmq_pop_revived_messages_total", "counter",
               "Popped messages come back after their invisible time, by group and topic",
               ("group", "topic"), BROKER),
    # name server
    MetricSpec("rocketmq_namesrv_brokers", "gauge", "Broker addresses registered and live", (), ("nameserver",)),
    MetricSpec("rocketmq_namesrv_topics", "gauge", "Topics with routes", (), ("nameserver",)),
    MetricSpec("rocketmq_controller_leader", "gauge", "1 on the name server leading the controller group",
               (), ("nameserver",)),
    MetricSpec("rocketmq_controller_elections_total", "counter",
               "Master elections this controller member held while leading", (), ("nameserver",)),
    MetricSpec("rocketmq_controller_groups", "gauge", "Broker groups the controller knows", (), ("nameserver",)),
    # proxy
    MetricSpec("rocketmq_proxy_upstream_sessions", "gauge", "Client sessions with connections to brokers",
               (), PROXY),
    MetricSpec("rocketmq_proxy_failovers_total", "counter",
               "Times a broker group's master (raft leader) changed under the proxy, by group", ("group",), PROXY),
    MetricSpec("rocketmq_proxy_resent_total", "counter", "Writes sent again to a new master after the old one failed",
               (), PROXY),
    MetricSpec("rocketmq_proxy_writes_waiting", "gauge", "Writes waiting for their group to have a master again",
               (), PROXY),
    MetricSpec("rocketmq_proxy_grpc_clients", "gauge", "RocketMQ 5 clients (client ids) the gRPC door serves", (), PROXY),
)

CATALOGUE: Mapping[str, MetricSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
# exported by prometheus_client's process collector on every node, beside the catalogue
PROCESS_METRICS = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                   "process_start_time_seconds", "process_open_fds", "process_max_fds")


def specs_for(node: NodeKind) -> list[MetricSpec]:
    return [spec for spec in _SPECS if node in spec.nodes]


# Beyond this many distinct values of a label that names something users create (topic, group,
# slave, queue), new values are counted under OTHER, so a flood of names cannot grow a scrape
# without bound. Settable per cluster: [metrics] label_values_max.
LABEL_VALUES_MAX_DEFAULT = 500
OTHER = "__other__"


def catalogue_table() -> str:
    """The catalogue as the Markdown table docs/metrics.md shows (a test keeps them equal)."""
    lines = ["| metric | type | labels (beside cluster, node) | nodes | mirrors |", "|---|---|---|---|---|"]
    for spec in _SPECS:
        labels = ", ".join(spec.labels) or "-"
        nodes = "every node" if spec.nodes == EVERY_NODE else ", ".join(spec.nodes)
        lines.append(f"| `{spec.name}` | {spec.kind} | {labels} | {nodes} | {spec.mirrors or '-'} |")
    lines.append(f"| `{'`, `'.join(PROCESS_METRICS)}` | (prometheus_client's process collector) | - | every node | - |")
    return "\n".join(lines)
