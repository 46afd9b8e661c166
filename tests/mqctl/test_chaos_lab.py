"""`mqctl chaos` under load across a lab of network namespaces: a sync master-slave pair, a
3-member raft group and a sync group of three under a controller, each behind a proxy, under
every fault kind, with mqctl's client, the stock
C++ 4.x client and the official 5.x client producing and consuming.

- make test: one short drill (20 s: packet loss, then a partition of the leader; 400 msgs/s
  offered: both cores are shared with the rest of the suite, which is near its 10 minutes). Without a lab it runs on loopback and says so.
- make test-long: each fault kind for MQCTL_DRILL_SECONDS (60 s) per mode at 2,400 msgs/s offered,
  one drill at a time (marked drill).
- make drills: the same, 5 minutes each (docs/reliability.md, "Drills across hosts").

Every figure of each drill is printed (`pytest -s` shows them); the assertions are the modes'
promises, and a floor under the acknowledged sends a second (well under what the drills in
docs/reliability.md reached), never the rate the test offered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mqctl.chaos.cluster import MEMBERS
from mqctl.chaos.report import print_report
from mqctl.chaos.schedule import LEADER, plan_faults
from mqctl.hosts.faults import nft_missing
from mqctl.hosts.lab import unavailable

WHY_NOT = unavailable() or nft_missing()
SECONDS = int(os.environ.get("MQCTL_DRILL_SECONDS", "60"))
FULL_RATE = 2400
SYNC_KINDS = ("kill", "pause", "partition", "one-way", "loss", "rate", "disk-full", "delay")
DLEDGER_KINDS = (*SYNC_KINDS, "split", "bridge")
CONTROLLER_KINDS = ("kill", "pause", "partition", "one-way", "split", "disk-full")
# controller mode: from a kill or a partition of the master to the first acknowledgement of a
# send begun after it (through the proxy: the clients that talk to the name server directly
# find the new master at their next route poll)
FAILOVER_S_MAX = 1.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Acknowledged sends a second over a drill (the report's throughput.acked_per_s: the seconds
# after the warm-up) at FULL_RATE offered: about half the worst in docs/reliability.md's
# "Drills across hosts" (dledger 1,944-2,396 at 60 s, 2,035-2,380 over 5 minutes; sync 1,192-2,248
# but under kills, 689 at 60 s and 350 over 5 minutes: either node away stops acknowledgements).
ACKED_PER_S_MIN = {"dledger": 1000, "sync": 600, "controller": 600}
SYNC_KILL_ACKED_PER_S_MIN = 150
# make test's drill offers 400 a second for 20 s: a quarter of that, with an election or two in
# the 17 s measured and both cores shared with the rest of the suite
SHORT_ACKED_PER_S_MIN = 100


def drill(tmp_path: Path, env: dict[str, str], *args: str, timeout: float) -> dict:
    report_dir = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "mqctl", "chaos", *args, "--json", "--dir", str(tmp_path / "drill"),
                           "--report", str(report_dir)], capture_output=True, text=True,
                          env=dict(env, HOME=str(tmp_path)), timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout[-2000:] + done.stderr[-3000:]
    found = json.loads(lines[-1])
    print_report(found)  # every figure, in the test's output
    assert done.returncode == 0, found["broken_promises"]
    assert (report_dir / "timeline.png").read_bytes()[:8] == PNG_MAGIC
    history = json.loads((report_dir / "history.json").read_text())
    assert len(history["timeline"]) >= int(found["duration_s"]) and history["faults"] == found["injected"]
    drill_dir = str(tmp_path / "drill")
    left = subprocess.run(["pgrep", "-f", drill_dir], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"the drill left processes running: {left.stdout}"
    assert drill_dir not in Path("/proc/mounts").read_text(), "the drill left its disks mounted"
    return found


def assert_promises_kept(found: dict, clients: set[str]) -> None:
    for finding in ("lost", "phantom", "moved", "reordered", "fifo_broken"):
        assert found[finding]["count"] == 0, (finding, found[finding])
    assert found["broken_promises"] == []
    # every client kind produced and consumed, and every message a producer was told was kept
    # arrived (lost == 0 above), whichever door it came through
    assert {c["client"] for c in found["clients"]} == clients
    for c in found["clients"]:
        got = found["per_client"][c["name"]]
        assert (got.get("acknowledged", 0) if c["role"] == "produce" else got.get("delivered", 0)) > 0, (c, got)
    assert found["delivered"] >= found["acknowledged"] > 0
    # every fault healed into acknowledged sends again
    assert all(r["first_ack_after_heal_s"] is not None for r in found["recoveries"]), found["recoveries"]


def test_a_short_drill_under_load_keeps_the_promises(tmp_path, subprocess_env):
    """make test's form: a lab when the machine allows one, else loopback (said in one line)."""
    # seeds whose 20 s schedules hold both kinds and a partition of the leader
    faults, seed = ("kill,partition", "39") if WHY_NOT else ("partition,loss", "49")
    found = drill(tmp_path, subprocess_env, "--mode", "dledger", "--faults", faults, "--duration", "20s",
                  "--seed", seed, "--rate", "400", timeout=300)
    assert found["net"].startswith("lab ") != bool(WHY_NOT), found["net"]
    assert {f["kind"] for f in found["injected"]} == set(faults.split(","))
    assert any(f["was_leader"] for f in found["injected"]), found["injected"]
    assert_promises_kept(found, {"ours", "cpp", "rmq5"})
    assert found["throughput"]["acked_per_s"] >= SHORT_ACKED_PER_S_MIN, found["throughput"]


def acked_per_s_min(mode: str, kind: str) -> int:
    return SYNC_KILL_ACKED_PER_S_MIN if (mode, kind) == ("sync", "kill") else ACKED_PER_S_MIN[mode]


_LONG = [pytest.param(mode, kind, marks=[pytest.mark.slow, pytest.mark.drill], id=f"{mode}-{kind}")
         for mode, kinds in (("sync", SYNC_KINDS), ("dledger", DLEDGER_KINDS), ("controller", CONTROLLER_KINDS))
         for kind in kinds]


def seed_hitting_the_leader(mode: str, kind: str, seconds: float) -> int:
    """The first seed whose schedule aims the fault at the leader of the moment and at a named
    member too (the schedule is a function of the seed, so this is the same every run)."""
    members = [f"broker-a-{i}" for i in range(MEMBERS[mode])]
    for seed in range(1, 1000):
        targets = {f.target for f in plan_faults(seed, [kind], [LEADER, *members], seconds)}
        if LEADER in targets and targets - {LEADER}:
            return seed
    raise AssertionError("no seed aims at the leader")


@pytest.mark.skipif(WHY_NOT is not None, reason=f"no lab on this machine: {WHY_NOT}")
@pytest.mark.parametrize("mode, kind", _LONG)
def test_each_fault_kind_across_hosts_under_load(mode, kind, tmp_path, subprocess_env):
    seed = seed_hitting_the_leader(mode, kind, SECONDS)
    found = drill(tmp_path, subprocess_env, "--mode", mode, "--faults", kind, "--duration", f"{SECONDS}s",
                  "--seed", str(seed), "--rate", str(FULL_RATE), timeout=SECONDS + 420)
    assert any(f["was_leader"] for f in found["injected"]), found["injected"]
    assert found["net"].startswith("lab ")
    assert found["injected"] and {f["kind"] for f in found["injected"]} == {kind}
    if os.environ.get("MQCTL_DRILL_RESULTS"):  # make drills keeps each report for docs/reliability.md
        Path(os.environ["MQCTL_DRILL_RESULTS"], f"{mode}-{kind}.json").write_text(json.dumps(found))
    assert_promises_kept(found, {"ours", "cpp", "rmq5"})
    if mode == "sync" and kind == "partition":
        # a sync master acknowledges nothing its slave has not got: no send started while the
        # slave was cut off or down was acknowledged before it was back
        slave = [r for r in found["recoveries"] if r["target"] == "broker-a-1" and not r["was_leader"]]
        assert all(r["acked_during"] == 0 for r in slave), slave
    assert found["throughput"]["acked_per_s"] >= acked_per_s_min(mode, kind), found["throughput"]
    if mode == "controller" and kind in ("kill", "partition"):
        failovers = [r["first_ack_after_fault_s"] for r in found["recoveries"] if r["was_leader"]]
        print(f"controller {kind} of the master: first acknowledgement after "
              f"{', '.join(f'{s:.2f} s' for s in failovers)}")
        assert failovers and max(failovers) <= FAILOVER_S_MAX, failovers
