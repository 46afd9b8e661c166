"""The built-in ``ha_async`` plugin: RocketMQ's ASYNC_MASTER / SLAVE replication (a send is
answered after the master's write; slaves follow)."""

from __future__ import annotations

from core.broker.replication import Replication
from core.config import Config
from core.node_specs import BrokerNode
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore
from replication.master_slave.strategy import MasterSlaveReplication


@hookimpl
def mq_replication(mode: str, node: BrokerNode, config: Config, store: MessageStore) -> Replication | None:
    if mode != "async" or config.replication.controller:  # controller mode: the ha_controller plugin's
        return None
    return MasterSlaveReplication(node, config, store, sync=False)
