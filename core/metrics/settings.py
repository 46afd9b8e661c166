"""``[metrics]`` of conf.toml: whether nodes serve metrics, and the cap on label values."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ConfigError
from core.metrics.catalogue import LABEL_VALUES_MAX_DEFAULT


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """Every node serves Prometheus metrics at ``http://<metrics_listen>/metrics`` unless
    ``enabled`` is false (then nothing is counted either). A node's ``metrics_listen`` defaults
    to its listen host with port 0: a free port, written to ``data_dir/run/<node>.metrics``
    (``mqctl metrics targets`` lists them for Prometheus)."""

    enabled: bool = True
    # distinct values of a user-named label (topic, group, queue, slave) per metric; beyond, "__other__"
    label_values_max: int = LABEL_VALUES_MAX_DEFAULT

    def __post_init__(self) -> None:
        if self.label_values_max < 1:
            raise ConfigError("metrics.label_values_max must be at least 1")
