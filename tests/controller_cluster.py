"""A cluster in controller mode for tests: three name servers hosting the controller, broker
group broker-a of three (ids 0-2), proxies if asked, started with `mqctl start` on free loopback
ports; and what its brokers say of their roles."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import trio

from core.client.pull import max_offset
from core.client.runtime import open_client
from core.config import Config
from mqctl.common import probe
from tests.conftest import Cluster, free_port

T = TypeVar("T")


def write_controller_config(path: Path, mode: str = "sync", replication: str = "",
                            proxies: tuple[str, ...] = (), controller: bool = True) -> list[str]:
    """The config (``controller`` False: the same cluster as plain master-slave); returns the
    name servers' addresses."""
    namesrvs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    tables = "".join(f'[[nameservers]]\nname = "ns{i}"\nlisten = "{a}"\n' for i, a in enumerate(namesrvs))
    tables += "".join(f'[[brokers]]\nname = "broker-a"\nid = {i}\nlisten = "127.0.0.1:{free_port()}"\n'
                      for i in range(3))
    tables += "".join(f'[[proxies]]\nname = "proxy{i + 1}"\nlisten = "{a}"\n' for i, a in enumerate(proxies))
    path.write_text(f"""
[cluster]
data_dir = "data"
[store]
segment_size_bytes = 8388608
index_slots = 10007
index_entries = 40000
[replication]
mode = "{mode}"
controller = {"true" if controller else "false"}
{replication}
[broker]
register_interval_ms = 2000
{tables}""")
    return namesrvs


@contextlib.contextmanager
def controlled_cluster(tmp_path: Path, env: dict[str, str], *, mode: str = "sync", replication: str = "",
                       proxies: int = 0, controller: bool = True) -> Iterator[Cluster]:
    path = tmp_path / "conf.toml"
    proxy_listens = tuple(f"127.0.0.1:{free_port(span=3)}" for _ in range(proxies))
    namesrvs = write_controller_config(path, mode, replication, proxy_listens, controller)
    cluster = Cluster(path, ";".join(namesrvs), dict(env, HOME=str(tmp_path)), proxy_listens, ())
    started = cluster.mqctl("start")
    assert started.returncode == 0, started.stderr
    try:
        yield cluster
    finally:
        if cluster.mqctl("stop", timeout=60).returncode != 0:
            cluster.mqctl("stop", "--force")


def infos(config: Config) -> dict[str, dict[str, str] | None]:
    """Each broker's runtime table (None: not answering)."""
    members = {b.node: b.listen for b in config.brokers}
    return trio.run(lambda: probe.runtime_infos(members, credentials=config.acl.credentials()))


def master_of(config: Config, newer_than: int = 0) -> tuple[str, int] | None:
    """The broker saying it is master of an epoch past ``newer_than``, and that epoch."""
    for node, info in infos(config).items():
        if info and info.get("haRole") == "master" and int(info.get("haMasterEpoch", 0)) > newer_than:
            return node, int(info["haMasterEpoch"])
    return None


def wait_for(what: Callable[[], T | None], timeout_s: float = 30.0, step_s: float = 0.05) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := what():
            return found
        time.sleep(step_s)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def stored_count(config: Config, topic: str) -> int:
    """Messages the group holds in ``topic`` (acknowledged or not): its queues' max offsets,
    asked of the master through the routes."""

    async def ask() -> int:
        async with open_client(config.namesrv_addresses, instance="stored-count") as client:
            route = await client.route(topic, refresh=True)
            assert route is not None
            return sum([await max_offset(client, mq) for mq in route.read_queues])

    return trio.run(ask)
