"""`mqctl chaos`, the short form CI runs: 40 s of faults per replication mode on a cluster of the
drill's own (real processes behind fault proxies), with seeds whose schedules hold a kill, a
pause and a partition. The long form (10 minutes per mode) is recorded in docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# (mode, seed): async and sync kill and pause the master, partition and pause the slave;
# dledger kills member 0, partitions member 2, kills and pauses it
DRILLS = [("async", 32), ("sync", 32), ("dledger", 2)]


def chaos(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mqctl", "chaos", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("mode, seed", DRILLS)
def test_a_short_drill_keeps_the_modes_promises_and_measures_recovery(mode, seed, tmp_path, subprocess_env):
    done = chaos("--mode", mode, "--seed", str(seed), "--duration", "40s", "--json", "--dir", str(tmp_path / "drill"),
                 env=dict(subprocess_env, HOME=str(tmp_path)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert {f["kind"] for f in report["injected"]} == {"kill", "pause", "partition"}
    assert report["acknowledged"] > 500 and report["delivered"] >= report["acknowledged"]
    assert report["lost"]["count"] == 0 and report["phantom"]["count"] == 0 and report["moved"]["count"] == 0
    assert report["broken_promises"] == []
    # every fault healed into acknowledged sends again, within seconds
    assert all(r["first_ack_after_heal_s"] is not None and r["first_ack_after_heal_s"] < 10
               for r in report["recoveries"]), report["recoveries"]
    if mode == "sync":
        # the slave's own connections were cut too: the master could not replicate, so sends
        # were not acknowledged while the slave was partitioned
        cut = next(f for f in report["injected"] if f["kind"] == "partition")
        assert any(w["started"] < cut["healed"] and (w["ended"] or 1e9) > cut["started"] for w in report["unavailable"])


def test_bad_arguments_are_one_clear_line(tmp_path, subprocess_env):
    for args, said in ((["--mode", "raft"], "--mode must be"), (["--faults", "kill,flood"], "faults must be"),
                       (["--duration", "soon"], "--duration must be"),
                       (["--faults", "disk-full"], "not available yet")):
        done = chaos(*args, env=subprocess_env, timeout=60)
        assert done.returncode != 0 and said in done.stderr, (args, done.stderr)
