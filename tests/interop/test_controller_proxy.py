"""The stock C++ client through a proxy while a controller-mode group's master is killed: the
proxy holds each send until the group's new master takes it, so none fails; every acknowledged
message is consumed afterwards. Prints the time from each SIGKILL to the first acknowledged
send after it."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from core.config import load_config
from mqctl.nodes.processes import running_pid
from tests.conftest import child_env
from tests.controller_cluster import controlled_cluster, infos, master_of, stored_count, wait_for
from tests.interop.test_proxy_failover import consumed_indexes, steady_producer


@pytest.mark.parametrize("kills", [1, pytest.param(3, marks=pytest.mark.slow)])  # make test: one
def test_a_cpp_producer_through_the_proxy_sees_no_failed_send_when_the_master_is_killed(tmp_path: Path,
                                                                                      kills: int) -> None:
    with controlled_cluster(tmp_path, child_env(), proxies=1) as cluster:
        config = load_config(cluster.config)
        proxy = cluster.proxies[0]
        cluster.mqctl("topic", "create", "Elected")
        gaps: list[float] = []
        epoch = 0
        with steady_producer(cluster, proxy, "Elected", tmp_path) as producer:
            for _ in range(kills):
                master, epoch = wait_for(lambda: master_of(config, newer_than=epoch))
                # a master alone in its SyncStateSet has no successor (one would lack what it
                # acknowledged): the group waits until a slave is back in sync
                wait_for(lambda: len(json.loads((infos(config)[master] or {}).get("haSyncStateSet") or "[]")) >= 2)
                before = len(producer.rows())
                wait_for(lambda: len(producer.rows()) >= before + 20)
                killed_at = time.time()
                os.kill(running_pid(config, master), signal.SIGKILL)
                first = wait_for(lambda: producer.acked_after(killed_at))
                gaps.append(first["answered_at"] - killed_at)
                assert cluster.mqctl("start", master).returncode == 0
            rows = producer.stop()
        print(f"controller mode through the proxy: first acknowledged send after each master kill: "
              f"{', '.join(f'{g * 1000:.0f} ms' for g in gaps)}")
        acked = {r["i"] for r in rows if "status" in r}
        failed = [r for r in rows if "error" in r]
        print(f"{len(rows)} sends: {len(acked)} acknowledged, {len(failed)} failed")
        assert not failed, failed[:5]
        stored = stored_count(config, "Elected")  # a send resent by the proxy may be stored twice
        got = consumed_indexes(cluster, proxy, "Elected", stored)
        assert acked <= set(got), f"acknowledged but not consumed: {sorted(acked - set(got))[:20]}"
        assert max(gaps) < 1.0, gaps
