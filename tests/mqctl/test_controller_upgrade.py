"""Turning controller mode on for a running master-slave group and off again: the first
election takes the longest log when the configured master (id 0) is not there, never a
lagging slave; turning it off while id 0 is not the last master is refused, naming the broker;
after a switchover to id 0 it is allowed, and no message is lost either way."""

from __future__ import annotations

import json

import pytest

from core.config import load_config
from tests.controller_cluster import controlled_cluster, infos, master_of, stored_count, wait_for

TOPIC = "Upgraded"


def sent_ok(cluster, body: str, count: int) -> None:
    sent = cluster.mqctl("send", TOPIC, body, "--count", str(count), "--json")
    assert sent.returncode == 0 and {json.loads(x)["status"] for x in sent.stdout.splitlines()} == {"SEND_OK"}


@pytest.mark.slow  # 40 s; make test keeps tests/replication/test_controller_service.py's first election
def test_upgrade_elects_the_longest_log_and_downgrade_waits_for_id_0(tmp_path, subprocess_env):
    with controlled_cluster(tmp_path, subprocess_env, mode="async", controller=False) as cluster:
        config = load_config(cluster.config)
        sent_ok(cluster, "both", 50)
        wait_for(lambda: all(r.get("lag_bytes") == 0 for r in map(json.loads, cluster.mqctl(
            "status", "--json").stdout.splitlines()) if r["node"] in ("broker-a-1", "broker-a-2")))
        assert cluster.mqctl("stop", "broker-a-2").returncode == 0
        sent_ok(cluster, "one", 50)  # broker-a-2 lags by these
        wait_for(lambda: all(r.get("lag_bytes") == 0 for r in map(json.loads, cluster.mqctl(
            "status", "--json").stdout.splitlines()) if r["node"] == "broker-a-1"))
        assert cluster.mqctl("stop").returncode == 0

        assert cluster.mqctl("config", "set", "replication.controller", "true").returncode == 0
        # id 0 does not come: after a heartbeat timeout the longest log (broker-a-1) is elected
        started = cluster.mqctl("start", "ns0", "ns1", "ns2", "broker-a-2", "broker-a-1")
        assert started.returncode == 0, started.stderr
        config = load_config(cluster.config)
        assert wait_for(lambda: master_of(config)) == ("broker-a-1", 1)
        assert cluster.mqctl("start", "broker-a-0").returncode == 0
        wait_for(lambda: (i := infos(config)["broker-a-1"]) and json.loads(i["haSyncStateSet"]) == [0, 1, 2])

        # a rolling restart hands the master over before restarting it
        restarted = cluster.mqctl("restart")
        assert restarted.returncode == 0 and "handed over to" in restarted.stdout, restarted.stdout + restarted.stderr
        assert cluster.mqctl("failover", "broker-a", "--to", "1").returncode == 0  # as before the restart
        wait_for(lambda: (i := infos(config)["broker-a-1"]) and json.loads(i["haSyncStateSet"]) == [0, 1, 2])

        refused = cluster.mqctl("config", "set", "replication.controller", "false")
        assert refused.returncode != 0 and "broker-a-1 (id 1" in refused.stderr, refused.stderr
        assert load_config(cluster.config).replication.controller  # the file is as it was

        moved = cluster.mqctl("failover", "broker-a", "--to", "0", "--json")
        assert moved.returncode == 0, moved.stderr
        row = json.loads(moved.stdout)
        assert (row["master"], row["previous"]) == ("broker-a-0", 1), row
        print(f"mqctl failover broker-a --to 0: {row['seconds'] * 1000:.0f} ms")
        refused_again = cluster.mqctl("failover", "broker-a", "--to", "0")
        assert refused_again.returncode != 0 and "master already" in refused_again.stderr
        sent_ok(cluster, "under-0", 10)
        allowed = cluster.mqctl("config", "set", "replication.controller", "false")
        assert allowed.returncode == 0, allowed.stderr
        assert cluster.mqctl("stop").returncode == 0
        assert cluster.mqctl("start").returncode == 0
        config = load_config(cluster.config)
        sent_ok(cluster, "plain-again", 10)
        total = stored_count(config, TOPIC)
        tail = cluster.mqctl("tail", TOPIC, "--from-beginning", "--count", str(total), "--json", timeout=120)
        bodies = [json.loads(line)["body"] for line in tail.stdout.splitlines()]
        assert total == 120
        assert sorted(set(bodies)) == ["both", "one", "plain-again", "under-0"]
        assert [bodies.count(b) for b in ("both", "one", "under-0", "plain-again")] == [50, 50, 10, 10]
