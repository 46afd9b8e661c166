"""The ``[proxy]`` section of ``conf.toml``: what every proxy of the file shares (its own module,
so the proxy's many knobs do not crowd the rest of the configuration)."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """What every proxy of the file shares ([proxy])."""

    # how long a write waits for a raft group to have a leader again (and a send that failed on
    # a leader that died may be sent again to the new one); the C++ client gives up after 3 s
    failover_wait_ms: int = 2500
    # deprecated: RocketMQ 5 groups that consume in order, besides those the brokers declare
    # (`mqctl group set G --orderly`, RocketMQ's consumeMessageOrderly)
    fifo_groups: tuple[str, ...] = ()
    # deliveries of one message before it goes to %DLQ%{group} (RocketMQ: retryMaxTimes 16 + 1)
    max_delivery_attempts: int = 17
    # the shortest invisible time a receive may ask for (RocketMQ's proxy: 10 s)
    min_invisible_ms: int = 10_000
    # push consumers (auto_renew): handed out for a slice, renewed ahead_ms before it would come back,
    # for at most max_ms after the receive (RocketMQ's proxy: 60 s, 10 s, 3 h)
    auto_renew_slice_ms: int = 60_000
    auto_renew_ahead_ms: int = 10_000
    auto_renew_max_ms: int = 10_800_000
    # what 5.x clients may take (docs/grpc.md, "Limits"); keep grpc_clients_max below the brokers'
    # connections_max: each client holds upstream connections
    grpc_clients_max: int = 512
    grpc_clients_per_host_max: int = 128
    grpc_calls_max: int = 4096
    grpc_streams_per_client_max: int = 8
    telemetry_outbox_max: int = 256
    # a gRPC connection that sends no HTTP/2 preface in this time is closed; one with no call in
    # progress for grpc_idle_timeout_ms is sent GOAWAY NO_ERROR and closed (clients reconnect)
    grpc_preface_timeout_ms: int = 10_000
    grpc_idle_timeout_ms: int = 300_000

    def __post_init__(self) -> None:
        if not 0 <= self.failover_wait_ms <= 60_000:
            raise ConfigError("proxy.failover_wait_ms must be between 0 and 60000")
        if not isinstance(self.fifo_groups, (list, tuple)) or not all(isinstance(g, str) for g in self.fifo_groups):
            raise ConfigError("proxy.fifo_groups must be a list of group names")
        object.__setattr__(self, "fifo_groups", tuple(self.fifo_groups))
        if not 1 <= self.max_delivery_attempts <= 1000:
            raise ConfigError("proxy.max_delivery_attempts must be between 1 and 1000")
        if not 0 <= self.min_invisible_ms <= 43_200_000:
            raise ConfigError("proxy.min_invisible_ms must be between 0 and 43200000 (12 h)")
        if not 1_000 <= self.auto_renew_slice_ms <= 43_200_000 or not 0 <= self.auto_renew_max_ms <= 86_400_000:
            raise ConfigError("proxy.auto_renew_slice_ms must be 1000 to 43200000, auto_renew_max_ms 0 to 86400000")
        if not 0 < self.auto_renew_ahead_ms < self.auto_renew_slice_ms:
            raise ConfigError("proxy.auto_renew_ahead_ms must be above 0 and below auto_renew_slice_ms")
        for name in [f for f in self.__dataclass_fields__ if f.startswith(("grpc_", "telemetry_"))]:
            if not 1 <= getattr(self, name) <= 1_000_000:
                raise ConfigError(f"proxy.{name} must be between 1 and 1000000")
