"""Master-slave replication with real processes started by `mqctl start`: byte-identical logs,
failover reads after SIGKILL (mqctl tail and the stock C++ consumer), sync mode without a
slave, and swapping the mode with `mqctl config set` + `mqctl restart`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import trio

from core.client.pull import broker_address, committed_offset, pull
from core.client.route import MessageQueue
from core.client.runtime import open_client
from mqctl.common import probe
from tests.conftest import Cluster, running_cluster

DEADLINE_S = 60.0


def runtime(address: str) -> dict[str, str]:
    return trio.run(probe.runtime_info, address) or {}


def broker_addresses(cluster: Cluster) -> dict[str, str]:
    nodes = [json.loads(line) for line in cluster.mqctl("status", "--json").stdout.splitlines()]
    return {row["node"]: row["address"] for row in nodes if row["node"].startswith("broker-a")}


def wait_slave_caught_up(master: str, slave: str) -> int:
    """Wait until the slave's log ends where the master's does; returns that offset."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        m, s = runtime(master), runtime(slave)
        if m and s and m["commitLogMaxOffset"] == s["commitLogMaxOffset"] and s.get("haConnected") == "true":
            return int(m["commitLogMaxOffset"])
        time.sleep(0.1)
    raise AssertionError(f"slave {slave} did not catch up with {master}")


def commitlog(cluster: Cluster, node: str) -> bytes:
    folder = cluster.config.parent / "data" / node / "commitlog"
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()))


def tail_json(cluster: Cluster, *args: str) -> list[dict]:
    done = cluster.mqctl("tail", *args, "--json", timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_slave_copies_10000_messages_and_serves_them_after_the_master_is_killed(master_slave: Cluster):
    nodes = broker_addresses(master_slave)
    sent = master_slave.cpp("produce-batch", master_slave.namesrv, "Orders", "10000", "100")
    assert len(sent) == 100 and all(row.get("status") == 0 for row in sent), sent[:3]
    end = wait_slave_caught_up(nodes["broker-a-0"], nodes["broker-a-1"])
    master_log, slave_log = commitlog(master_slave, "broker-a-0"), commitlog(master_slave, "broker-a-1")
    assert len(master_log) == len(slave_log) and end > 10000 * 100
    assert master_log == slave_log, "the slave's CommitLog differs from the master's"

    killed = master_slave.mqctl("stop", "broker-a-0", "--force")
    assert killed.returncode == 0 and "killed" in killed.stdout

    rows = tail_json(master_slave, "Orders", "--group", "after-failover", "--from-beginning", "--count", "10000")
    assert sorted(int(r["properties"]["idx"]) for r in rows) == list(range(10000))

    async def committed_on_the_slave() -> int:  # the consumer committed where it read: the slave
        async with open_client([master_slave.namesrv]) as client:
            route = await client.route("Orders")
            assert route is not None and 0 not in route.brokers["broker-a"]  # the master left the route
            return sum([await committed_offset(client, "after-failover", mq) or 0 for mq in route.read_queues])

    assert trio.run(committed_on_the_slave) == 10000
    got = master_slave.cpp("consume", master_slave.namesrv, "cpp-after-failover", "Orders", "*", "10000", "120")
    assert {int(r["idx"]) for r in got if "idx" in r} == set(range(10000))


def test_sync_mode_answers_slave_not_available_without_its_slave_and_recovers(tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env, broker_ids=(0, 1), mode="sync",
                         store="sync_flush_timeout_ms = 2000") as cluster:
        nodes = broker_addresses(cluster)
        wait_slave_caught_up(nodes["broker-a-0"], nodes["broker-a-1"])
        ok = json.loads(cluster.mqctl("send", "Demo", "with slave", "--json").stdout)
        assert ok["status"] == "SEND_OK"

        assert cluster.mqctl("stop", "broker-a-1").returncode == 0
        started = time.monotonic()
        alone = cluster.mqctl("send", "Demo", "without slave", "--count", "3", "--json")
        elapsed = time.monotonic() - started
        rows = [json.loads(line) for line in alone.stdout.splitlines()]
        assert [r["status"] for r in rows] == ["SLAVE_NOT_AVAILABLE"] * 3, alone.stdout + alone.stderr
        assert elapsed < 15  # answered at once (no slave), not after timeouts and retries
        # asked to retry such answers: tried again (no other broker: the same one), and the
        # last answer is the send's status, not an error
        eager = cluster.mqctl("send", "Demo", "eager", "--retry-not-store-ok", "--retries", "1", "--json")
        assert json.loads(eager.stdout)["status"] == "SLAVE_NOT_AVAILABLE", eager.stdout + eager.stderr
        # stored all the same: readable from the master (the retried one twice)
        stored = tail_json(cluster, "Demo", "--group", "check", "--from-beginning", "--count", "6")
        assert sorted(r["body"] for r in stored) == ["eager"] * 2 + ["with slave"] + ["without slave"] * 3

        assert cluster.mqctl("start", "broker-a-1").returncode == 0
        deadline = time.monotonic() + DEADLINE_S
        while True:
            again = json.loads(cluster.mqctl("send", "Demo", "slave back", "--json").stdout)
            if again["status"] == "SEND_OK" or time.monotonic() > deadline:
                break
        assert again["status"] == "SEND_OK"
        wait_slave_caught_up(nodes["broker-a-0"], nodes["broker-a-1"])


def test_swapping_async_to_sync_and_back_loses_nothing_and_consumers_resume(master_slave: Cluster):
    conf: Path = master_slave.config
    comments = [line for line in conf.read_text().splitlines() if line.startswith("#")]
    first = master_slave.mqctl("send", "Swap", "before", "--count", "60", "--json")
    assert first.returncode == 0
    consumed = tail_json(master_slave, "Swap", "--group", "swap", "--from-beginning", "--count", "60")
    assert len(consumed) == 60

    for mode in ("sync", "async"):
        changed = master_slave.mqctl("config", "set", "replication.mode", mode)
        assert changed.returncode == 0, changed.stderr
        restarted = master_slave.mqctl("restart")
        assert restarted.returncode == 0, restarted.stderr
        nodes = broker_addresses(master_slave)
        assert runtime(nodes["broker-a-0"])["haMode"] == mode
        sent = master_slave.mqctl("send", "Swap", f"after {mode}", "--count", "20", "--json")
        statuses = {json.loads(line)["status"] for line in sent.stdout.splitlines()}
        assert statuses == {"SEND_OK"}, sent.stdout + sent.stderr
        # the group resumes where it was: exactly the 20 new messages
        resumed = tail_json(master_slave, "Swap", "--group", "swap", "--count", "20")
        assert sorted(r["body"] for r in resumed) == [f"after {mode}"] * 20
    assert [line for line in conf.read_text().splitlines() if line.startswith("#")] == comments
    nodes = broker_addresses(master_slave)
    wait_slave_caught_up(nodes["broker-a-0"], nodes["broker-a-1"])
    everything = tail_json(master_slave, "Swap", "--group", "audit", "--from-beginning", "--count", "100")
    assert sorted(r["body"] for r in everything) == sorted(["before"] * 60 + ["after sync"] * 20 + ["after async"] * 20)


def test_slave_read_enable_sends_cold_reads_to_the_slave_and_the_slave_sends_them_back(tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env, broker_ids=(0, 1),
                         broker="slave_read_enable = true\ncold_read_lag_bytes = 2000") as cluster:
        assert cluster.mqctl("topic", "create", "Cold", "--queues", "1").returncode == 0
        assert cluster.mqctl("send", "Cold", "x" * 200, "--count", "40").returncode == 0
        nodes = broker_addresses(cluster)
        wait_slave_caught_up(nodes["broker-a-0"], nodes["broker-a-1"])

        async def read() -> list[tuple[str, int, int]]:
            """(node asked, messages, broker id suggested next) for four pulls of 10."""
            seen = []
            async with open_client([cluster.namesrv]) as runtime:
                mq = MessageQueue("Cold", "broker-a", 0)
                offset = 0
                for _ in range(4):
                    asked = await broker_address(runtime, mq, runtime.pull_from.get(mq, 0))
                    result = await pull(runtime, "cold-readers", mq, offset, max_nums=10)
                    offset = result.next_offset
                    seen.append((asked, len(result.messages), runtime.pull_from.get(mq, 0)))
            return seen

        first, second, third, last = trio.run(read)
        # far behind the end: the master answers and points at the slave
        assert first == (nodes["broker-a-0"], 10, 1)
        # the slave serves the next pull; still far behind, so it keeps the queue
        assert second == (nodes["broker-a-1"], 10, 1)
        assert third == (nodes["broker-a-1"], 10, 1)
        # caught up to the end: the slave sends the consumer back to the master
        assert last == (nodes["broker-a-1"], 10, 0)
