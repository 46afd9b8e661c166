"""The built-in ``ha_dledger`` plugin: raft replication with automatic failover (RocketMQ's
DLedger mode). The members of a broker group elect a leader, which registers as the master."""

from __future__ import annotations

from pathlib import Path

from core.broker.replication import Replication
from core.config import Config
from core.node_specs import BrokerNode
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore
from core.store.store_types import StoreHooks
from replication.dledger.store import DLedgerMessageStore
from replication.dledger.strategy import DLedgerReplication

MODE = "dledger"


@hookimpl
def mq_message_store(mode: str, node: BrokerNode, config: Config, root: Path,
                     plugins: StoreHooks) -> MessageStore | None:
    return DLedgerMessageStore(root, config.store, plugins) if mode == MODE else None


@hookimpl
def mq_replication(mode: str, node: BrokerNode, config: Config, store: MessageStore) -> Replication | None:
    if mode != MODE:
        return None
    if not isinstance(store, DLedgerMessageStore):
        raise TypeError("replication.mode = 'dledger' needs the store made by mq_message_store")
    return DLedgerReplication(node, config, store)
