"""An in-process cluster (name servers and brokers on real TCP, port 0) for behaviour tests."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import trio

from core.config import BrokerSettings, Config, StoreConfig
from core.node_specs import BrokerNode, NameServerNode
from core.plugin_manager import PluginHost
from core.servers.broker import serve_broker
from core.servers.namesrv import serve_nameserver
from plugins import plugin_host

SMALL_STORE = StoreConfig(segment_size_bytes=1 << 20, cq_entries_per_file=1000, index_slots=1009,
                          index_entries=10_000, flush_interval_ms=50, checkpoint_interval_ms=200)


@dataclass
class RunningBroker:
    name: str
    address: str
    scope: trio.CancelScope
    node: BrokerNode


@dataclass
class InProcessCluster:
    nursery: trio.Nursery
    data_dir: Path
    namesrv: list[str]
    config: Config
    brokers: dict[str, RunningBroker]

    async def start_broker(self, name: str = "broker-a", broker_id: int = 0, port: int = 0, *,
                           plugins: PluginHost | None = None, host: str = "127.0.0.1") -> RunningBroker:
        """A broker node in this process; ``plugins``: its plugin host (the built-in plugins
        by default), to which a test may add an observer; ``host``: the loopback address it
        listens on."""
        node = BrokerNode(name, broker_id, f"{host}:{port}")
        plugin_host_ = plugins or plugin_host(load_entry_points=False)
        config = dataclasses.replace(self.config, brokers=(node,))
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await serve_broker(node, config, plugin_host_, data_dir=self.data_dir, task_status=task_status)

        bound = await self.nursery.start(run)
        broker = RunningBroker(node.node, f"{host}:{bound}", scope, dataclasses.replace(node, listen=f"{host}:{bound}"))
        self.brokers[node.node] = broker
        return broker

    async def stop_broker(self, node: str) -> None:
        broker = self.brokers.pop(node)
        broker.scope.cancel()
        await trio.sleep(0.05)


async def start_cluster(nursery: trio.Nursery, data_dir: Path, *, nameservers: int = 1,
                        broker: BrokerSettings | None = None, store: StoreConfig = SMALL_STORE) -> InProcessCluster:
    base = Config(store=store, broker=broker or BrokerSettings(register_interval_ms=500))
    addrs = []
    for i in range(nameservers):
        node = NameServerNode(f"ns{i}", "127.0.0.1:0")
        ns_config = dataclasses.replace(base, nameservers=(node,))
        port = await nursery.start(lambda task_status, n=node, c=ns_config: serve_nameserver(
            n, c, plugin_host(load_entry_points=False), data_dir=data_dir, task_status=task_status))
        addrs.append(f"127.0.0.1:{port}")
    config = dataclasses.replace(base, nameservers=tuple(NameServerNode(f"ns{i}", a) for i, a in enumerate(addrs)))
    return InProcessCluster(nursery, data_dir, addrs, config, {})
