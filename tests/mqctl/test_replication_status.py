"""`mqctl status` per slave link and `mqctl restart` as a rolling restart, against a real master
and slave (the `master_slave` fixture)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from typing import Any

WAIT_S = 30.0


def rows(out) -> list[dict[str, Any]]:
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def status(cluster) -> dict[str, dict[str, Any]]:
    return {r["node"]: r for r in rows(cluster.mqctl("status", "--json"))}


def wait_status(cluster, condition: Callable[[dict[str, dict[str, Any]]], bool]) -> dict[str, dict[str, Any]]:
    """The first `status --json` that meets ``condition`` (each poll is a CLI run: no sleep needed)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        seen = status(cluster)
        if condition(seen):
            return seen
        assert time.monotonic() < deadline, f"status never met the condition; last: {seen}"


def in_sync(seen: dict[str, dict[str, Any]]) -> bool:
    slave = seen["broker-a-1"]
    return slave["connected"] is True and slave["lag_bytes"] == 0


def table_row(out, node: str) -> list[str]:
    assert out.returncode == 0, out.stderr
    return next(line.split() for line in out.stdout.splitlines() if line.startswith(node + " "))


def test_status_shows_the_slave_link_and_loses_it_with_the_master(master_slave):
    assert master_slave.mqctl("send", "Demo", "x", "--count", "50").returncode == 0
    seen = wait_status(master_slave, in_sync)
    master, slave = seen["broker-a-0"], seen["broker-a-1"]
    assert master["mode"] == "async" and master["slaves_connected"] == 1 and master["slaves_configured"] == 1
    assert slave["acked_offset"] == master["max_offset"] > 0
    assert isinstance(slave["lag_seconds"], float) and slave["state"] == "in sync"

    table = master_slave.mqctl("status")
    header = table.stdout.splitlines()[0].split()
    assert header[:6] == ["NODE", "ROLE", "ADDRESS", "PID", "ALIVE", "MAX_OFFSET"], "the old columns stay first"
    assert header[6:] == ["MODE", "CONNECTED", "ACKED_OFFSET", "LAG_BYTES", "LAG_SECONDS", "STATE"]
    assert table_row(table, "broker-a-1")[6:11] == ["async", "yes", str(master["max_offset"]), "0", "0.0"]
    assert table_row(table, "broker-a-0")[6:8] == ["async", "1/1"]

    stopped = master_slave.mqctl("stop", "broker-a-0")
    assert stopped.returncode == 0, stopped.stderr
    slave = status(master_slave)["broker-a-1"]
    assert slave["connected"] is False and slave["state"] == "master down"
    assert slave["acked_offset"] == slave["max_offset"] == master["max_offset"], "its own end offset"
    assert slave["lag_bytes"] is None and slave["lag_seconds"] is None
    assert table_row(master_slave.mqctl("status"), "broker-a-1")[6:11] == [
        "async", "no", str(master["max_offset"]), "-", "-"]


def test_restart_goes_slave_first_and_keeps_the_messages(master_slave):
    assert master_slave.mqctl("send", "Demo", "x", "--count", "50").returncode == 0
    before = status(master_slave)
    end = before["broker-a-0"]["max_offset"]

    restarted = rows(master_slave.mqctl("restart", "--json"))
    assert [r["node"] for r in restarted] == ["ns1", "broker-a-1", "broker-a-0"]
    assert {r["state"] for r in restarted} == {"restarted"}
    slave_row, master_row = restarted[1], restarted[2]
    assert slave_row["note"] == f"caught up with broker-a-0 at offset {end}" and slave_row["acked_offset"] == end
    assert master_row["slaves_connected"] == 1

    after = wait_status(master_slave, lambda s: s["broker-a-1"]["connected"] is True)
    assert all(after[n]["alive"] and after[n]["pid"] != before[n]["pid"] for n in before)
    assert after["broker-a-0"]["max_offset"] == end
    read = rows(master_slave.mqctl("tail", "Demo", "--from-beginning", "--count", "50", "--group", "g", "--json",
                                   timeout=60))
    assert len(read) == 50 and {r["body"] for r in read} == {"x"}


def test_restart_of_named_nodes_keeps_the_order_and_starts_a_stopped_slave(master_slave):
    assert master_slave.mqctl("stop", "broker-a-1").returncode == 0

    out = master_slave.mqctl("restart", "broker-a-0", "broker-a-1")
    assert out.returncode == 0, out.stderr
    lines = [line.split(None, 1) for line in out.stdout.splitlines()]
    assert {node for node, _ in lines} == {"broker-a-0", "broker-a-1"}, "only the named nodes"
    said = [f"{node} {what}" for node, what in lines]
    first_master = next(i for i, (node, _) in enumerate(lines) if node == "broker-a-0")
    caught_up = next(i for i, line in enumerate(said) if line.startswith("broker-a-1 caught up with broker-a-0"))
    assert said[0] == "broker-a-1 not running: starting" and said[1].startswith("broker-a-1 started (pid ")
    assert caught_up < first_master < said.index("broker-a-0 stopping")
    assert said[-1] == "broker-a-0 1/1 slave(s) connected"
    wait_status(master_slave, in_sync)


def test_a_diverged_slave_is_shown_and_stops_the_rolling_restart(master_slave):
    assert master_slave.mqctl("send", "Demo", "old", "--count", "20").returncode == 0
    wait_status(master_slave, in_sync)
    assert master_slave.mqctl("stop").returncode == 0
    # a master that lost its whole store: the slave's log now shares nothing with the master's
    shutil.rmtree(master_slave.config.parent / "data" / "broker-a-0")
    assert master_slave.mqctl("start", "ns1", "broker-a-0").returncode == 0
    assert master_slave.mqctl("send", "Demo", "new", "--count", "5").returncode == 0
    assert master_slave.mqctl("start", "broker-a-1").returncode == 0

    seen = wait_status(master_slave, lambda s: s["broker-a-1"]["state"].startswith("diverged: "))
    assert "shares no prefix" in seen["broker-a-1"]["state"] and seen["broker-a-1"]["connected"] is False
    assert seen["broker-a-0"]["slaves_connected"] == 0
    assert "diverged:" in table_row(master_slave.mqctl("status"), "broker-a-1")

    out = master_slave.mqctl("restart")
    assert out.returncode == 2 and "broker-a-1 has stopped replicating" in out.stderr
    assert "broker-a-0" not in out.stdout, "the master was left alone"
    assert status(master_slave)["broker-a-0"]["pid"] == seen["broker-a-0"]["pid"]
