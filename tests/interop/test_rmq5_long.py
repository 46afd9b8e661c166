"""RocketMQ 5 clients over long stretches (make test-long): a push consumer's handler that takes
90 s under the proxy's default auto-renew (60 s slices renewed 10 s ahead)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import child_env, running_cluster

pytestmark = pytest.mark.slow


def test_a_push_consumers_90_s_handler_gets_its_message_once_and_acks_it_once(tmp_path):
    with running_cluster(tmp_path, child_env(), proxies=1, grpc=True) as cluster:
        made = cluster.mqctl("topic", "create", "Rmq5Patient", "--queues", "1")
        assert made.returncode == 0, made.stderr
        sent = cluster.rmq5("produce", cluster.grpc[0], "Rmq5Patient", json.dumps([{"body": "patient"}]))
        assert [r["event"] for r in sent] == ["sent"]
        rows = cluster.rmq5("push", cluster.grpc[0], "Rmq5PatientG", "Rmq5Patient", "1", "150", "90", timeout=200)
        assert [(r["event"], r["id"], r["attempt"]) for r in rows if r["event"] in ("started", "consumed")] == [
            ("started", sent[0]["id"], 1), ("consumed", sent[0]["id"], 1)]
        after = cluster.rmq5("consume", cluster.grpc[0], "Rmq5PatientG", "Rmq5Patient",
                             json.dumps({"count": 1, "wait_s": 5}))
        assert [r for r in after if r["event"] == "received"] == []  # acked once, with the renewed handle
