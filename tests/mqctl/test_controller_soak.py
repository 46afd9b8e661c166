"""The long form of the pause check (make test-long): for five minutes a controlled sync group's
master is stalled 300 ms every 10 s (SIGSTOP, SIGCONT) while sends go on; nobody is elected and
every send is acknowledged. make test's form: five stalls in tests/mqctl/test_controller_mode.py."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from core.config import load_config
from mqctl.nodes.processes import running_pid
from tests.controller_cluster import controlled_cluster, master_of, wait_for

SOAK_S = 300.0
EVERY_S = 10.0
STALL_S = 0.3


@pytest.mark.slow
def test_five_minutes_of_300_ms_master_stalls_elect_nobody(tmp_path, subprocess_env):
    with controlled_cluster(tmp_path, subprocess_env) as cluster:
        config = load_config(cluster.config)
        assert wait_for(lambda: master_of(config)) == ("broker-a-0", 1)
        pid = running_pid(config, "broker-a-0")
        assert pid is not None
        stalls = 0
        ends = time.monotonic() + SOAK_S
        while time.monotonic() < ends:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(STALL_S)  # the fault itself
            os.kill(pid, signal.SIGCONT)
            stalls += 1
            sent = cluster.mqctl("send", "Soaked", f"after-stall-{stalls}", "--count", "20", "--json")
            assert {json.loads(x)["status"] for x in sent.stdout.splitlines()} == {"SEND_OK"}, sent.stderr
            assert master_of(config) == ("broker-a-0", 1), f"an election after stall {stalls}"
            time.sleep(max(0.0, EVERY_S - STALL_S - 1.0))  # the schedule: one stall every 10 s
        print(f"{stalls} stalls of {STALL_S * 1000:.0f} ms in {SOAK_S:.0f} s: nobody elected")
