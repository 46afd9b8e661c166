"""Node management tells the truth when another cluster holds the ports: ``mqctl start`` of a
second cluster on the same ports fails naming the port and its holder, starts nothing, and the
first cluster keeps serving, its routes untouched, even when a node of the second one is
started by hand and dies on the taken port."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from tests.conftest import Cluster


def rows(out: subprocess.CompletedProcess) -> list[dict]:
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def routed_brokers(cluster: Cluster) -> list[str]:
    return [row["broker"] for row in rows(cluster.mqctl("cluster", "list", "--json"))]


def test_a_second_cluster_on_the_same_ports_fails_clearly_and_leaves_the_first_untouched(cluster, tmp_path):
    first = {r["node"]: r for r in rows(cluster.mqctl("status", "--json"))}
    assert rows(cluster.mqctl("send", "Held", "before", "--json"))[0]["status"] == "SEND_OK"

    other_dir = tmp_path / "second"
    other_dir.mkdir()
    shutil.copy(cluster.config, other_dir / "conf.toml")
    second = Cluster(other_dir / "conf.toml", cluster.namesrv, cluster.env)

    started = second.mqctl("start")
    assert started.returncode != 0
    ns_address = first["ns1"]["address"]
    assert f"ns1 cannot start: {ns_address} is held by pid {first['ns1']['pid']}" in started.stderr, started.stderr
    assert "mqctl.nodes.node" in started.stderr and len(started.stderr.strip().splitlines()) == 1, started.stderr
    assert "started" not in started.stdout
    assert not any((other_dir / "data" / "run").glob("*.pid")), "the second cluster left a node behind"
    assert [r["alive"] for r in rows(second.mqctl("status", "--json"))] == [False, False]

    # a node of the second cluster started by hand dies on the taken port with one clear line,
    # and does not take the first cluster's broker out of the name server's routes
    node = subprocess.run([sys.executable, "-m", "mqctl.nodes.node", "--config", str(second.config), "--node", "broker-a-0"],
                          capture_output=True, text=True, env=cluster.env, timeout=60)
    assert node.returncode == 2
    assert f"cannot listen: {first['broker-a-0']['address']} is held by pid {first['broker-a-0']['pid']}" \
        in node.stderr, node.stderr
    assert "Traceback" not in node.stderr
    assert routed_brokers(cluster) == ["broker-a"]

    # the first cluster serves on, the same processes
    assert {r["node"]: r["pid"] for r in rows(cluster.mqctl("status", "--json"))} == \
        {name: r["pid"] for name, r in first.items()}
    assert rows(cluster.mqctl("send", "Held", "after", "--json"))[0]["status"] == "SEND_OK"
    got = rows(cluster.mqctl("tail", "Held", "--from-beginning", "--count", "2", "--json"))
    assert sorted(r["body"] for r in got) == ["after", "before"]
