"""The built-in ``ha_controller`` plugin: RocketMQ 5's controller mode. Each name server hosts a
member of the controller group (:mod:`replication.controller.service`), which elects every
broker group's master from its SyncStateSet."""

from __future__ import annotations

from pathlib import Path

from core.config import Config
from core.namesrv.controller import HostedController
from core.node_specs import NameServerNode
from core.plugin_markers import hookimpl
from replication.controller.service import ControllerService


@hookimpl
def mq_controller(node: NameServerNode, config: Config, data_dir: Path) -> HostedController | None:
    return ControllerService(node, config, data_dir) if config.replication.controller else None
