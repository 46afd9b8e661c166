"""The raft core under the deterministic simulator: seeded faults, every invariant checked
after every step (replication.dledger.simulation). A failing seed reproduces exactly:

    .venv/bin/python -m replication.dledger.simulation --seeds N --trace
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import random
from pathlib import Path

import pytest

from formats import dledger
from replication.dledger import simulation
from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.entry_handler import EntryHandler
from replication.dledger.raft_log import Entry
from replication.dledger.sim_disk import SECTOR, DiskModelLog, RecoveryViolation, SectorsReached
from replication.dledger.simulation import FaultPlan, InvariantViolation, SimConfig, Simulation, run_seed

SEEDS = int(os.environ.get("MQ_SIM_SEEDS", "300"))  # make test's share; make test-long runs the soak below
SWEEP_SEEDS = SEEDS // 2  # the plain sweep's share of them (the broken-engine tests below use all)
SOAK_SEEDS = int(os.environ.get("MQ_SIM_SOAK_SEEDS", "10000"))


def first_violation(seed: int) -> str | None:
    """The first line of what ``seed`` violates, or None (run in a worker process)."""
    try:
        run_seed(seed)
    except InvariantViolation as exc:
        return f"seed {seed}: " + str(exc).splitlines()[0]
    return None


def check_seeds(seeds: range) -> None:
    # seeds are independent: one worker per core (each seed still replays alone, exactly)
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        failures = [f for f in pool.map(first_violation, seeds, chunksize=50) if f is not None]
    assert not failures, f"{len(failures)} of {len(seeds)} seeds failed:\n" + "\n".join(failures[:10])


def test_a_hundred_and_fifty_seeds_keep_every_invariant():
    check_seeds(range(SWEEP_SEEDS))


@pytest.mark.slow
def test_ten_thousand_seeds_keep_every_invariant():
    check_seeds(range(SWEEP_SEEDS, SWEEP_SEEDS + SOAK_SEEDS))


@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_other_group_sizes(nodes):
    for seed in range(30):  # the soak in make test-long runs three members only
        run_seed(seed, SimConfig(nodes=nodes))


def test_a_seed_replays_exactly():
    first, second = [], []
    Simulation(1234, trace=first.append).run()
    Simulation(1234, trace=second.append).run()
    assert first == second and len(first) > 3


def first_caught(seeds: range, what: str) -> str | None:
    """Run ``seeds`` until one violates an invariant naming ``what``; its message, or None."""
    for seed in seeds:
        try:
            run_seed(seed)
        except InvariantViolation as exc:
            if what in str(exc):
                return str(exc)
    return None


def test_the_simulator_catches_replies_sent_before_the_disk_sync(monkeypatch):
    """A driver that sends a Ready's messages before syncing (a follower acknowledging entries
    a crash then loses) must be caught."""
    def send_at_once(self, node):
        messages, node.outbox = node.outbox, []
        for dst, msg in messages:
            self._send(node.id, dst, msg)
        original(self, node)

    original = Simulation._start_sync
    monkeypatch.setattr(Simulation, "_start_sync", send_at_once)
    assert first_caught(range(SEEDS), "but its disk holds them to")


def test_the_simulator_catches_retention_deleting_uncommitted_entries(monkeypatch):
    """Retention that deletes what is merely on disk, not what is committed and applied."""
    monkeypatch.setattr(simulation, "deletable_through", lambda commit, durable, applied: durable)
    assert first_caught(range(SEEDS), "past its commit index")


def test_the_simulator_catches_a_partial_install_answered_as_complete(monkeypatch):
    """A follower that answers an INSTALL as if it held everything up to the leader's commit
    index, while it holds only the first run."""
    def claim_all(self, req, log, commit_index):
        resp = original(self, req, log, commit_index)
        return dataclasses.replace(resp, end_index=max(resp.end_index, req.install_end))

    original = EntryHandler._install
    monkeypatch.setattr(EntryHandler, "_install", claim_all)
    assert first_caught(range(SEEDS), "answers INSTALL holding entries to")


def test_the_simulator_catches_a_recovery_that_trusts_torn_entries(monkeypatch):
    """DiskRaftLog recovery that takes every index entry as written, not checking it against
    the data it points at: a power loss in a disk-log seed leaves a torn entry in the log."""
    monkeypatch.setattr(DiskRaftLog, "_agrees", lambda self, i: True)
    assert first_caught(range(SEEDS), "after a power loss the log holds entry")


def test_retention_and_installs_run_in_the_ci_seeds():
    """The make-test seed range does delete entries, install lagging members, and crash
    installers and their leaders mid-way."""
    totals: dict[str, int] = {}
    for seed in range(0, SEEDS, 5):
        for key, value in run_seed(seed).items():
            totals[key] = totals.get(key, 0) + value
    assert totals["retained"] > 100 and totals["installs"] > 20, totals
    assert totals["crashes_installing"] + totals["new_leaders_installing"] > 0, totals
    assert totals["power_losses"] > 10, totals  # disk-log seeds, their crashes torn


def test_a_busy_loop_is_reported_not_hung(monkeypatch):
    monkeypatch.setattr(simulation, "STALL_STEPS_MAX", 50)
    sim = Simulation(0, SimConfig(fault_s=1, quiet_s=1), FaultPlan())
    node = sim.nodes["n0"]
    assert node.raft is not None
    monkeypatch.setattr(type(node.raft), "next_wakeup", lambda self, now: now)  # always due, never done
    with pytest.raises(InvariantViolation, match="no progress"):
        sim.run()


def torn_body_scenario(root: Path) -> tuple[DiskModelLog, SectorsReached]:
    """The simulator's disk log just before the power loss seed 246 once reached (the seeded
    draws have changed since): entries 0 and 1 synced, entry 2 written; and which sectors reach
    the disk: every index sector and the data sector holding entry 2's header, not the sectors
    of the rest of its body."""
    log = DiskModelLog(root, simulation.DISK_SEGMENT_SIZE, random.Random(0))
    log.append([Entry(0, 1, b"a" * 100), Entry(1, 1, b"b" * 100)])
    log.make_durable(log.snapshot())  # a sync, as the simulator's driver does one
    log.append([Entry(2, 1, b"c" * 1500)])
    pos = log.disk.position(2)
    assert pos is not None
    header_sector = pos // SECTOR
    assert (pos + dledger.HEADER_SIZE - 1) // SECTOR == header_sector  # the header: one sector
    assert (pos + dledger.HEADER_SIZE + 1500 - 1) // SECTOR > header_sector  # the body: past it

    def reached(path: Path, at: int) -> bool:
        return path.parent.name == "index" or at // SECTOR == header_sector

    return log, reached


def test_a_power_loss_that_tears_an_entrys_body_after_its_header_loses_that_entry(tmp_path):
    """Named regression (was seed 246): recovery checks each entry's body against its CRC, so
    an entry whose header and index entry reached the disk but whose body did not is not kept
    (the power loss checks the recovered log as every simulated one does)."""
    log, reached = torn_body_scenario(tmp_path)
    try:
        log.power_loss(trusted_through=1, reached=reached)
        assert (log.first_index, log.last_index) == (0, 1) and log.entry(2) is None
        assert [log.entry(i) for i in (0, 1)] == [Entry(0, 1, b"a" * 100), Entry(1, 1, b"b" * 100)]
        log.append([Entry(2, 2, b"d" * 10)])  # the log goes on from what it kept
        assert log.entry(2) == Entry(2, 2, b"d" * 10)
    finally:
        log.close()


def test_the_torn_body_scenario_fails_without_the_body_crc_check(tmp_path, monkeypatch):
    """With recovery's body check undone (an entry trusted once its header agrees with its
    index entry), the same power loss leaves the torn entry in the log, and the simulator's
    recovery check says so."""
    monkeypatch.setattr(dledger, "body_intact", lambda buf, pos, header: True)
    log, reached = torn_body_scenario(tmp_path)
    try:
        with pytest.raises(RecoveryViolation, match="after a power loss the log holds entry 2 "):
            log.power_loss(trusted_through=1, reached=reached)
    finally:
        log.close()


# Seeds that found bugs, kept as named scenarios (each passes since its fix). A seed names a
# bug only while the seeded draws still lead to it; one that drifted away is pinned as a
# scripted scenario instead (seed 246: the torn-body tests above).
REGRESSIONS = {
    0: "a leader whose push deadline (sent + timeout) was a rounding error past `now - sent`: busy loop",
    99: "a late answer to an older COMPARE moved the dispatcher back and asked for a cut of committed entries",
    157: "a node with an empty log kept raising the term and stopped the others from electing (pre-vote)",
    7: "TRUNCATE from a compare below the follower's commit index (it now keeps its committed prefix)",
    4277: "a TRUNCATE cut entries of the leader's own term that the follower had acknowledged (counted already)",
    7152: "the same, with retention on: an APPEND answer sent after the cut named entries no longer held",
}


@pytest.mark.parametrize("seed", sorted(REGRESSIONS), ids=[REGRESSIONS[s][:50] for s in sorted(REGRESSIONS)])
def test_named_regression_seed(seed):
    stats = run_seed(seed)
    assert stats["acked"] > 0
