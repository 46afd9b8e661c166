"""Built-in plugins, registered in this order before any third-party plugin."""

from __future__ import annotations

from types import ModuleType

from core.plugin_manager import PluginHost
from plugins import ha_async, ha_controller, ha_dledger, ha_sync, routing, selection

BUILTIN_PLUGINS: tuple[ModuleType, ...] = (routing, selection, ha_async, ha_sync, ha_dledger, ha_controller)


def plugin_host(*, load_entry_points: bool = True) -> PluginHost:
    """A host with the built-in plugins and (unless told not to) the installed ones."""
    return PluginHost(BUILTIN_PLUGINS, load_entry_points=load_entry_points)
