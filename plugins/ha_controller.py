"""The built-in ``ha_controller`` plugin: RocketMQ 5's controller mode. Each name server hosts a
member of the controller group (:mod:`replication.controller.service`), which elects every
broker group's master from its SyncStateSet; each broker follows it
(:mod:`replication.controller.replica`) in mode ``sync`` (a send waits for the whole
SyncStateSet) or ``async``."""

from __future__ import annotations

from pathlib import Path

from core.broker.replication import Replication
from core.config import Config
from core.namesrv.controller import HostedController
from core.node_specs import BrokerNode, NameServerNode
from core.plugin_markers import hookimpl
from core.store.message_store import MessageStore
from replication.controller.replica import ControllerReplication
from replication.controller.service import ControllerService


@hookimpl
def mq_controller(node: NameServerNode, config: Config, data_dir: Path) -> HostedController | None:
    return ControllerService(node, config, data_dir) if config.replication.controller else None


@hookimpl
def mq_replication(mode: str, node: BrokerNode, config: Config, store: MessageStore) -> Replication | None:
    if not config.replication.controller or mode not in ("sync", "async"):
        return None
    return ControllerReplication(node, config, store, sync=mode == "sync")
