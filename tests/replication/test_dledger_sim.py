"""The raft core under the deterministic simulator: seeded faults, every invariant checked
after every step (replication.dledger.simulation). A failing seed reproduces exactly:

    .venv/bin/python -m replication.dledger.simulation --seeds N --trace
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os

import pytest

from replication.dledger import simulation
from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.entry_handler import EntryHandler
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


# Seeds that found bugs, kept as named scenarios (each passes since its fix):
REGRESSIONS = {
    0: "a leader whose push deadline (sent + timeout) was a rounding error past `now - sent`: busy loop",
    99: "a late answer to an older COMPARE moved the dispatcher back and asked for a cut of committed entries",
    157: "a node with an empty log kept raising the term and stopped the others from electing (pre-vote)",
    7: "TRUNCATE from a compare below the follower's commit index (it now keeps its committed prefix)",
    246: "a power loss tore an entry's body after its header reached the disk; recovery kept it (body CRC now)",
    4277: "a TRUNCATE cut entries of the leader's own term that the follower had acknowledged (counted already)",
    7152: "the same, with retention on: an APPEND answer sent after the cut named entries no longer held",
}


@pytest.mark.parametrize("seed", sorted(REGRESSIONS), ids=[REGRESSIONS[s][:50] for s in sorted(REGRESSIONS)])
def test_named_regression_seed(seed):
    stats = run_seed(seed)
    assert stats["acked"] > 0
