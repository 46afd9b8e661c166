"""Configuration: ``conf.toml`` parsed into typed, validated sections.

Unknown keys are errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args

from core.addresses import shifted
from core.errors import ConfigError
from core.metrics.settings import MetricsSettings
from core.node_specs import BrokerNode, NameServerNode, ProxyNode, metrics_listen
from core.proxy_settings import ProxySettings
from core.remoting.limits import ConnectionLimits
from core.remoting.signing import Credentials

FlushMode = Literal["async", "sync"]
ReplicationMode = Literal["async", "sync", "dledger"]
MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The message store of one node (RocketMQ's MessageStoreConfig, in our units)."""

    segment_size_bytes: int = GiB
    flush: FlushMode = "async"
    flush_interval_ms: int = 500
    sync_flush_timeout_ms: int = 5000
    sync_flush_waiters_max: int = 100_000
    checkpoint_interval_ms: int = 1000
    cq_entries_per_file: int = 300_000
    index_enabled: bool = True
    index_slots: int = 5_000_000
    index_entries: int = 20_000_000
    message_size_bytes_max: int = 4 * MiB
    retention_hours: float = 72.0
    retention_check_interval_ms: int = 10_000
    archive: bool = False
    disk_max_used_ratio: float = 0.90
    disk_check_interval_ms: int = 1000
    prefault_window_bytes: int = 64 * MiB
    recover_cut_damage: bool = False
    # RocketMQ's messageDelayLevel: level N (1-based) delays a message by the N-th duration
    delay_levels: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

    def __post_init__(self) -> None:
        if self.flush not in get_args(FlushMode):
            raise ConfigError(f"store.flush must be one of {get_args(FlushMode)}, not {self.flush!r}")
        if self.segment_size_bytes < 4096:
            raise ConfigError("store.segment_size_bytes must be at least 4096")
        if not 0.0 < self.disk_max_used_ratio <= 1.0:
            raise ConfigError("store.disk_max_used_ratio must be in (0, 1]")
        if self.cq_entries_per_file < 1 or self.index_slots < 1 or self.index_entries < 2:
            raise ConfigError("store: queue and index sizes must be positive")
        for name in ("flush_interval_ms", "sync_flush_timeout_ms", "checkpoint_interval_ms",
                     "retention_check_interval_ms", "disk_check_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"store.{name} must be positive")
        parse_delay_levels(self.delay_levels)

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """The delay of each level in ms; level N is element N - 1."""
        return parse_delay_levels(self.delay_levels)


_DURATION_MS = MappingProxyType({"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000})


@functools.lru_cache(maxsize=16)
def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 1m 2h"`` -> delays in ms (units ms, s, m, h, d, as RocketMQ's messageDelayLevel)."""
    levels = []
    for word in text.split():
        match = re.fullmatch(r"(\d+)(ms|s|m|h|d)", word)
        if match is None or int(match[1]) <= 0:
            raise ConfigError(f"store.delay_levels: {word!r} is not a duration such as 5s, 1m or 2h")
        levels.append(int(match[1]) * _DURATION_MS[match[2]])
    if not levels:
        raise ConfigError("store.delay_levels needs at least one level")
    return tuple(levels)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """How a broker group replicates (RocketMQ's brokerRole and HA settings, in our units)."""

    mode: ReplicationMode = "async"
    # a new, empty slave copies the master's whole log (else from the start of its last segment)
    full_sync: bool = False
    # sync mode: a slave further behind than this does not count (SLAVE_NOT_AVAILABLE)
    ha_slave_fallbehind_max: int = 256 * MiB
    ha_transfer_batch_bytes: int = 32 * 1024
    ha_heartbeat_interval_ms: int = 5_000
    # a link silent this long is dropped (RocketMQ's haHousekeepingInterval)
    ha_housekeeping_interval_ms: int = 20_000
    ha_reconnect_interval_ms: int = 5_000
    # RocketMQ 5's controller mode (sync or async only): the name servers' controller elects each
    # group's master from its SyncStateSet; ids no longer decide roles
    controller: bool = False
    # controller mode: a slave behind this long leaves the SyncStateSet (haMaxTimeSlaveNotCatchup)
    ha_max_time_slave_not_catchup_ms: int = 15_000
    # controller mode: a put is refused (IN_SYNC_REPLICAS_NOT_ENOUGH) while the SyncStateSet is smaller
    min_in_sync_replicas: int = 1
    # controller mode: elect from every replica, not only the SyncStateSet (loses acknowledged messages)
    unclean_election: bool = False
    controller_heartbeat_interval_ms: int = 100
    controller_heartbeat_timeout_ms: int = 3_000

    def __post_init__(self) -> None:
        if self.mode not in get_args(ReplicationMode):
            raise ConfigError(
                f"replication.mode must be one of {get_args(ReplicationMode)}, not {self.mode!r}"
            )
        if self.controller and self.mode == "dledger":
            raise ConfigError("replication.controller needs mode 'sync' or 'async' (dledger elects by raft)")
        if self.min_in_sync_replicas < 1:
            raise ConfigError("replication.min_in_sync_replicas must be at least 1")
        if self.controller_heartbeat_timeout_ms <= 2 * self.controller_heartbeat_interval_ms:
            raise ConfigError("replication.controller_heartbeat_timeout_ms must exceed two heartbeat intervals")
        if not 1 <= self.ha_transfer_batch_bytes <= 32 * 1024:
            raise ConfigError("replication.ha_transfer_batch_bytes must be in 1..32768 (the HA protocol's limit)")
        for name in ("ha_slave_fallbehind_max", "ha_heartbeat_interval_ms", "ha_housekeeping_interval_ms",
                     "ha_reconnect_interval_ms", "ha_max_time_slave_not_catchup_ms",
                     "controller_heartbeat_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"replication.{name} must be positive")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    name: str = "DefaultCluster"
    data_dir: str = "data"
    lab: int = -1  # >= 0: every node a host of that network-namespace lab (mqctl/hosts/placement.py)


@dataclass(frozen=True, slots=True)
class NameServerSettings:
    """Shared by every name server (RocketMQ's NamesrvConfig and its liveness rules)."""

    scan_interval_ms: int = 10_000
    broker_expiry_ms: int = 120_000
    connections_max: int = 1024

    def __post_init__(self) -> None:
        if self.scan_interval_ms <= 0 or self.broker_expiry_ms <= 0:
            raise ConfigError("namesrv: intervals must be positive")
        if self.connections_max < 1:
            raise ConfigError("namesrv.connections_max must be at least 1")

    @property
    def limits(self) -> ConnectionLimits:
        return ConnectionLimits(connections_max=self.connections_max)


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Shared by every broker (RocketMQ's BrokerConfig, in our units)."""

    auto_create_topic: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    register_interval_ms: int = 30_000
    register_timeout_ms: int = 6_000
    long_polling: bool = True
    short_polling_ms: int = 1_000
    long_poll_check_interval_ms: int = 5_000
    long_poll_suspend_max_ms: int = 20_000
    pull_batch_max: int = 32
    pull_bytes_max: int = 256 * 1024
    offset_persist_interval_ms: int = 5_000
    frame_size_bytes_max: int = 16 * MiB
    retry_max_times: int = 16
    transaction_timeout_ms: int = 6_000
    transaction_check_interval_ms: int = 60_000
    transaction_check_max: int = 15
    # slaves serve reads in their own right, and masters send consumers far behind to them
    slave_read_enable: bool = False
    # "far behind": a pull this many bytes below the log's end (0: 40% of physical memory,
    # RocketMQ's accessMessageInMemoryMaxRatio)
    cold_read_lag_bytes: int = 0
    # serve subscriptions by SQL92 over message properties (RocketMQ's enablePropertyFilter,
    # also off by default there); off, an SQL92 subscription is refused, never starved
    enable_property_filter: bool = False
    # a slave copies topics and consumer offsets from its master this often
    slave_sync_interval_ms: int = 10_000
    # what one peer may take (see core/remoting/limits.py); beyond: refused, SYSTEM_BUSY or closed
    connections_max: int = 1024
    inflight_requests_max: int = 1024  # per connection: requests being handled at once
    inflight_bytes_max: int = 64 * MiB  # per connection: their bytes
    held_pulls_per_connection_max: int = 512  # a consumer holds one per queue it reads here
    large_frames_bytes_max: int = 256 * MiB  # node-wide: frames of 1 MiB or more being received

    def __post_init__(self) -> None:
        if not 1 <= self.default_topic_queue_nums <= 1024:
            raise ConfigError("broker.default_topic_queue_nums must be in 1..1024")
        if self.transaction_timeout_ms < 0 or self.transaction_check_interval_ms <= 0 or self.transaction_check_max < 1:
            raise ConfigError("broker.transaction_timeout_ms must be >= 0, transaction_check_interval_ms > 0 "
                              "and transaction_check_max >= 1")
        for name in ("connections_max", "inflight_requests_max", "inflight_bytes_max",
                     "held_pulls_per_connection_max"):
            if getattr(self, name) < 1:
                raise ConfigError(f"broker.{name} must be at least 1")
        if self.large_frames_bytes_max < self.frame_size_bytes_max:
            raise ConfigError("broker.large_frames_bytes_max must be at least broker.frame_size_bytes_max "
                              "(else the largest frame could never be received)")

    @property
    def limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            connections_max=self.connections_max, inflight_requests_max=self.inflight_requests_max,
            inflight_bytes_max=self.inflight_bytes_max, large_frames_bytes_max=self.large_frames_bytes_max)


# Field metadata of a secret: never printed (repr, mqctl config get/set, logs, errors).
SECRET = MappingProxyType({"secret": True})
ACL_KEY_LENGTH_MIN = 7  # RocketMQ: access and secret keys longer than 6 characters


def is_secret(f: dataclasses.Field[Any]) -> bool:
    return bool(f.metadata.get("secret"))


@dataclass(frozen=True, slots=True)
class AclConfig:
    """RocketMQ-compatible access control (off by default). ``file`` is a RocketMQ
    ``plain_acl.yml`` (relative paths: from the config file; re-read within a second of a change).
    ``access_key``/``secret_key`` are
    the account mqctl and the nodes themselves sign with (an admin account of the file)."""

    enabled: bool = False
    file: str = "plain_acl.yml"
    access_key: str = ""
    secret_key: str = field(default="", repr=False, metadata=SECRET)

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("[acl] access_key and secret_key go together")
        if self.secret_key and min(len(self.access_key), len(self.secret_key)) < ACL_KEY_LENGTH_MIN:
            raise ConfigError(f"[acl] access_key and secret_key need at least {ACL_KEY_LENGTH_MIN} "
                              "characters (RocketMQ's minimum)")

    def credentials(self) -> Credentials | None:
        """The keys the nodes and mqctl sign their requests with, if any."""
        return Credentials(self.access_key, self.secret_key) if self.access_key else None


@dataclass(frozen=True, slots=True)
class Config:
    """A whole ``conf.toml``."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    namesrv: NameServerSettings = field(default_factory=NameServerSettings)
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    acl: AclConfig = field(default_factory=AclConfig)
    proxy: ProxySettings = field(default_factory=ProxySettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    nameservers: tuple[NameServerNode, ...] = ()
    brokers: tuple[BrokerNode, ...] = ()
    proxies: tuple[ProxyNode, ...] = ()
    source: Path | None = None

    @property
    def namesrv_addresses(self) -> list[str]:
        return [ns.address for ns in self.nameservers]

    def node_names(self) -> list[str]:
        return [ns.name for ns in self.nameservers] + [b.node for b in self.brokers] + [p.name for p in self.proxies]

    @property
    def broker_groups(self) -> list[str]:
        """The broker group names, in the order they first appear (a proxy's doors follow it)."""
        return list(dict.fromkeys(b.name for b in self.brokers))

    def proxy_node(self, name: str) -> ProxyNode | None:
        return next((p for p in self.proxies if p.name == name), None)

    def proxy_doors(self, proxy: ProxyNode) -> dict[str, tuple[str, str]]:
        return proxy.doors(self.broker_groups)

    def listens_of(self, name: str) -> list[str]:
        """Every address node ``name`` listens on: a broker's HA port (its port + 1), a
        proxy's doors, and a fixed metrics port too. Empty for an unknown node."""
        metrics = self.metrics_listen_of(name)
        fixed = [metrics] if self.metrics.enabled and metrics and not metrics.endswith(":0") else []
        if (ns := self.nameserver(name)) is not None:
            raft = [shifted(ns.listen, 1)] if self.replication.controller else []
            return [ns.listen, *raft, *fixed]
        if (broker := self.broker_node(name)) is not None:
            ha = [] if broker.listen.endswith(":0") else [shifted(broker.listen, 1)]
            return [broker.listen, *ha, *fixed]
        if (proxy := self.proxy_node(name)) is not None:
            doors = [listen for listen, _ in self.proxy_doors(proxy).values()]
            return [proxy.listen, *doors] + ([proxy.grpc_listen] if proxy.grpc_listen else []) + fixed
        return []

    def metrics_listen_of(self, name: str) -> str:
        """Where node ``name`` serves metrics (see :func:`metrics_listen`); "" if unknown."""
        node = self.nameserver(name) or self.broker_node(name) or self.proxy_node(name)
        return "" if node is None else metrics_listen(node)

    def nameserver(self, name: str) -> NameServerNode | None:
        return next((ns for ns in self.nameservers if ns.name == name), None)

    def broker_node(self, node: str) -> BrokerNode | None:
        return next((b for b in self.brokers if b.node == node), None)

    @property
    def acl_file(self) -> Path:
        return self._from_source(self.acl.file)

    @property
    def data_dir(self) -> Path:
        return self._from_source(self.cluster.data_dir)

    def _from_source(self, name: str) -> Path:
        """A path the file names: relative ones are relative to the file."""
        path = Path(name)
        if not path.is_absolute() and self.source is not None:
            path = self.source.parent / path
        return path


def _section(cls: type, raw: Any, name: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"[{name}] must be a table")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{name}]: {', '.join(unknown)}")
    for f in dataclasses.fields(cls):
        if f.name in raw and f.type in ("int", "float") and isinstance(raw[f.name], bool):
            raise ConfigError(f"{name}.{f.name} must be a number")
    try:
        return cls(**raw)
    except TypeError as exc:
        raise ConfigError(f"[{name}]: {exc}") from None


def parse_config(raw: dict[str, Any], source: Path | None = None) -> Config:
    """Validate a parsed TOML document."""
    sections = {"cluster": ClusterConfig, "store": StoreConfig, "replication": ReplicationConfig,
                "namesrv": NameServerSettings, "broker": BrokerSettings, "acl": AclConfig,
                "proxy": ProxySettings, "metrics": MetricsSettings}
    arrays = {"nameservers": NameServerNode, "brokers": BrokerNode, "proxies": ProxyNode}
    unknown = sorted(set(raw) - set(sections) - set(arrays))
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(unknown)}")
    parts: dict[str, Any] = {k: _section(cls, raw.get(k), k) for k, cls in sections.items()}
    for key, cls in arrays.items():
        items = raw.get(key, [])
        if not isinstance(items, list):
            raise ConfigError(f"[[{key}]] must be an array of tables")
        parts[key] = tuple(_section(cls, item, key) for item in items)
    config = Config(**parts, source=source)
    names = config.node_names()
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"node names used twice: {', '.join(duplicates)}")
    listens = [ns.listen for ns in config.nameservers] + [b.listen for b in config.brokers]
    for proxy in config.proxies:
        listens += config.listens_of(proxy.name)
    fixed = [n.metrics_listen for n in config.nameservers] + [b.metrics_listen for b in config.brokers]
    listens += [m for m in fixed if m and not m.endswith(":0")]  # a proxy's is in listens_of
    if config.replication.controller:
        listens += [shifted(ns.listen, 1) for ns in config.nameservers]
        fixed_ports = [ns.name for ns in config.nameservers if ns.listen.endswith(":0")]
        if fixed_ports:
            raise ConfigError(f"replication.controller: name servers {', '.join(fixed_ports)} need a fixed port "
                              "(the controller's raft port is the next one)")
    taken = sorted({a for a in listens if listens.count(a) > 1})
    if taken:
        raise ConfigError(f"listen addresses used twice (a proxy's doors take the ports after its own): {', '.join(taken)}")
    return config


def load_config(path: Path) -> Config:
    """Read and validate ``path``."""
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_config(raw, source=path.resolve())
