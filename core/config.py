"""Configuration: ``conf.toml`` parsed into typed, validated sections.

Unknown keys are errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from core.errors import ConfigError

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


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    mode: ReplicationMode = "async"

    def __post_init__(self) -> None:
        if self.mode not in get_args(ReplicationMode):
            raise ConfigError(
                f"replication.mode must be one of {get_args(ReplicationMode)}, not {self.mode!r}"
            )


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    name: str = "DefaultCluster"
    data_dir: str = ".mqctl"


@dataclass(frozen=True, slots=True)
class Config:
    """A whole ``conf.toml``."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    source: Path | None = None

    @property
    def data_dir(self) -> Path:
        base = Path(self.cluster.data_dir)
        if not base.is_absolute() and self.source is not None:
            base = self.source.parent / base
        return base


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
    sections = {"cluster": ClusterConfig, "store": StoreConfig, "replication": ReplicationConfig}
    unknown = sorted(set(raw) - set(sections))
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(unknown)}")
    parts = {k: _section(cls, raw.get(k), k) for k, cls in sections.items()}
    return Config(**parts, source=source)


def load_config(path: Path) -> Config:
    """Read and validate ``path``."""
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_config(raw, source=path.resolve())
