"""A raft group of three brokers started by `mqctl start` (replication.mode = "dledger"): the
leader killed with SIGKILL three times while a producer sends, then every acknowledged message
consumed by `mqctl tail` and by the stock C++ consumer; status and leadership transfer."""

from __future__ import annotations

import collections
import json
import time

import pytest
import trio

from core.client.pull import max_offset
from core.client.runtime import open_client
from core.config import load_config
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from mqctl.common import probe
from tests.conftest import Cluster, running_cluster

TOPIC = "Drill"


@pytest.fixture
def raft_group(tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env, broker_ids=(0, 1, 2), mode="dledger") as c:
        yield c


def stored_count(cluster: Cluster, topic: str) -> int:
    """Messages the group holds in ``topic``: the sum of its queues' max offsets (asked of the
    current leader through the routes)."""

    async def ask() -> int:
        async with open_client([cluster.namesrv], instance="drill-count") as client:
            route = await client.route(topic, refresh=True)
            assert route is not None
            return sum([await max_offset(client, mq) for mq in route.read_queues])

    return trio.run(ask)


def status_rows(cluster: Cluster) -> dict[str, dict]:
    done = cluster.mqctl("status", "--json")
    assert done.returncode == 0, done.stderr
    return {row["node"]: row for row in map(json.loads, done.stdout.splitlines()) if row["node"].startswith("broker")}


@pytest.mark.parametrize("kills", [2, pytest.param(3, marks=pytest.mark.slow)])  # make test: two
def test_the_leader_killed_again_and_again_loses_no_acknowledged_message(raft_group: Cluster, tmp_path, kills):
    record = tmp_path / "acked.jsonl"
    drill = raft_group.mqctl("bench", "failover", "--kills", str(kills), "--warmup", "150", "--topic", TOPIC,
                             "--body-size", "256", "--record", str(record), "--json", timeout=300)
    assert drill.returncode == 0, drill.stderr[-3000:]
    result = json.loads(drill.stdout.splitlines()[-1])
    done = result["kills"]
    assert len(done) == kills and all(k["new_leader"] not in (None, k["node"]) for k in done), done
    assert all(k["elected_s"] is not None and k["sends_ok_s"] is not None for k in done)
    acked = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(acked) == result["acked"] >= 4 * 150

    total = stored_count(raft_group, TOPIC)
    assert total >= len(acked)
    tail = raft_group.mqctl("tail", TOPIC, "--group", "drill-tail", "--from-beginning", "--count", str(total),
                            "--json", timeout=180)
    assert tail.returncode == 0, tail.stderr[-2000:]
    rows = [json.loads(line) for line in tail.stdout.splitlines() if line.startswith("{")]
    at = {(r["queue_id"], r["queue_offset"]): int(r["properties"]["idx"]) for r in rows}
    lost = [a for a in acked if at.get((a["queue_id"], a["queue_offset"])) != a["idx"]]
    assert not lost, f"{len(lost)} acknowledged messages missing or moved, e.g. {lost[:3]}"
    for qid in {r["queue_id"] for r in rows}:  # each queue: dense offsets, acknowledged idx in send order
        offsets = sorted(o for q, o in at if q == qid)
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        idx_in_queue = [a["idx"] for a in sorted((a for a in acked if a["queue_id"] == qid),
                                                 key=lambda a: a["queue_offset"])]
        assert idx_in_queue == sorted(idx_in_queue)
    copies = collections.Counter(at.values())
    duplicates = sorted(i for i, n in copies.items() if n > 1)
    print(f"drill: {len(acked)} acknowledged, {total} stored, {len(duplicates)} stored twice "
          f"(resent after a deposed leader's answer), kills {done}")

    got = raft_group.cpp("consume", raft_group.namesrv, "drill-cpp", TOPIC, "*", str(total), "120")
    consumed = {int(r["idx"]) for r in got if "idx" in r}
    assert {a["idx"] for a in acked} <= consumed


def test_status_shows_one_leader_and_leadership_moves_on_request(raft_group: Cluster):
    rows = status_rows(raft_group)
    leaders = [n for n, r in rows.items() if r["state"] == "leading"]
    assert len(leaders) == 1 and {r["leader"] for r in rows.values()} == {leaders[0]}
    assert len({r["term"] for r in rows.values()}) == 1
    sent = json.loads(raft_group.mqctl("send", TOPIC, "before", "--json").stdout)
    assert sent["status"] == "SEND_OK"

    target = next(n for n in rows if n != leaders[0])
    moved = raft_group.mqctl("leader", "transfer", target, "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["leader"] == target
    rows = status_rows(raft_group)
    assert rows[target]["state"] == "leading" and rows[leaders[0]]["role"] == "follower"
    sent = json.loads(raft_group.mqctl("send", TOPIC, "after", "--json").stdout)
    assert sent["status"] == "SEND_OK"
    tail = raft_group.mqctl("tail", TOPIC, "--from-beginning", "--count", "2", "--json", timeout=60)
    assert [json.loads(line)["body"] for line in tail.stdout.splitlines()] == ["before", "after"]

    refused = raft_group.mqctl("leader", "transfer", "broker-a-9")
    assert refused.returncode != 0 and "no broker node" in (refused.stderr + refused.stdout)


def consumer_offsets(address: str, group: str) -> dict:
    resp = trio.run(probe.call, address, RemotingCommand(code=RequestCode.GET_ALL_CONSUMER_OFFSET))
    table = json.loads(resp.body or b"{}").get("offsetTable", {})
    return {k: v for k, v in table.items() if k.endswith(f"@{group}")}


def send_resume_and_audit(cluster: Cluster, body: str, count: int, audit_group: str, total: int) -> list[str]:
    """Send ``count`` messages, check group "swap" resumes with exactly those, and return the
    ``total`` bodies of the topic (sorted), as a new group reads them from the beginning."""
    sent = cluster.mqctl("send", "Swap", body, "--count", str(count), "--json")
    assert {json.loads(line)["status"] for line in sent.stdout.splitlines()} == {"SEND_OK"}
    resumed = cluster.mqctl("tail", "Swap", "--group", "swap", "--count", str(count), "--json")
    assert [json.loads(line)["body"] for line in resumed.stdout.splitlines()] == [body] * count
    everything = cluster.mqctl("tail", "Swap", "--group", audit_group, "--from-beginning", "--count", str(total),
                               "--json")
    return sorted(json.loads(line)["body"] for line in everything.stdout.splitlines())


def test_switching_a_master_slave_group_to_raft_and_back_keeps_messages_and_consumer_offsets(tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env, broker_ids=(0, 1, 2), mode="async",
                         broker="slave_sync_interval_ms = 200") as cluster:
        assert cluster.mqctl("send", "Swap", "before", "--count", "40").returncode == 0
        first = cluster.mqctl("tail", "Swap", "--group", "swap", "--from-beginning", "--count", "40", "--json")
        assert len(first.stdout.splitlines()) == 40
        addrs = {b.node: b.listen for b in load_config(cluster.config).brokers}
        want = consumer_offsets(addrs["broker-a-0"], "swap")
        assert sum(sum(queues.values()) for queues in want.values()) == 40
        deadline = time.monotonic() + 30  # the slaves copy the master's offsets every 200 ms
        while any(consumer_offsets(addrs[n], "swap") != want for n in ("broker-a-1", "broker-a-2")):
            assert time.monotonic() < deadline, "the slaves did not copy the consumer offsets"
            time.sleep(0.05)

        assert cluster.mqctl("config", "set", "replication.mode", "dledger").returncode == 0
        switched = cluster.mqctl("restart")
        assert switched.returncode == 0, switched.stderr
        assert "as a raft member" in switched.stdout
        rows = status_rows(cluster)
        assert sum(r["state"] == "leading" for r in rows.values()) == 1

        assert send_resume_and_audit(cluster, "after", 20, "audit", 60) == ["after"] * 20 + ["before"] * 40

        # and back: the stores are sealed, the CommitLogs continue past the raft era
        assert cluster.mqctl("config", "set", "replication.mode", "async").returncode == 0
        back = cluster.mqctl("restart")
        assert back.returncode == 0, back.stderr
        assert back.stdout.count("sealed: raft log kept through entry") == 3 and "as master" in back.stdout
        assert send_resume_and_audit(cluster, "back", 10, "audit2", 70) == ["after"] * 20 + ["back"] * 10 + ["before"] * 40
        deadline = time.monotonic() + 30
        while (rows := status_rows(cluster)) and not all("in sync" in rows[n]["state"] for n in ("broker-a-1", "broker-a-2")):
            assert time.monotonic() < deadline, f"the slaves did not catch up with the master: {rows}"
            time.sleep(0.1)
