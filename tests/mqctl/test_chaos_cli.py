"""`mqctl chaos` on loopback (``--net loopback``): 40 s of faults per replication mode on a
cluster of the drill's own (real processes behind fault proxies), with seeds whose schedules
hold a kill, a pause and a partition, in make test-long (slow). make test's drill, and the drills
across a lab of namespaces, are tests/mqctl/test_chaos_lab.py. The long form (10 minutes per
mode) is recorded in docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ALL_FAULTS = "kill,pause,partition,disk-full"
THREE_FAULTS = "kill,pause,partition"


def can_mount_tmpfs() -> bool:
    """disk-full drills put each broker's store on a tmpfs of its own (root only)."""
    with tempfile.TemporaryDirectory() as where:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", where], capture_output=True,
                              check=False)
        if done.returncode == 0:
            subprocess.run(["umount", where], capture_output=True, check=False)
        return done.returncode == 0


# (mode, seed, faults), each schedule holding every kind once or more. async: pause, kill, fill
# and partition the master; sync: kill the master, partition, kill and pause the slave;
# dledger: kill member 2, fill member 0, partition member 1, pause the leader. Without
# permission to mount, async and dledger drill the other three kinds.
_SLOW = [pytest.mark.slow, pytest.mark.drill]
DRILLS = ([pytest.param("async", 20, ALL_FAULTS, marks=_SLOW), pytest.param("sync", 2, THREE_FAULTS, marks=_SLOW),
           pytest.param("dledger", 56, ALL_FAULTS, marks=_SLOW)]
          if can_mount_tmpfs() else
          [pytest.param("async", 1, THREE_FAULTS, marks=_SLOW), pytest.param("sync", 2, THREE_FAULTS, marks=_SLOW),
           pytest.param("dledger", 27, THREE_FAULTS, marks=_SLOW)])


def chaos(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mqctl", "chaos", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("mode, seed, faults", DRILLS)
def test_a_short_drill_keeps_the_modes_promises_and_measures_recovery(mode, seed, faults, tmp_path, subprocess_env):
    done = chaos("--mode", mode, "--seed", str(seed), "--faults", faults, "--duration", "40s", "--json",
                 "--net", "loopback", "--rate", "1000", "--dir", str(tmp_path / "drill"),
                 env=dict(subprocess_env, HOME=str(tmp_path)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    drill = str(tmp_path / "drill")
    left = subprocess.run(["pgrep", "-f", f"mqctl.nodes.node --config {drill}"], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"the drill left nodes running: {left.stdout}"
    assert drill not in Path("/proc/mounts").read_text(), "the drill left its disks mounted"
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["net"].startswith("on loopback")
    assert {f["kind"] for f in report["injected"]} == set(faults.split(","))
    assert report["acknowledged"] > 500 and report["delivered"] >= report["acknowledged"]
    assert report["lost"]["count"] == 0 and report["phantom"]["count"] == 0 and report["moved"]["count"] == 0
    assert report["broken_promises"] == []
    # every send not acknowledged says what the producer was told
    assert "not recorded" not in report["reasons"] and sum(report["reasons"].values()) == report["unknown"]
    # every fault healed into acknowledged sends again, within seconds
    assert all(r["first_ack_after_heal_s"] is not None and r["first_ack_after_heal_s"] < 10
               for r in report["recoveries"]), report["recoveries"]
    if mode == "sync":
        # the slave's own connections were cut too: the master could not replicate, so no send
        # started during the slave's partition was acknowledged before it healed
        cut = next(r for r in report["recoveries"] if r["fault"] == "partition" and r["target"] == "broker-a-1")
        assert cut["acked_during"] == 0, cut
    if mode == "dledger":
        # a majority stays: some fault of a single member left sends being acknowledged
        assert any(r["acked_during"] > 0 for r in report["recoveries"]), report["recoveries"]
    if "disk-full" in faults and mode == "async":
        # the master's full disk refused the sends until it was freed
        # (the store notices within its one-second disk check, so a few early sends may pass)
        full = next(f for f in report["injected"] if f["kind"] == "disk-full")
        refused = [w for w in report["unavailable"] if full["started"] <= w["started"] < full["healed"]]
        assert refused, report["unavailable"]
        # and said so: SERVICE_NOT_AVAILABLE (14), not a timeout
        assert any("code 14" in why for w in refused for why in w["reasons"]), refused


def test_bad_arguments_are_one_clear_line(tmp_path, subprocess_env):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "conf.toml").write_text("# an earlier drill\n")
    for args, said in ((["--mode", "raft"], "--mode must be"), (["--faults", "kill,flood"], "faults must be"),
                       (["--duration", "soon"], "--duration must be"),
                       (["--dir", str(tmp_path / "used")], "is not empty"),
                       (["--net", "cloud"], "--net must be"), (["--clients", "java"], "--clients must be"),
                       (["--mode", "sync", "--faults", "bridge"], "bridge set members against each other"),
                       (["--net", "loopback", "--faults", "loss"], "loss need a lab")):
        done = chaos(*args, env=subprocess_env, timeout=60)
        assert done.returncode != 0 and said in done.stderr, (args, done.stderr)


@pytest.mark.slow
@pytest.mark.drill
def test_a_node_that_does_not_come_back_is_a_broken_promise_with_the_figures(tmp_path, subprocess_env):
    """A killed node whose store refuses to open again (here a logfloor file the test writes
    once both members serve) ends the faults, not the drill: the report names the node and why,
    and the figures up to the end are there."""
    drill = tmp_path / "drill"
    stores = [drill / "data" / f"broker-a-{i}" for i in (0, 1)]
    proc = subprocess.Popen([sys.executable, "-m", "mqctl", "chaos", "--mode", "async", "--seed", "1", "--faults", "kill",
                             "--duration", "30s", "--json", "--net", "loopback", "--rate", "200", "--clients", "ours",
                             "--dir", str(drill)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(subprocess_env, HOME=str(tmp_path)))
    try:
        deadline = time.monotonic() + 120
        while not all((s / "abort").exists() for s in stores):  # both stores opened (recovery over)
            assert proc.poll() is None and time.monotonic() < deadline, "the drill's members never opened their stores"
            time.sleep(0.1)
        for store in stores:
            (store / "logfloor").write_text("not a floor\n")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode != 0, out[-2000:] + err[-2000:]
    report = json.loads(out.splitlines()[-1])
    last = report["injected"][-1]
    assert last["kind"] == "kill" and "logfloor" in (last["heal_failed"] or ""), report["injected"]
    assert all(f["heal_failed"] is None for f in report["injected"][:-1])  # nothing injected after it
    assert report["broken_promises"][0].startswith(f"kill of {last['target']} never healed: "), report["broken_promises"]
    assert report["acknowledged"] > 0 and report["timeline"], "the figures up to the end"
    left = subprocess.run(["pgrep", "-f", f"mqctl.nodes.node --config {drill}"], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"the drill left nodes running: {left.stdout}"
