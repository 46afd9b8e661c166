"""A real Prometheus scraping a raft cluster with a proxy: the counters it stores match the
traffic sent through both doors, lag falls to zero once consumed, and a leader kill shows as a
higher raft term and a proxy failover."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path

from core.config import load_config
from core.metrics.catalogue import PROCESS_METRICS, specs_for
from mqctl.nodes.leadership import group_infos, leader_of
from mqctl.nodes.processes import running_pid
from mqctl.top.scrape import targets
from tests.conftest import child_env, running_cluster
from tests.interop.test_proxy_failover import wait_for
from tests.prometheus import running_prometheus

TOPIC, GROUP = "PromTopic", "PromGroup"
REMOTING_SENDS, GRPC_SENDS = 30, 20


def exported_families(address: str) -> set[str]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_prometheus_sees_the_traffic_the_lag_the_elections_and_the_failovers(tmp_path: Path) -> None:
    with running_cluster(tmp_path, child_env(), mode="dledger", broker_ids=(0, 1, 2), proxies=1, grpc=True) as cluster:
        config = load_config(cluster.config)
        # every node exports exactly its kind's families of the catalogue, and the process's
        for target in targets(config):
            assert target.address, target
            expected = {s.name for s in specs_for(target.kind)} | set(PROCESS_METRICS)  # type: ignore[arg-type]
            assert exported_families(target.address) == expected, target.node
        listed = cluster.mqctl("metrics", "targets")
        assert listed.returncode == 0, listed.stderr
        assert {g["labels"]["mqctl_node"] for g in json.loads(listed.stdout)} == set(config.node_names())
        targets_file = tmp_path / "targets.json"
        targets_file.write_text(listed.stdout)
        with running_prometheus(tmp_path / "prometheus", targets_file) as prom:
            prom.wait_value('count(up{job="mqctl"} == 1)', lambda v: v == 5, 30, "all five nodes scraped")
            assert cluster.mqctl("topic", "create", TOPIC).returncode == 0
            # the 4.x door: mqctl's client through the proxy; then the consumer catches up
            sent = cluster.mqctl("send", TOPIC, "four", "--count", str(REMOTING_SENDS), "--proxy", "proxy1")
            assert sent.returncode == 0, sent.stderr
            tailed = cluster.mqctl("tail", TOPIC, "--group", GROUP, "--count", str(REMOTING_SENDS))
            assert tailed.returncode == 0, tailed.stderr
            lag = f'sum(rocketmq_consumer_lag_messages{{group="{GROUP}",topic="{TOPIC}"}})'
            prom.wait_value(lag, lambda v: v == 0, 20, "no lag once the first messages are consumed")
            # the 5.x door: the official client
            rows = cluster.rmq5("produce", cluster.grpc[0], TOPIC, json.dumps([{"body": f"five-{i}"} for i in range(GRPC_SENDS)]))
            assert len([r for r in rows if r.get("event") == "sent"]) == GRPC_SENDS, rows
            total = REMOTING_SENDS + GRPC_SENDS
            prom.wait_value(f'sum(rocketmq_messages_in_total{{topic="{TOPIC}"}})', lambda v: v == total, 20,
                            "the brokers' count of messages in")
            prom.wait_value('sum(rocketmq_answers_total{node="proxy1",protocol="remoting",request="SEND_MESSAGE_V2",'
                            'code="SUCCESS"})', lambda v: v == REMOTING_SENDS, 20, "the 4.x door's send answers")
            prom.wait_value('sum(rocketmq_answers_total{node="proxy1",protocol="grpc",request="SendMessage",code="OK"})',
                            lambda v: v == GRPC_SENDS, 20, "the gRPC door's send answers")
            prom.wait_value('sum(rocketmq_rpc_latency_seconds_count{node="proxy1",protocol="grpc",request="SendMessage"})',
                            lambda v: v == GRPC_SENDS, 20, "the gRPC door's send latencies")
            prom.wait_value(lag, lambda v: v == GRPC_SENDS, 20, "the lag of the messages not consumed yet")
            tailed = cluster.mqctl("tail", TOPIC, "--group", GROUP, "--count", str(GRPC_SENDS))
            assert tailed.returncode == 0, tailed.stderr
            prom.wait_value(lag, lambda v: v == 0, 20, "no lag once everything is consumed")
            prom.wait_value(f'sum(rocketmq_messages_out_total{{topic="{TOPIC}",group="{GROUP}"}})',
                            lambda v: v >= total, 20, "the brokers' count of messages out")
            # the leader's view of its two followers: they hold everything once sends stop
            prom.wait_value("count(rocketmq_replication_lag_bytes)", lambda v: v == 2, 20, "two followers' lag")
            prom.wait_value("max(rocketmq_replication_lag_bytes) + max(rocketmq_replication_lag_seconds)",
                            lambda v: v == 0, 20, "the followers caught up")
            # a follower paused (SIGSTOP) falls behind while the other two commit; resumed, it catches up
            leader = wait_for(lambda: leader_of(group_infos(config, "broker-a")), 30, "a raft leader")
            follower = next(b.node for b in config.brokers if b.node != leader)
            follower_pid = running_pid(config, follower)
            assert follower_pid is not None
            os.kill(follower_pid, signal.SIGSTOP)
            try:
                more = cluster.mqctl("send", TOPIC, "while paused", "--count", "5", "--proxy", "proxy1")
                assert more.returncode == 0, more.stderr
                behind = f'max(rocketmq_replication_lag_bytes{{slave="{follower}"}})'
                prom.wait_value(behind, lambda v: v > 0, 20, "the paused follower's lag in bytes")
                prom.wait_value(f'max(rocketmq_replication_lag_seconds{{slave="{follower}"}})', lambda v: v > 0, 20,
                                "the paused follower's lag in seconds")
            finally:
                os.kill(follower_pid, signal.SIGCONT)
            prom.wait_value(behind, lambda v: v == 0, 30, "the resumed follower caught up")
            # a leader kill: a new term, and the proxy sees the group's master change
            term = prom.wait_value("max(rocketmq_raft_term)", lambda v: v >= 1, 20, "a raft term")
            failovers = prom.value('sum(rocketmq_proxy_failovers_total{group="broker-a"})')
            assert failovers == 0
            pid = running_pid(config, str(leader))
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            prom.wait_value("max(rocketmq_raft_term)", lambda v: v > term, 30, "a higher raft term after the kill")
            prom.wait_value('sum(rocketmq_proxy_failovers_total{group="broker-a"})', lambda v: v >= 1, 30,
                            "the proxy's failover counter")
            prom.wait_value('sum(rocketmq_raft_role{role="leader"})', lambda v: v == 1, 30,
                            "one leader among the members alive")
