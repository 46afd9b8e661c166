"""mqctl's cluster commands against real node processes."""

import json
import os
import signal


def rows(out):
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_status_topic_and_cluster_commands(cluster):
    status = rows(cluster.mqctl("status", "--json"))
    assert [(r["node"], r["role"], r["alive"]) for r in status] == [("ns1", "nameserver", True),
                                                                    ("broker-a-0", "master", True)]
    assert all(isinstance(r["pid"], int) for r in status) and status[1]["max_offset"] == 0
    created = rows(cluster.mqctl("topic", "create", "Orders", "--queues", "3", "--json"))
    assert created == [{"broker": "broker-a", "result": "ok"}]
    route = rows(cluster.mqctl("topic", "route", "Orders", "--json"))
    assert route[0]["read_queues"] == 3 and route[0]["write_queues"] == 3 and route[0]["perm"] == 6
    assert "Orders" in {r["topic"] for r in rows(cluster.mqctl("topic", "list", "--json"))}
    sent = rows(cluster.mqctl("send", "Orders", "x", "--count", "4", "--json"))
    assert [s["queue_id"] for s in sent] == [0, 1, 2, 0]
    brokers = rows(cluster.mqctl("cluster", "list", "--json"))
    assert brokers[0]["broker"] == "broker-a" and brokers[0]["role"] == "master" and brokers[0]["max_offset"] > 0
    table = cluster.mqctl("status")
    assert table.stdout.splitlines()[0].split() == ["NODE", "ROLE", "ADDRESS", "PID", "ALIVE", "MAX_OFFSET"]


def test_start_is_idempotent_and_stop_restart_work(cluster):
    again = rows(cluster.mqctl("start", "--json"))
    assert {r["state"] for r in again} == {"already running"}
    before = {r["node"]: r["pid"] for r in rows(cluster.mqctl("status", "--json"))}
    restarted = cluster.mqctl("restart")
    assert restarted.returncode == 0, restarted.stderr
    after = {r["node"]: r for r in rows(cluster.mqctl("status", "--json"))}
    assert all(after[n]["alive"] and after[n]["pid"] != before[n] for n in before)
    sent = rows(cluster.mqctl("send", "AfterRestart", "hello", "--json"))
    assert sent[0]["status"] == "SEND_OK", "brokers registered again after the restart"
    stopped = rows(cluster.mqctl("stop", "broker-a-0", "--json"))
    assert stopped == [{"node": "broker-a-0", "state": "stopped"}]
    status = {r["node"]: r for r in rows(cluster.mqctl("status", "--json"))}
    assert not status["broker-a-0"]["alive"] and status["ns1"]["alive"]


def test_force_stop_and_a_stale_pid_file(cluster):
    status = {r["node"]: r for r in rows(cluster.mqctl("status", "--json"))}
    os.kill(status["broker-a-0"]["pid"], signal.SIGKILL)
    after = {r["node"]: r for r in rows(cluster.mqctl("status", "--json"))}
    assert after["broker-a-0"]["alive"] is False and after["broker-a-0"]["pid"] is None
    started = rows(cluster.mqctl("start", "--json"))
    assert {r["node"]: r["state"] for r in started} == {"ns1": "already running", "broker-a-0": "started"}
    killed = rows(cluster.mqctl("stop", "--force", "--json"))
    assert {r["state"] for r in killed} == {"killed"}


def test_errors_are_clear(cluster):
    out = cluster.mqctl("stop", "nosuch")
    assert out.returncode == 2 and "no node named nosuch" in out.stderr
    out = cluster.mqctl("topic", "route", "Never")
    assert out.returncode == 2 and "No topic route info" in out.stderr
    out = cluster.mqctl("send", "bad topic!", "x")
    assert out.returncode == 2 and "illegal characters" in out.stderr
    out = cluster.mqctl("send", "T", "x", "--prop", "novalue")
    assert out.returncode == 2 and "--prop takes key=value" in out.stderr
