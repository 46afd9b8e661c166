"""A cluster whose nodes are hosts of a lab (``[cluster] lab = N``): each node runs in a
network namespace of its own, mqctl's commands run on the lab's client host, and a sync
master-slave pair replicates over the bridge; `mqctl stop` deletes the lab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mqctl.hosts.lab import OWNER_DIR, PREFIX, unavailable

WHY_NOT = unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no lab on this machine: {WHY_NOT}")


def free_lab_number() -> int:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    taken = {p.stem for p in Path(OWNER_DIR).glob("*.pid")} if Path(OWNER_DIR).is_dir() else set()
    for number in range(150, 200):  # above the numbers test labs take first
        if str(number) not in taken and f"{PREFIX}{number}-" not in listed:
            return number
    raise AssertionError("no free lab number")


def lab_conf(number: int, proxy: bool = False, acl: str = "") -> str:
    """conf.toml of lab ``number``: a name server (.10), a sync pair of broker-a (.11, .12) and,
    with ``proxy``, a proxy with a gRPC door (.13); ``acl``: the body of an [acl] table."""
    net = f"10.231.{number}"
    text = f"""[cluster]
name = "LabCluster"
data_dir = "data"
lab = {number}
[store]
segment_size_bytes = 4194304
[replication]
mode = "sync"
[[nameservers]]
name = "ns1"
listen = "{net}.10:9876"
[[brokers]]
name = "broker-a"
id = 0
listen = "{net}.11:10911"
[[brokers]]
name = "broker-a"
id = 1
listen = "{net}.12:10911"
"""
    text += f"[acl]\n{acl}\n" if acl else ""
    return text + (f'[[proxies]]\nname = "proxy1"\nlisten = "{net}.13:8081"\ngrpc_listen = "{net}.13:8091"\n'
                   if proxy else "")


def _netns_inode(path: str) -> int:
    return os.stat(path).st_ino


def test_a_sync_pair_in_a_lab_replicates_over_the_bridge_and_stop_deletes_the_lab(tmp_path, subprocess_env):
    number = free_lab_number()
    conf = tmp_path / "conf.toml"
    conf.write_text(lab_conf(number))

    def mqctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mqctl", "-c", str(conf), *args], capture_output=True,
                              text=True, env=subprocess_env, timeout=120, check=False)

    host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    try:
        started = mqctl("start", "--json")
        assert started.returncode == 0, started.stderr
        # every node runs in the namespace of its own address
        rows = [json.loads(line) for line in started.stdout.splitlines()]
        for row, octet in zip(sorted(rows, key=lambda r: r["address"]), (10, 11, 12), strict=True):
            assert row["address"] == f"10.231.{number}.{octet}:{9876 if octet == 10 else 10911}"
            assert _netns_inode(f"/proc/{row['pid']}/ns/net") == _netns_inode(f"/run/netns/{PREFIX}{number}-h{octet}")
        sent = mqctl("send", "LabTopic", "across the bridge", "--count", "3")
        assert sent.returncode == 0 and sent.stdout.count("SEND_OK") == 3, sent.stdout + sent.stderr
        read = mqctl("tail", "LabTopic", "--group", "g", "--count", "3")
        assert read.returncode == 0 and read.stdout.count("across the bridge") == 3, read.stderr
        status = mqctl("status")
        assert status.returncode == 0 and "in sync" in status.stdout, status.stdout  # the slave, over the bridge
    finally:
        stopped = mqctl("stop")
    assert stopped.returncode == 0 and f"lab {number}" in stopped.stdout, stopped.stdout + stopped.stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"{PREFIX}{number}-" not in listed
    assert subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout == host_links


def test_a_lab_node_address_outside_the_labs_subnet_is_refused_before_anything_starts(tmp_path, subprocess_env):
    conf = tmp_path / "conf.toml"
    conf.write_text("""[cluster]
lab = 151

[[nameservers]]
name = "ns1"
listen = "127.0.0.1:9876"
""")
    done = subprocess.run([sys.executable, "-m", "mqctl", "-c", str(conf), "start"], capture_output=True, text=True,
                          env=subprocess_env, timeout=60, check=False)
    assert done.returncode != 0 and "ns1 listens on 127.0.0.1:9876" in done.stderr and "10.231.151" in done.stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"{PREFIX}151-" not in listed
