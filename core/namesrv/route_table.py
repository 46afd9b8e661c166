"""Route tables and broker liveness (sans-IO: every call takes ``now_ms``).

RocketMQ's RouteInfoManager, as plain data:

```
topic        -> {broker name -> QueueData}            queueDatas of a route
broker name  -> BrokerData {cluster, addrs: id -> "ip:port"}   id 0 = master
cluster      -> {broker names}
broker addr  -> LiveBroker {last seen, data version, HA addr, connection}
```

A master's registration carries its full topic table, which replaces that broker's queue
data; slaves only add their address. A broker is dropped when it has not registered for
``expiry_ms`` (checked by :meth:`RouteTable.expire`) or when its connection closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.node_specs import MASTER_ID


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": {str(k): v for k, v in sorted(self.addrs.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass(slots=True)
class LiveBroker:
    last_seen_ms: int
    data_version: dict[str, Any]
    ha_addr: str
    connection: object | None


@dataclass(frozen=True, slots=True)
class Registration:
    """What a registering broker learns: its master and the master's HA address (slaves)."""

    master_addr: str | None
    ha_addr: str | None
    want_full: bool = False  # an increment from a broker not known here: send every topic


class RouteTable:
    """The name server's view of brokers and topics."""

    def __init__(self, expiry_ms: int = 120_000) -> None:
        self.expiry_ms = expiry_ms
        self.topics: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, LiveBroker] = {}

    # ------------------------------------------------------------------ updates

    def register(
        self, *, cluster: str, broker_name: str, broker_addr: str, broker_id: int, ha_addr: str,
        topic_configs: dict[str, dict[str, Any]], data_version: dict[str, Any], now_ms: int,
        connection: object | None = None, incremental: bool = False,
    ) -> Registration:
        """Record a broker's registration. ``incremental``: ``topic_configs`` holds only the
        topics that changed: they are set and the others kept, and the broker's data version is
        not taken, so its next whole registration replaces its topics (an increment lost on the
        way is made good then). An increment from a broker not known here is answered
        ``want_full``."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        data = self.brokers.get(broker_name)
        if data is None:
            data = self.brokers[broker_name] = BrokerData(cluster, broker_name)
        # the same address under another id: a slave promoted to master (or the reverse)
        for other_id, addr in list(data.addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del data.addrs[other_id]
        first = data.addrs.get(broker_id) != broker_addr
        data.addrs[broker_id] = broker_addr
        previous = self.live.get(broker_addr)
        unknown = first or previous is None
        if incremental:
            if broker_id == MASTER_ID:
                self._put_queue_data(broker_name, topic_configs)
            kept = {} if previous is None else previous.data_version
            self.live[broker_addr] = LiveBroker(now_ms, dict(kept), ha_addr, connection)
        else:
            if broker_id == MASTER_ID and (unknown or previous.data_version != data_version):  # type: ignore[union-attr]
                self._replace_queue_data(broker_name, topic_configs)
            self.live[broker_addr] = LiveBroker(now_ms, dict(data_version), ha_addr, connection)
        want_full = incremental and unknown
        if broker_id == MASTER_ID:
            return Registration(None, None, want_full)
        master = data.addrs.get(MASTER_ID)
        master_live = self.live.get(master) if master else None
        return Registration(master, master_live.ha_addr if master_live else None, want_full)

    def _replace_queue_data(self, broker_name: str, topic_configs: dict[str, dict[str, Any]]) -> None:
        for topic in list(self.topics):
            if topic not in topic_configs:
                self._drop_queue_data(topic, broker_name)
        self._put_queue_data(broker_name, topic_configs)

    def _put_queue_data(self, broker_name: str, topic_configs: dict[str, dict[str, Any]]) -> None:
        for topic, cfg in topic_configs.items():
            self.topics.setdefault(topic, {})[broker_name] = QueueData(
                broker_name, int(cfg.get("readQueueNums", 0)), int(cfg.get("writeQueueNums", 0)),
                int(cfg.get("perm", 6)), int(cfg.get("topicSysFlag", 0)),
            )

    def _drop_queue_data(self, topic: str, broker_name: str) -> None:
        queues = self.topics.get(topic)
        if queues is not None and queues.pop(broker_name, None) is not None and not queues:
            del self.topics[topic]

    def unregister(self, *, cluster: str, broker_name: str, broker_addr: str, broker_id: int,
                   connection: object | None = None) -> bool:
        """Drop the broker, on a request over the connection that registered it (another
        process with the same name and address, one that never served, must not take it out
        of the routes); returns whether it was dropped."""
        live = self.live.get(broker_addr)
        if live is not None and live.connection is not None and connection is not None \
                and live.connection is not connection:
            return False
        self.live.pop(broker_addr, None)
        data = self.brokers.get(broker_name)
        if data is not None and data.addrs.get(broker_id) == broker_addr:
            del data.addrs[broker_id]
            if not data.addrs:
                self._forget_broker(broker_name)
        return True

    def _forget_broker(self, broker_name: str) -> None:
        data = self.brokers.pop(broker_name, None)
        if data is not None:
            names = self.clusters.get(data.cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.clusters[data.cluster]
        for topic in list(self.topics):
            self._drop_queue_data(topic, broker_name)

    def remove_address(self, broker_addr: str) -> bool:
        """Forget the broker at ``broker_addr`` (expired, or its connection closed)."""
        self.live.pop(broker_addr, None)
        for name, data in list(self.brokers.items()):
            for broker_id, addr in list(data.addrs.items()):
                if addr == broker_addr:
                    del data.addrs[broker_id]
                    if not data.addrs:
                        self._forget_broker(name)
                    return True
        return False

    def remove_connection(self, connection: object) -> list[str]:
        """Forget every broker registered through ``connection``."""
        gone = [addr for addr, live in self.live.items() if live.connection is connection]
        for addr in gone:
            self.remove_address(addr)
        return gone

    def expire(self, now_ms: int) -> list[str]:
        """Forget brokers silent for longer than the expiry; returns their addresses."""
        gone = [addr for addr, live in self.live.items() if now_ms - live.last_seen_ms > self.expiry_ms]
        for addr in gone:
            self.remove_address(addr)
        return gone

    # ------------------------------------------------------------------ queries

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData for ``topic``, or ``None`` when no live broker serves it."""
        queues = self.topics.get(topic)
        if not queues:
            return None
        broker_datas = [self.brokers[name].to_json() for name in sorted(queues) if name in self.brokers]
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": {},
            "queueDatas": [queues[name].to_json() for name in sorted(queues)],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: data.to_json() for name, data in sorted(self.brokers.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.clusters.items())},
        }

    def topic_list(self) -> list[str]:
        return sorted(self.topics)

    def data_version(self, broker_addr: str) -> dict[str, Any] | None:
        live = self.live.get(broker_addr)
        return None if live is None else live.data_version
