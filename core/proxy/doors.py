"""A proxy's doors: one listening address per broker group, and the routes that name them.

A 4.x client sends to the address its route gives for a broker group; the C++ client names no
broker in its requests (Java clients since 4.9.5 add ``bname``), so the proxy tells groups apart
by the door a request arrives on. Routes and cluster tables from the name servers are rewritten
so that each group the proxy has a door for is reached through it, as id 0 (the clients' master)
whatever the group's state: the proxy picks the member, so a client's route never changes when a
master or leader does. Groups without a door keep their own addresses.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.config import Config
from core.node_specs import MASTER_ID, ProxyNode

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS


class Doors:
    """Broker group <-> door, for one proxy."""

    def __init__(self, config: Config, proxy: ProxyNode) -> None:
        table = config.proxy_doors(proxy)
        self.listens = {group: listen for group, (listen, _) in table.items()}
        self.advertised = {group: advertised for group, (_, advertised) in table.items()}

    def rewrite_route(self, body: bytes) -> bytes:
        """A name server's TopicRouteData with each served group's addresses replaced by its door."""
        doc: dict[str, Any] = orjson.loads(body)
        for data in doc.get("brokerDatas") or []:
            self._point_at_door(data)
        return orjson.dumps(doc, option=_JSON_OPTIONS)

    def rewrite_cluster_info(self, body: bytes) -> bytes:
        """GET_BROKER_CLUSTER_INFO's tables, addresses replaced as in routes."""
        doc: dict[str, Any] = orjson.loads(body)
        for data in (doc.get("brokerAddrTable") or {}).values():
            self._point_at_door(data)
        return orjson.dumps(doc, option=_JSON_OPTIONS)

    def _point_at_door(self, broker_data: dict[str, Any]) -> None:
        door = self.advertised.get(broker_data.get("brokerName", ""))
        if door is not None:
            broker_data["brokerAddrs"] = {str(MASTER_ID): door}
