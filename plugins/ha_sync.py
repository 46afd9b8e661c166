"""The built-in ``ha_sync`` plugin: RocketMQ's SYNC_MASTER / SLAVE replication (a send is
answered once a slave acknowledges it, or with FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE)."""

from __future__ import annotations

from core.broker.replication import Replication
from core.config import Config
from core.node_specs import BrokerNode
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore
from replication.master_slave.strategy import MasterSlaveReplication


@hookimpl
def mq_replication(mode: str, node: BrokerNode, config: Config, store: MessageStore) -> Replication | None:
    if mode != "sync" or config.replication.controller:  # controller mode: the ha_controller plugin's
        return None
    return MasterSlaveReplication(node, config, store, sync=True)
