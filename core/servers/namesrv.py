"""A name server node: the remoting server, its processor, and the liveness scan."""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from core.acl.file import AclFile
from core.addresses import split_address
from core.clock import now_ms
from core.config import Config
from core.errors import CoreError
from core.metrics.counters import answer_latency
from core.metrics.exposition import node_registry
from core.metrics.http import address_file, serve_node_metrics
from core.namesrv.kv_config import KVConfig
from core.namesrv.metrics import fill_nameserver
from core.namesrv.processor import NameServerProcessor
from core.node_specs import NameServerNode, metrics_listen
from core.plugin_manager import PluginHost
from core.remoting.server import serve_remoting

log = logging.getLogger(__name__)


async def serve_nameserver(
    node: NameServerNode, config: Config, plugins: PluginHost, *, data_dir: Path,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the name server ``node`` until cancelled; reports its port once listening."""
    routes = plugins.route_table(config.namesrv)
    if routes is None:
        raise CoreError("no plugin provides the route table (is the routing plugin blocked?)")
    controller = None
    if config.replication.controller:
        controller = plugins.controller(node, config, data_dir / node.name)
        if controller is None:
            raise CoreError("replication.controller is on and no plugin makes the controller "
                            "(is the ha_controller plugin blocked?)")
    acl = AclFile(config.acl_file) if config.acl.enabled else None
    processor = NameServerProcessor(routes, KVConfig(data_dir / node.name / "kvConfig.json"),
                                    controller=controller, acl=acl)
    host, port = split_address(node.listen)
    latency = answer_latency(config.metrics.label_values_max, timed=config.metrics.enabled)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(lambda task_status: serve_remoting(
            processor, host, port, plugins=plugins, on_close=processor.connection_closed,
            limits=config.namesrv.limits, latency=latency, task_status=task_status))
        nursery.start_soon(_scan, routes, config.namesrv.scan_interval_ms / 1000)
        if controller is not None:
            await nursery.start(controller.run)
        if config.metrics.enabled:
            registry = node_registry("nameserver", config.cluster.name, node.name,
                                     lambda out: fill_nameserver(processor, latency, out))
            await nursery.start(serve_node_metrics, registry, metrics_listen(node),
                                address_file(data_dir, node.name))
        log.info("name server %s listening on %s:%d", node.name, host, bound)
        task_status.started(bound)


async def _scan(routes, interval_s: float) -> None:  # type: ignore[no-untyped-def]
    while True:
        await trio.sleep(interval_s)
        for addr in routes.expire(now_ms()):
            log.warning("broker %s expired: no registration for %d ms", addr, routes.expiry_ms)
