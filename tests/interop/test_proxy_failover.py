"""The stock C++ client through a proxy while brokers die: how long it waits, and what it loses.

The producer sends one message after another (``produce-steady``); the tests SIGKILL nodes under
it and read its rows: when the first send after each kill was acknowledged, which sends failed
and how, and then whether every acknowledged message can be consumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.config import load_config
from mqctl.nodes.leadership import group_infos, leader_of
from mqctl.nodes.processes import running_pid
from tests.conftest import INTEROP, Cluster, child_env, running_cluster

FAILOVER_BUDGET_S = 3.5
KILLS = 3


def wait_for(check: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


class SteadyProducer:
    """``cpp_client.py produce-steady`` in the background, its rows read from a file."""

    def __init__(self, cluster: Cluster, namesrv: str, topic: str, folder: Path) -> None:
        self.out = folder / "steady.jsonl"
        self.stop_file = folder / "steady.stop"
        self.proc = subprocess.Popen(
            [sys.executable, str(INTEROP / "cpp_client.py"), "produce-steady", namesrv, topic, "120",
             str(self.stop_file)], stdout=self.out.open("w"), stderr=subprocess.PIPE, env=cluster.env)

    def rows(self) -> list[dict]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.endswith("}")]

    def acked_after(self, moment: float) -> dict | None:
        """The first send started after ``moment`` that was acknowledged."""
        return next((r for r in self.rows() if "status" in r and r["started_at"] >= moment), None)

    def stop(self) -> list[dict]:
        self.stop_file.touch()
        _, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err.decode()[-2000:]
        return self.rows()


@contextmanager
def steady_producer(cluster: Cluster, namesrv: str, topic: str, folder: Path) -> Iterator[SteadyProducer]:
    producer = SteadyProducer(cluster, namesrv, topic, folder)
    try:
        wait_for(lambda: producer.acked_after(0), 30, "the producer's first acknowledged send")
        yield producer
    finally:
        if producer.proc.poll() is None:
            producer.stop_file.touch()
            try:
                producer.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                producer.proc.kill()


def consumed_indexes(cluster: Cluster, namesrv: str, topic: str, count: int) -> Counter[int]:
    got = cluster.cpp("consume", namesrv, f"CID_{topic}", topic, "*", str(count), "90")
    return Counter(int(g["idx"]) for g in got)


def kill_the_leader(cluster: Cluster, sends: Callable[[], int],
                    acked_after: Callable[[float], dict | None]) -> tuple[float, dict]:
    """SIGKILL broker-a's raft leader after twenty more sends, wait for a send acknowledged
    after it, start the leader again and wait for all three members: (when it was killed,
    that send's row)."""
    config = load_config(cluster.config)
    leader = wait_for(lambda: leader_of(group_infos(config, "broker-a")), 30, "a raft leader")
    pid = running_pid(config, str(leader))
    assert pid is not None
    before = sends()
    wait_for(lambda: sends() >= before + 20, 30, "twenty more sends before the kill")
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    first = wait_for(lambda: acked_after(killed_at), 30, "an acknowledged send after the kill")
    assert isinstance(first, dict)
    restarted = cluster.mqctl("start", str(leader))
    assert restarted.returncode == 0, restarted.stderr
    wait_for(lambda: all(group_infos(config, "broker-a").values()), 30, "all three members answering")
    return killed_at, first


@pytest.fixture
def raft_cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path, child_env(), mode="dledger", broker_ids=(0, 1, 2), proxies=1) as c:
        yield c


@pytest.mark.parametrize("kills", [2, pytest.param(KILLS, marks=pytest.mark.slow)])  # make test: two
def test_a_cpp_producer_through_the_proxy_is_acknowledged_within_seconds_of_each_leader_kill(
        raft_cluster: Cluster, tmp_path: Path, kills: int) -> None:
    cluster = raft_cluster
    proxy = cluster.proxies[0]
    cluster.mqctl("topic", "create", "Failover")
    gaps: list[float] = []
    with steady_producer(cluster, proxy, "Failover", tmp_path) as producer:
        for _ in range(kills):
            killed_at, first = kill_the_leader(cluster, lambda: len(producer.rows()), producer.acked_after)
            gaps.append(first["answered_at"] - killed_at)
        rows = producer.stop()
    print(f"first acknowledged send after each leader kill: {', '.join(f'{g:.2f} s' for g in gaps)}")
    assert max(gaps) <= FAILOVER_BUDGET_S, gaps
    acked = {r["i"] for r in rows if "status" in r}
    failed = [r for r in rows if "error" in r]
    print(f"{len(rows)} sends: {len(acked)} acknowledged, {len(failed)} failed")
    # the proxy holds each send until the new leader takes it (docs/proxy.md: none failed)
    assert not failed, failed[:5]
    got = consumed_indexes(cluster, proxy, "Failover", len(acked))
    assert acked <= set(got), f"acknowledged but not consumed: {sorted(acked - set(got))[:20]}"
    duplicates = {i: n for i, n in got.items() if n > 1}
    # a send resent by the proxy (or by the client after a timeout) may be stored twice; the
    # copies carry the same UNIQ_KEY. Only sends that were in flight at a kill can be such.
    print(f"duplicates: {duplicates}")
    assert len(duplicates) <= kills * 2, duplicates


@pytest.fixture
def master_slave_cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path, child_env(), broker_ids=(0, 1), proxies=1) as c:
        yield c


def test_without_its_master_a_group_refuses_sends_at_once_and_serves_reads_from_its_slave(
        master_slave_cluster: Cluster, tmp_path: Path) -> None:
    cluster = master_slave_cluster
    config = load_config(cluster.config)
    proxy = cluster.proxies[0]
    cluster.mqctl("topic", "create", "Orphan")
    sent = cluster.cpp("produce", proxy, "Orphan", "200")
    assert [s["status"] for s in sent] == [0] * 200
    wait_for(lambda: '"lag_bytes": 0' in cluster.mqctl("status", "--json").stdout, 30, "the slave caught up")
    master_pid = running_pid(config, "broker-a-0")
    assert master_pid is not None
    with steady_producer(cluster, proxy, "Orphan", tmp_path) as producer:
        killed_at = time.time()
        os.kill(master_pid, signal.SIGKILL)
        wait_for(lambda: sum("error" in r for r in producer.rows() if r["started_at"] > killed_at) >= 5, 30,
                 "five refused sends")
        refused = [r for r in producer.rows() if "error" in r]
        print(f"a refused send took {max(r['answered_at'] - r['started_at'] for r in refused):.2f} s at most; "
              f"the client raised: {refused[-1]['error'][:200]}")
        assert max(r["answered_at"] - r["started_at"] for r in refused) < 1.0
        # the C++ client raises its own "No route info" once its retries are spent; the proxy's
        # reason is in the client's log
        client_logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*.log*"))
        assert "broker group broker-a has no master now" in client_logs

        # consumers go on reading, from the slave
        got = consumed_indexes(cluster, proxy, "Orphan", 200)
        assert set(range(200)) <= set(got)

        restarted_at = time.time()
        assert cluster.mqctl("start", "broker-a-0").returncode == 0
        back = wait_for(lambda: producer.acked_after(restarted_at), 60, "sends acknowledged again")
        assert isinstance(back, dict)
        print(f"sends acknowledged again {back['answered_at'] - restarted_at:.2f} s after the master's start")
        rows = producer.stop()
    # the same consumer group resumes on the master: every acknowledged steady send arrives
    steady = {r["msg_id"]: r["i"] for r in rows if "status" in r}
    got = cluster.cpp("consume", proxy, "CID_Orphan", "Orphan", "*", str(len(steady)), "90")
    assert set(steady) <= {g["msg_id"] for g in got}


@pytest.fixture
def two_proxies(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path, child_env(), proxies=2) as c:
        yield c


def test_two_proxies_one_killed_clients_of_the_other_see_nothing_and_nothing_acknowledged_is_lost(
        two_proxies: Cluster, tmp_path: Path) -> None:
    cluster = two_proxies
    config = load_config(cluster.config)
    first, second = cluster.proxies
    cluster.mqctl("topic", "create", "TwoDoors")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with steady_producer(cluster, f"{first};{second}", "TwoDoors", tmp_path / "a") as via_first, \
            steady_producer(cluster, second, "TwoDoors", tmp_path / "b") as via_second:
        wait_for(lambda: len(via_first.rows()) >= 50 and len(via_second.rows()) >= 50, 30, "fifty sends each")
        pid = running_pid(config, "proxy1")
        assert pid is not None
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        back = wait_for(lambda: via_first.acked_after(killed_at), 60, "the first producer acknowledged again")
        assert isinstance(back, dict)
        wait_for(lambda: via_second.acked_after(back["answered_at"]), 30, "the second producer still sending")
        first_rows, second_rows = via_first.stop(), via_second.stop()
    outage = back["answered_at"] - killed_at
    failed = [r for r in first_rows if "error" in r and r["started_at"] >= killed_at]
    second_failed = [r for r in second_rows if "error" in r]
    second_gap = max(b["answered_at"] - a["answered_at"] for a, b in zip(second_rows, second_rows[1:]))
    print(f"the producer given 'proxy1;proxy2' was acknowledged again {outage:.2f} s after proxy1's kill, "
          f"after {len(failed)} failed sends ({failed[0]['error'][:80] if failed else '-'}); "
          f"the producer given proxy2 alone: {len(second_failed)} failed, longest gap {second_gap:.2f} s")
    assert not second_failed
    # a send in flight at the kill waits out the client's 3 s send timeout; the client then asks
    # its next name server (proxy2) for the route and sends through it. When the kill falls
    # between two sends, the stock client instead fails the next ones at once ("No route info",
    # its refresh from the dead proxy1) until it turns to proxy2, within the same seconds: seen
    # once under make test's load (468 fast failures, acknowledged again after 2.7 s). Either
    # way nothing fails once it is acknowledged again.
    assert outage <= 6.0
    assert all(r["answered_at"] <= back["answered_at"] and "No route info" in r["error"] for r in failed), failed[:5]
    acked = {r["msg_id"] for r in first_rows + second_rows if "status" in r}
    got = cluster.cpp("consume", second, "CID_TwoDoors", "TwoDoors", "*", str(len(acked)), "90")
    assert acked <= {g["msg_id"] for g in got}
