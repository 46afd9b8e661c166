"""Reading nodes' ``/metrics`` endpoints: where each one is, and its samples, parsed by
prometheus_client's own parser."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from core.config import Config
from core.metrics.http import address_file
from mqctl.nodes.processes import nodes_of

SCRAPE_TIMEOUT_S = 2.0
BODY_BYTES_MAX = 32 * 1024 * 1024  # a scrape larger than this is refused, not buffered

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Target:
    node: str
    kind: str  # nameserver, broker, proxy
    address: str  # host:port of its metrics ("" when not known: not running, or metrics off)


@dataclass(slots=True)
class Scrape:
    """One node's samples at one moment: name -> labels -> value."""

    target: Target
    at: float  # time.monotonic()
    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)
    error: str = ""

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for key, v in self.samples.get(name, {}).items() if wanted <= set(key))

    def series(self, name: str) -> dict[Labels, float]:
        return self.samples.get(name, {})


def targets(config: Config) -> list[Target]:
    """Every node of the config and where its metrics are: its ``metrics_listen`` when that
    names a port, else the address the running node wrote to ``data_dir/run/<node>.metrics``."""
    out = []
    for spec in nodes_of(config):
        listen = config.metrics_listen_of(spec.name)
        address = listen if config.metrics.enabled and not listen.endswith(":0") else ""
        if config.metrics.enabled and not address:
            address = _written(address_file(config.data_dir, spec.name))
        out.append(Target(spec.name, spec.kind, address))
    return out


def _written(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def scrape(target: Target, timeout_s: float = SCRAPE_TIMEOUT_S) -> Scrape:
    """``target``'s samples now; ``error`` says why there are none."""
    now = time.monotonic()
    if not target.address:
        return Scrape(target, now, error="not running (no metrics address)")
    try:
        with urllib.request.urlopen(f"http://{target.address}/metrics", timeout=timeout_s) as answer:
            body = answer.read(BODY_BYTES_MAX + 1)
    except (OSError, urllib.error.URLError) as exc:
        return Scrape(target, now, error=f"{target.address}: {getattr(exc, 'reason', exc)}")
    if len(body) > BODY_BYTES_MAX:
        return Scrape(target, now, error=f"{target.address}: the scrape is over {BODY_BYTES_MAX} bytes")
    return Scrape(target, now, parse(body.decode("utf-8", "replace")))


def parse(text: str) -> dict[str, dict[Labels, float]]:
    samples: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in ("cluster", "node")))
            samples.setdefault(sample.name, {})[key] = sample.value
    return samples
