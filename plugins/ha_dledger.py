"""The built-in ``ha_dledger`` plugin: raft replication with automatic failover (RocketMQ's
DLedger mode). The members of a broker group elect a leader, which registers as the master."""

from __future__ import annotations

from pathlib import Path

from core.broker.replication import Replication
from core.clock import Clock, now_ms
from core.config import Config, StoreConfig
from core.node_specs import BrokerNode
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore
from core.store.store_types import StoreHooks, StoreRole
from replication.dledger.store import NO_LEADER_YET, RaftParts
from replication.dledger.strategy import DLedgerReplication

MODE = "dledger"


def raft_message_store(root: Path, config: StoreConfig, plugins: StoreHooks | None = None, *,
                       archive_dir: Path | None = None, clock: Clock = now_ms) -> MessageStore:
    """The store of a raft member under ``root``: a :class:`MessageStore` made with the raft
    parts (``store.parts``), refusing writes until its member leads."""
    store = MessageStore(root, config, plugins, archive_dir=archive_dir, clock=clock, log_parts=RaftParts)
    store.set_role(StoreRole.REPLICA, NO_LEADER_YET)
    return store


def raft_parts(store: MessageStore) -> RaftParts:
    """The raft parts ``store`` was made with (a TypeError for a store made otherwise)."""
    if not isinstance(store.parts, RaftParts):
        raise TypeError("replication.mode = 'dledger' needs the store made by mq_message_store")
    return store.parts


@hookimpl
def mq_message_store(mode: str, node: BrokerNode, config: Config, root: Path,
                     plugins: StoreHooks) -> MessageStore | None:
    return raft_message_store(root, config.store, plugins) if mode == MODE else None


@hookimpl
def mq_replication(mode: str, node: BrokerNode, config: Config, store: MessageStore) -> Replication | None:
    if mode != MODE:
        return None
    return DLedgerReplication(node, config, store, raft_parts(store))
