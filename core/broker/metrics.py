"""A broker's metrics as a scrape reads them (:func:`fill_broker`): its meters
(core/broker/meters.py), tables, store and replication.

What can be read from state when scraped (lag, store size, replication, raft, POP in flight) is
not counted at all.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, cast

from core.broker.admin.consumer_admin import store_time
from core.broker.consume.long_polling import PullHold
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.meters import BrokerMeters
from core.broker.pop.ledger import ReviveLedger
from core.broker.replication import Replication
from core.clock import Clock
from core.config import ReplicationMode
from core.metrics.exposition import Samples
from core.metrics.labels import REMOTING, request_label, rpc_labels
from core.store.message_store import MessageStore

LAG_READS_MAX = 2000  # records a scrape reads for the age of groups' lag


class MeteredBroker(Protocol):
    """What a scrape reads of the broker (``Broker`` is one)."""

    hold: PullHold
    meters: BrokerMeters
    now_ms: Clock
    offsets: ConsumerOffsets
    pop_ledgers: dict[int, ReviveLedger]
    replication: Replication
    replication_mode: ReplicationMode
    store: MessageStore


def fill_broker(broker: MeteredBroker, out: Samples) -> None:
    """Everything a broker exports, read now."""
    meters = broker.meters
    out.answers(meters.latency, rpc_labels(REMOTING))
    for code, row in meters.acl_refusals.items():
        out.add("rocketmq_acl_refusals_total", row[0], request_label(code))
    for topic, row in meters.messages_in.items():
        out.add("rocketmq_messages_in_total", row[0], str(topic))
        out.add("rocketmq_messages_in_bytes_total", row[1], str(topic))
    for key, row in meters.messages_out.items():
        topic, group = _pair(key)
        out.add("rocketmq_messages_out_total", row[0], topic, group)
        out.add("rocketmq_messages_out_bytes_total", row[1], topic, group)
    for key, row in meters.pop_revived.items():
        group, topic = _pair(key)
        out.add("rocketmq_pop_revived_messages_total", row[0], group, topic)
    out.add("rocketmq_held_pulls", broker.hold.parked)
    _store(broker, out)
    _replication(broker, out)
    if broker.replication.writable:  # a replica's offsets are its master's copy: counted there
        _lag(broker, out, meters.keys_max)
        _pop_inflight(broker, out, meters.keys_max)


def _pair(key: Hashable) -> tuple[str, str]:
    first, second = cast(tuple[object, object], key)
    return str(first), str(second)


def _store(broker: MeteredBroker, out: Samples) -> None:
    store = broker.store
    out.add("rocketmq_store_size_bytes", max(0, store.log_end - store.log_start))
    commitlog = store.commitlog
    out.add("rocketmq_store_flush_behind_bytes", max(0, commitlog.write_offset - commitlog.flushed_offset))
    out.histogram("rocketmq_store_flush_latency_seconds", store.stats.flush_latency, lambda key: ())
    out.histogram("rocketmq_store_fsync_latency_seconds", store.stats.fsync_latency, lambda key: ())


def _replication(broker: MeteredBroker, out: Samples) -> None:
    state = broker.replication.metrics()
    out.add("rocketmq_replication_mode_info", 1, broker.replication_mode, state.role)
    out.add("rocketmq_replication_slaves_connected", state.slaves_connected)
    for replica in state.replicas:
        out.add("rocketmq_replication_lag_bytes", replica.lag_bytes, replica.peer)
        out.add("rocketmq_replication_lag_seconds", replica.lag_seconds, replica.peer)
    raft = state.raft
    if raft is not None:
        out.add("rocketmq_raft_term", raft.term)
        for role in ("leader", "candidate", "follower"):
            out.add("rocketmq_raft_role", 1 if state.role == role else 0, role)
        out.add("rocketmq_raft_commit_index", raft.commit_index)
        out.add("rocketmq_raft_applied_index", raft.applied_index)
        out.add("rocketmq_raft_last_index", raft.last_index)
        out.add("rocketmq_raft_elections_total", raft.elections)
    controller = state.controller
    if controller is not None:
        out.add("rocketmq_controller_master_epoch", controller.master_epoch)
        out.add("rocketmq_controller_sync_state_set_size", controller.sync_state_set_size)
        out.add("rocketmq_controller_role_changes_total", controller.role_changes)


def _lag(broker: MeteredBroker, out: Samples, keys_max: int) -> None:
    """Per group, topic and queue: messages stored beyond the group's committed offset; per
    group and topic, the age of the oldest of them (one record read per lagging queue, at most
    LAG_READS_MAX a scrape: the scrape runs on the broker's loop)."""
    store, now = broker.store, broker.now_ms()
    reads_left = LAG_READS_MAX
    for pairs, (key, queues) in enumerate(list(broker.offsets.table.items())):
        if pairs >= keys_max:
            break
        topic, _, group = key.partition("@")
        oldest_ms: int | None = now
        for queue_id, committed in list(queues.items()):
            lag = max(0, store.max_queue_offset(topic, queue_id) - max(committed, 0))
            out.add("rocketmq_consumer_lag_messages", lag, group, topic, str(queue_id))
            if lag and oldest_ms is not None:
                if reads_left <= 0:
                    oldest_ms = None  # not known this scrape: no sample rather than a wrong one
                    continue
                reads_left -= 1
                stamp = store_time(store, topic, queue_id, max(committed, 0))
                if stamp:
                    oldest_ms = min(oldest_ms, stamp)
        if oldest_ms is not None:
            out.add("rocketmq_consumer_lag_seconds", max(0, now - oldest_ms) / 1000, group, topic)


def _pop_inflight(broker: MeteredBroker, out: Samples, keys_max: int) -> None:
    counts: dict[tuple[str, str], int] = {}
    for ledger in list(broker.pop_ledgers.values()):
        for (group, topic), count in ledger.inflight().items():
            if (group, topic) in counts or len(counts) < keys_max:
                counts[(group, topic)] = counts.get((group, topic), 0) + count
    for (group, topic), count in counts.items():
        out.add("rocketmq_pop_inflight_messages", count, group, topic)
