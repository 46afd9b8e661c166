"""Shared fixtures: small store geometry so tests exercise segment rolls and file limits, and a
cluster started with `mqctl start` on free loopback ports (stopped after the test)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.config import StoreConfig

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


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child processes running our code from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env

INTEROP = Path(__file__).parent / "interop"


def free_port() -> int:
    """A port free for this and the next one (a broker's HA port is its port + 1)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


@dataclass
class Cluster:
    config: Path
    namesrv: str
    env: dict[str, str]

    def mqctl(self, *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mqctl", "--config", str(self.config), *args],
                              capture_output=True, text=True, env=self.env, input=input, timeout=timeout)

    def cpp(self, *args: str, timeout: float = 180) -> list[dict]:
        done = subprocess.run([sys.executable, str(INTEROP / "cpp_client.py"), *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout)
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def cluster(tmp_path, subprocess_env):
    ns_port, broker_port = free_port(), free_port()
    config = tmp_path / "conf.toml"
    config.write_text(f"""
[cluster]
data_dir = "data"
[store]
segment_size_bytes = 8388608
index_slots = 10007
index_entries = 40000
[broker]
register_interval_ms = 2000
[[nameservers]]
name = "ns1"
listen = "127.0.0.1:{ns_port}"
[[brokers]]
name = "broker-a"
listen = "127.0.0.1:{broker_port}"
""")
    env = dict(subprocess_env, HOME=str(tmp_path))  # the C++ client logs under $HOME/logs
    cluster = Cluster(config, f"127.0.0.1:{ns_port}", env)
    started = cluster.mqctl("start")
    assert started.returncode == 0, started.stderr
    try:
        yield cluster
    finally:
        stopped = cluster.mqctl("stop", timeout=60)
        if stopped.returncode != 0:
            cluster.mqctl("stop", "--force")
