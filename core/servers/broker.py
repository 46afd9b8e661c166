"""A broker node: its store, remoting server, registration and housekeeping."""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from core.acl.file import keep_acl_current
from core.addresses import own_loopback, split_address
from core.broker.broker import Broker
from core.broker.consume.long_polling import PullHold
from core.broker.consume.topic_queues import TopicQueues
from core.broker.metrics import fill_broker
from core.broker.pop.revive import make_pop_ready, revive_loop
from core.broker.registration import registration_loop, unregister_all
from core.broker.slave_sync import slave_sync_loop
from core.broker.wire.request_table import HANDLERS
from core.config import Config
from core.errors import ConfigError
from core.metrics.exposition import node_registry
from core.metrics.http import address_file, serve_node_metrics
from core.node_specs import BrokerNode, metrics_listen
from core.plugin_manager import PluginHost
from core.remoting.client import RemotingClient, open_remoting_client
from core.remoting.server import serve_remoting
from core.store.message_store import open_message_store

log = logging.getLogger(__name__)

CLIENT_IDLE_MS = 120_000
HOUSEKEEPING_S = 1.0


async def serve_broker(
    node: BrokerNode, config: Config, plugins: PluginHost, *, data_dir: Path,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run broker ``node`` until cancelled, then stop gracefully: unregister from the name
    servers, save offsets, flush and close the store."""
    root = data_dir / node.node
    hold = PullHold()
    plugins.register(hold, name=f"pull-hold:{node.node}")
    try:
        made = plugins.message_store(config.replication.mode, node, config, root)
        async with open_message_store(root, config.store, plugins, store=made) as store, \
                open_remoting_client(plugins=plugins, credentials=config.acl.credentials(),
                                     source_host=own_loopback(node.listen)) as client:
            replication = plugins.replication(config.replication.mode, node, config, store)
            if replication is None:
                raise ConfigError(f"no plugin provides replication.mode = {config.replication.mode!r} "
                                  f"(installed plugins: {', '.join(plugins.names)})")
            broker = Broker(node, config, store, hold, root, replication, HANDLERS,
                            TopicQueues(client, config.namesrv_addresses))
            caught_up = broker.offset_journal.catch_up()  # what the last save of the offsets missed
            if caught_up:
                log.info("broker %s: %d consumer offset journal records applied since the last save", node.node,
                         caught_up)
            host, port = split_address(node.listen)
            served = False
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(broker.notices.run)
                    bound = await nursery.start(lambda task_status: serve_remoting(
                        broker, host, port, plugins=plugins, on_close=broker.connection_closed,
                        frame_size_max=config.broker.frame_size_bytes_max, limits=config.broker.limits,
                        latency=broker.meters.latency, task_status=task_status))
                    broker.bind(bound)
                    broker.ha_bound(await nursery.start(replication.serve, broker.ha_address))
                    nursery.start_soon(_follow_role, broker, client)
                    nursery.start_soon(registration_loop, broker, client, config.namesrv_addresses)
                    nursery.start_soon(_housekeeping, broker)
                    if broker.acl is not None:
                        nursery.start_soon(keep_acl_current, broker.acl)
                    if config.metrics.enabled:
                        registry = node_registry("broker", broker.cluster, node.node, lambda out: fill_broker(broker, out))
                        await nursery.start(serve_node_metrics, registry, metrics_listen(node),
                                            address_file(data_dir, node.node))
                    log.info("broker %s listening on %s", node.node, broker.address)
                    served = True
                    task_status.started(bound)
            finally:
                # a node that never served registered nothing: its name (and address) may be
                # another running broker's, which an unregister would take out of the routes
                if served:
                    with trio.CancelScope(shield=True), trio.move_on_after(5):
                        await unregister_all(broker, client, config.namesrv_addresses)
                broker.offsets.save()
    finally:
        plugins.unregister(hold)


async def _follow_role(broker: Broker, client: RemotingClient) -> None:
    """Run what the node's role needs: a master delivers delayed messages and checks open
    transactions; a replica copies its master's metadata. Under raft the role changes with
    elections: the tasks are swapped and the node registers its new id at once."""
    while True:
        if broker.replication.writable:
            make_pop_ready(broker)
        async with trio.open_nursery() as nursery:
            if broker.replication.writable:  # a replica's log only grows by replication
                nursery.start_soon(broker.schedule.run)
                nursery.start_soon(broker.transactions.run)
                nursery.start_soon(revive_loop, broker)
                nursery.start_soon(broker.offset_journal.write)
            else:
                nursery.start_soon(slave_sync_loop, broker, client)
                nursery.start_soon(broker.offset_journal.follow)
            await broker.replication.wait_role_changed()
            broker.role_changed()
            nursery.cancel_scope.cancel()
        if broker.replication.writable:
            broker.adopt_stored_topics()
        log.info("broker %s: now %s (broker id %d)", broker.node.node,
                 "writable" if broker.replication.writable else "read-only", broker.replication.broker_id)
        broker.register_wanted.set()


async def _housekeeping(broker: Broker) -> None:
    persist_every = broker.settings.offset_persist_interval_ms / 1000
    next_persist = trio.current_time() + persist_every
    while True:
        await trio.sleep(HOUSEKEEPING_S)
        for group in broker.clients.expire(broker.now_ms(), CLIENT_IDLE_MS):
            broker.consumer_group_changed(group)
        if trio.current_time() >= next_persist:
            await trio.to_thread.run_sync(broker.offsets.save)
            next_persist = trio.current_time() + persist_every
