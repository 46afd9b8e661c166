"""Shared fixtures: small store geometry so tests exercise segment rolls and file limits, and a
cluster started with `mqctl start` on free loopback ports (stopped after the test)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.config import StoreConfig
from mqctl.nodes.port_holders import PortPicker

# one picker per test process: a port handed out before its node listens is never handed out
# again in this process; each xdist worker (a process of its own) picks from its own share of
# the range, so two workers' clusters never pick the same port before either listens
free_port = PortPicker(int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")),
                       int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))).take

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_store_config() -> StoreConfig:
    return StoreConfig(
        segment_size_bytes=64 * 1024,
        cq_entries_per_file=64,
        index_slots=97,
        index_entries=200,
        flush_interval_ms=50,
        checkpoint_interval_ms=100,
        retention_check_interval_ms=100,
        disk_check_interval_ms=100,
        prefault_window_bytes=32 * 1024,
    )


def child_env() -> dict[str, str]:
    """Environment for child processes running our code from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    return child_env()

INTEROP = Path(__file__).parent / "interop"


@dataclass
class Cluster:
    config: Path
    namesrv: str
    env: dict[str, str]
    proxies: tuple[str, ...] = ()  # the proxies' addresses, when the config has some
    grpc: tuple[str, ...] = ()  # the proxies' gRPC addresses, when they have a gRPC door

    def mqctl(self, *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mqctl", "--config", str(self.config), *args],
                              capture_output=True, text=True, env=self.env, input=input, timeout=timeout)

    def cpp(self, *args: str, timeout: float = 180, env: dict[str, str] | None = None) -> list[dict]:
        """The stock client's JSON lines (``env``: more variables, such as its credentials)."""
        done = subprocess.run([sys.executable, str(INTEROP / "cpp_client.py"), *args], capture_output=True, text=True,
                              env=dict(self.env, **(env or {})), timeout=timeout)
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def rmq5(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> list[dict]:
        """The official RocketMQ 5 client's JSON lines (tests/interop/rmq5_client.py)."""
        from tests.interop.rmq5_client import client_env
        done = subprocess.run([sys.executable, str(INTEROP / "rmq5_client.py"), *args], capture_output=True,
                              text=True, env=client_env(dict(self.env, **(env or {}))), timeout=timeout)
        assert done.returncode == 0, done.stderr[-3000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def write_cluster_config(path: Path, *, broker_ids: tuple[int, ...] = (0,), mode: str = "async",
                         store: str = "", broker: str = "", more_brokers: str = "",
                         acl: str = "", proxies: tuple[str, ...] = (), grpc: tuple[str, ...] = (),
                         proxy: str = "", segment_size_bytes: int = 8388608) -> tuple[str, list[str]]:
    """A conf.toml with one name server and broker group ``broker-a`` of ``broker_ids`` on free
    loopback ports (``store``, ``broker`` and ``acl``: more lines for those tables;
    ``more_brokers``: more ``[[brokers]]`` tables; ``proxies``: a proxy listening on each
    address, and a gRPC door on ``grpc``'s, ``proxy``: lines for [proxy]); returns the name
    server's and broker-a's addresses."""
    ns_port = free_port()
    brokers = [f"127.0.0.1:{free_port()}" for _ in broker_ids]
    nodes = "".join(f'[[brokers]]\nname = "broker-a"\nid = {bid}\nlisten = "{addr}"\n'
                    for bid, addr in zip(broker_ids, brokers, strict=True))
    proxy_tables = "".join(f'[[proxies]]\nname = "proxy{i + 1}"\nlisten = "{a}"\n'
                           + (f'grpc_listen = "{grpc[i]}"\n' if i < len(grpc) else "") for i, a in enumerate(proxies))
    path.write_text(f"""
[cluster]
data_dir = "data"
[store]
segment_size_bytes = {segment_size_bytes}
index_slots = 10007
index_entries = 40000
{store}
[replication]
mode = "{mode}"
[broker]
register_interval_ms = 2000
{broker}
[[nameservers]]
name = "ns1"
listen = "127.0.0.1:{ns_port}"
{nodes}{more_brokers}
{proxy_tables}
[proxy]
{proxy}
[acl]
{acl}
""")
    return f"127.0.0.1:{ns_port}", brokers


@contextlib.contextmanager
def running_cluster(tmp_path: Path, env: dict[str, str], *, proxies: int = 0, grpc: bool = False,
                    **config: object) -> Iterator[Cluster]:
    """A cluster started with ``mqctl start`` (see :func:`write_cluster_config`), stopped after;
    ``proxies``: how many proxies, each with a door for broker-a (and for one more group);
    ``grpc``: each proxy with a gRPC door too."""
    path = tmp_path / "conf.toml"
    proxy_listens = tuple(f"127.0.0.1:{free_port(span=3)}" for _ in range(proxies))
    grpc_listens = tuple(f"127.0.0.1:{free_port()}" for _ in range(proxies if grpc else 0))
    namesrv, _ = write_cluster_config(path, proxies=proxy_listens, grpc=grpc_listens, **config)  # type: ignore[arg-type]
    cluster = Cluster(path, namesrv, dict(env, HOME=str(tmp_path)),  # the C++ client logs under $HOME/logs
                      proxy_listens, grpc_listens)
    started = cluster.mqctl("start")
    assert started.returncode == 0, started.stderr
    try:
        yield cluster
    finally:
        stopped = cluster.mqctl("stop", timeout=60)
        if stopped.returncode != 0:
            cluster.mqctl("stop", "--force")


@pytest.fixture
def cluster(tmp_path, subprocess_env):
    """One name server and one broker."""
    with running_cluster(tmp_path, subprocess_env) as c:
        yield c


@pytest.fixture
def master_slave(tmp_path, subprocess_env):
    """One name server and broker group broker-a of a master (id 0) and a slave (id 1), async."""
    with running_cluster(tmp_path, subprocess_env, broker_ids=(0, 1)) as c:
        yield c


@pytest.fixture
async def broker(nursery, tmp_path):
    """An in-process name server and broker (real TCP); yields a remoting client and the broker's address."""
    from core.remoting.client import open_remoting_client
    from tests.core.cluster_harness import start_cluster

    cluster = await start_cluster(nursery, tmp_path)
    running = await cluster.start_broker()
    async with open_remoting_client() as client:
        yield client, running.address
