"""A typed facade over pluggy's PluginManager.

Built-in plugins come first, registered from a tuple in order; third-party plugins come from the
``mqctl.plugins`` entry-point group. ``MQCTL_BLOCK_PLUGINS`` (comma-separated names) blocks
plugins of either kind. Tests build hosts without entry points.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

from core import hookspecs
from core.plugin_markers import PROJECT

if TYPE_CHECKING:
    from core.broker.replication import Replication
    from core.client.fault import FaultSettings
    from core.client.selection import QueueSelector
    from core.config import Config, NameServerSettings
    from core.namesrv.controller import HostedController
    from core.namesrv.route_table import RouteTable
    from core.node_specs import BrokerNode, NameServerNode
    from core.remoting.command import RemotingCommand
    from core.remoting.connection import Connection
    from core.store.dispatch import DispatchRequest
    from core.store.message_store import MessageStore

ENTRY_POINT_GROUP = "mqctl.plugins"
BLOCK_ENV = "MQCTL_BLOCK_PLUGINS"


def plugin_name(plugin: object) -> str:
    """The name a plugin registers under: a module's name, else its class name."""
    name = getattr(plugin, "__name__", None)
    return name if isinstance(name, str) else type(plugin).__name__


class PluginHost:
    """The plugins of one process and typed calls to their hooks."""

    def __init__(
        self,
        builtins: Iterable[object] = (),
        *,
        load_entry_points: bool = True,
        blocked: Iterable[str] | None = None,
    ) -> None:
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(hookspecs)
        if blocked is None:
            blocked = [n.strip() for n in os.environ.get(BLOCK_ENV, "").split(",") if n.strip()]
        for name in blocked:
            self._pm.set_blocked(name)
        for plugin in builtins:
            name = plugin_name(plugin)
            if not self._pm.is_blocked(name):
                self._pm.register(plugin, name=name)
        if load_entry_points:
            self._pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)

    def register(self, plugin: object, name: str | None = None) -> None:
        self._pm.register(plugin, name=name or plugin_name(plugin))

    def unregister(self, plugin: object) -> None:
        self._pm.unregister(plugin)

    @property
    def names(self) -> list[str]:
        """Registered plugins in registration order (blocked names excluded)."""
        return [n for n, plugin in self._pm.list_name_plugin() if plugin is not None]

    def listens_to_dispatch(self) -> bool:
        """Whether any plugin implements ``mq_records_dispatched`` (the store skips the call
        on its hot path otherwise)."""
        return bool(self._pm.hook.mq_records_dispatched.get_hookimpls())

    def records_dispatched(self, store_dir: Path, requests: Sequence[DispatchRequest]) -> None:
        self._pm.hook.mq_records_dispatched(store_dir=store_dir, requests=requests)

    def segment_retired(self, segment: Path, archive: Path | None) -> None:
        self._pm.hook.mq_segment_retired(segment=segment, archive=archive)

    def has_rpc_hooks(self) -> bool:
        """Whether any plugin implements an RPC hook (connections skip the calls otherwise)."""
        hook = self._pm.hook
        return bool(hook.mq_rpc_before_request.get_hookimpls() or hook.mq_rpc_after_response.get_hookimpls())

    def rpc_before_request(self, conn: Connection, request: RemotingCommand) -> None:
        self._pm.hook.mq_rpc_before_request(conn=conn, request=request)

    def rpc_after_response(self, conn: Connection, request: RemotingCommand, response: RemotingCommand) -> None:
        self._pm.hook.mq_rpc_after_response(conn=conn, request=request, response=response)

    def route_table(self, settings: NameServerSettings) -> RouteTable | None:
        result: RouteTable | None = self._pm.hook.mq_route_table(settings=settings)
        return result

    def controller(self, node: NameServerNode, config: Config, data_dir: Path) -> HostedController | None:
        result: HostedController | None = self._pm.hook.mq_controller(node=node, config=config, data_dir=data_dir)
        return result

    def message_store(self, mode: str, node: BrokerNode, config: Config, root: Path) -> MessageStore | None:
        result: MessageStore | None = self._pm.hook.mq_message_store(mode=mode, node=node, config=config,
                                                                     root=root, plugins=self)
        return result

    def replication(self, mode: str, node: BrokerNode, config: Config, store: MessageStore) -> Replication | None:
        result: Replication | None = self._pm.hook.mq_replication(mode=mode, node=node, config=config, store=store)
        return result

    def queue_selector(self, settings: FaultSettings) -> QueueSelector | None:
        result: QueueSelector | None = self._pm.hook.mq_queue_selector(settings=settings)
        return result
