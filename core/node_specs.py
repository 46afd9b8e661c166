"""The nodes a config names: name servers, brokers and proxies, each with the addresses it
listens on and the ones it tells others (``advertise``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.addresses import is_wildcard, join_address, shifted, split_address
from core.errors import ConfigError

MASTER_ID = 0  # a broker group's master; other ids are its slaves (RocketMQ's MixAll.MASTER_ID)


def check_listen(kind: str, name: str, listen: str, key: str = "listen") -> None:
    try:
        host, _ = split_address(listen)
    except ValueError:
        host = ""
    if not host:
        raise ConfigError(f"{kind} {name!r}: {key} must be host:port (port 0 picks a free one), not {listen!r}")


@dataclass(frozen=True, slots=True)
class NameServerNode:
    name: str
    listen: str = "127.0.0.1:9876"
    # the address brokers and clients use, when it is not ``listen`` (a proxy in front of it)
    advertise: str = ""
    metrics_listen: str = ""  # Prometheus metrics (empty: listen's host, a free port)

    def __post_init__(self) -> None:
        check_listen("nameserver", self.name, self.listen)
        if self.metrics_listen:
            check_listen("nameserver", self.name, self.metrics_listen, "metrics_listen")
        if self.advertise:
            check_listen("nameserver", self.name, self.advertise, "advertise")
            if self.advertise.endswith(":0"):
                raise ConfigError(f"nameserver {self.name!r}: advertise needs a real port, not {self.advertise!r}")

    @property
    def address(self) -> str:
        """Where brokers register and clients ask for routes."""
        return self.advertise or self.listen


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """One broker process: broker ``name`` (the group) and its ``id`` (0 = master)."""

    name: str
    id: int = 0
    listen: str = "127.0.0.1:10911"
    # the address clients are told through the name servers, when it is not ``listen``: a
    # proxy or NAT in front of the broker (RocketMQ's brokerIP1). Nodes still reach each other
    # on ``listen``, and records keep ``listen`` as their store host.
    advertise: str = ""
    # the address the other members of the group reach this node's HA / raft port through,
    # when it is not listen's port + 1 (a proxy in front of it)
    ha_advertise: str = ""
    metrics_listen: str = ""  # Prometheus metrics (empty: listen's host, a free port)

    def __post_init__(self) -> None:
        check_listen("broker", self.name, self.listen)
        if self.metrics_listen:
            check_listen("broker", self.name, self.metrics_listen, "metrics_listen")
        if self.ha_advertise:
            check_listen("broker", self.name, self.ha_advertise, "ha_advertise")
            if self.ha_advertise.endswith(":0"):
                raise ConfigError(f"broker {self.name!r}: ha_advertise needs a real port, not {self.ha_advertise!r}")
        if self.advertise:
            check_listen("broker", self.name, self.advertise, "advertise")
            if self.advertise.endswith(":0"):
                raise ConfigError(f"broker {self.name!r}: advertise needs a real port, not {self.advertise!r}")
        if self.id < 0:
            raise ConfigError(f"broker {self.name!r}: id must be >= 0")

    @property
    def is_master(self) -> bool:
        return self.id == MASTER_ID

    @property
    def registered_address(self) -> str:
        """The address the name servers hand to clients."""
        return self.advertise or self.listen

    @property
    def node(self) -> str:
        """The node's name: its data folder, log and pid file."""
        return f"{self.name}-{self.id}"


@dataclass(frozen=True, slots=True)
class ProxyNode:
    """A proxy: a stateless front door for 4.x clients (RocketMQ 5's remoting proxy).

    Clients use ``listen`` (or ``advertise``) as their name server. Each broker group gets a
    door of its own on the ports that follow, in the order the groups first appear in the
    config (group i: port + 1 + i); the routes the proxy answers name the doors, so a request
    says by the port it arrives on which group it is for (the C++ client names no broker)."""

    name: str
    listen: str = "127.0.0.1:8080"
    # the address clients are told, when it is not ``listen`` (doors follow its port too)
    advertise: str = ""
    # where RocketMQ 5 clients connect (gRPC, apache.rocketmq.v2.MessagingService; RocketMQ's
    # proxy uses port 8081); empty: no gRPC front door. Routes name the address a client dialled.
    grpc_listen: str = ""
    metrics_listen: str = ""  # Prometheus metrics (empty: listen's host, a free port)

    def __post_init__(self) -> None:
        if self.metrics_listen:
            check_listen("proxy", self.name, self.metrics_listen, "metrics_listen")
        for key, value in (("listen", self.listen), ("advertise", self.advertise), ("grpc_listen", self.grpc_listen)):
            if key != "listen" and not value:
                continue
            check_listen("proxy", self.name, value, key)
            if value.endswith(":0"):
                why = "" if key == "grpc_listen" else " (its doors follow it)"
                raise ConfigError(f"proxy {self.name!r}: {key} needs a real port{why}, not {value!r}")

    @property
    def address(self) -> str:
        """Where clients ask for routes (their name server address)."""
        return self.advertise or self.listen

    def doors(self, groups: list[str]) -> dict[str, tuple[str, str]]:
        """Each broker group's door: (the address listened on, the address routes name)."""
        return {group: (shifted(self.listen, 1 + i), shifted(self.address, 1 + i)) for i, group in enumerate(groups)}


def metrics_listen(node: NameServerNode | BrokerNode | ProxyNode) -> str:
    """Where ``node`` serves metrics: its ``metrics_listen``, else its listen host, port 0. A
    node listening on every address serves metrics on loopback only unless told otherwise: the
    endpoint has no access control, and names every topic and group."""
    if node.metrics_listen:
        return node.metrics_listen
    host = split_address(node.listen)[0]
    return join_address("127.0.0.1" if is_wildcard(host) else host, 0)
