"""The built-in routing plugin: the name server keeps RocketMQ's route tables and liveness
rules (core.namesrv.route_table)."""

from __future__ import annotations

from core.config import NameServerSettings
from core.namesrv.route_table import RouteTable
from core.plugin_markers import hookimpl


@hookimpl
def mq_route_table(settings: NameServerSettings) -> RouteTable:
    return RouteTable(expiry_ms=settings.broker_expiry_ms)
