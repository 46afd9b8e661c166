"""A proxy node: one :class:`Forwarder` (which follows masters and raft leaders) under two
doors, the 4.x remoting one (its own port, the clients' name server, and a door per broker
group) and the 5.x gRPC one, all on one trio loop; and the view of the groups it keeps current."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from core.acl.file import AclFile, keep_acl_current
from core.addresses import own_loopback, split_address
from core.config import Config
from core.metrics.exposition import node_registry
from core.metrics.http import address_file, serve_node_metrics
from core.node_specs import ProxyNode, metrics_listen
from core.plugin_manager import PluginHost
from core.proxy.cluster_view import ELECTING_REFRESH_S, STEADY_REFRESH_S, ClusterView
from core.proxy.doors import Doors
from core.proxy.forwarder import Forwarder
from core.proxy.grpc.clients import GrpcClients
from core.proxy.grpc.server import serve_grpc
from core.proxy.grpc.service import MessagingService
from core.proxy.meters import ProxyMeters
from core.proxy.metrics import ProxyParts, fill_proxy
from core.proxy.remoting.door import RemotingDoor
from core.remoting.client import open_remoting_client
from core.remoting.server import serve_remoting

log = logging.getLogger(__name__)


async def serve_proxy(
    node: ProxyNode, config: Config, plugins: PluginHost, *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run proxy ``node`` until cancelled; reports its own port once every door listens."""
    doors = Doors(config, node)
    source_host = own_loopback(node.listen)  # a proxy on 127.0.0.12 calls from there too
    async with open_remoting_client(plugins=plugins, credentials=config.acl.credentials(),
                                    source_host=source_host) as client, trio.open_nursery() as nursery:
        elects = config.replication.mode == "dledger" or config.replication.controller
        view = ClusterView(client, config.namesrv_addresses,
                           steady_refresh_s=ELECTING_REFRESH_S if elects else STEADY_REFRESH_S)
        await nursery.start(view.run)
        acl = AclFile(config.acl_file) if config.acl.enabled else None
        forwarder = Forwarder(nursery, doors, view, client, config.namesrv_addresses,
                              elects=elects, failover_wait_s=config.proxy.failover_wait_ms / 1000)
        view.on_master_moved = forwarder.master_moved
        more_counters: Callable[[], dict[str, str]] = dict
        meters = ProxyMeters(config.metrics.label_values_max, timed=config.metrics.enabled)
        service: MessagingService | None = None
        if acl is not None:
            nursery.start_soon(keep_acl_current, acl)
        if node.grpc_listen:
            clients = GrpcClients(nursery, config.proxy, source_host=source_host)
            nursery.start_soon(clients.expire_silent)
            service = MessagingService(forwarder, clients, config.proxy, acl, nursery)
            service.meters = meters
            more_counters = service.runtime_table
            nursery.start_soon(service.consuming.renewals.run)
            got = await nursery.start(lambda task_status: serve_grpc(
                service, node.grpc_listen, connections_max=config.broker.limits.connections_max,
                task_status=task_status))
            log.info("proxy %s: RocketMQ 5 clients (gRPC) on %s, port %d", node.name, node.grpc_listen, got)
        front = RemotingDoor(nursery, forwarder, acl=acl, more_counters=more_counters, meters=meters,
                             source_host=source_host)
        listeners: list[tuple[str | None, str]] = [(None, node.listen), *doors.listens.items()]
        bound = 0
        for group, listen in listeners:
            host, port = split_address(listen)
            got = await nursery.start(lambda task_status, group=group, host=host, port=port: serve_remoting(
                front.listener(group), host, port, plugins=plugins, on_close=front.connection_closed,
                frame_size_max=config.broker.frame_size_bytes_max, limits=config.broker.limits,
                keep_frames=True, latency=meters.remoting, task_status=task_status))
            bound = bound or got
            log.info("proxy %s: %s on %s:%d", node.name, f"door of {group}" if group else "routes", host, got)
        if config.metrics.enabled:
            parts = ProxyParts(meters, forwarder, front, service)
            registry = node_registry("proxy", config.cluster.name, node.name, lambda out: fill_proxy(parts, out))
            await nursery.start(serve_node_metrics, registry, metrics_listen(node),
                                address_file(config.data_dir, node.name))
        task_status.started(bound)
