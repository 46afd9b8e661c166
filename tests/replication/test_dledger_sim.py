"""The raft core under the deterministic simulator: seeded faults, every invariant checked
after every step (replication.dledger.simulation). A failing seed reproduces exactly:

    .venv/bin/python -m replication.dledger.simulation --seeds N --trace
"""

from __future__ import annotations

import concurrent.futures
import os

import pytest

from replication.dledger import simulation
from replication.dledger.simulation import FaultPlan, InvariantViolation, SimConfig, Simulation, run_seed

SEEDS = int(os.environ.get("MQ_SIM_SEEDS", "300"))  # make test's share; make test-long runs the soak below
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


def test_a_few_hundred_seeds_keep_every_invariant():
    check_seeds(range(SEEDS))


@pytest.mark.slow
def test_ten_thousand_seeds_keep_every_invariant():
    check_seeds(range(SEEDS, SEEDS + SOAK_SEEDS))


@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_other_group_sizes(nodes):
    for seed in range(60):
        run_seed(seed, SimConfig(nodes=nodes))


def test_a_seed_replays_exactly():
    first, second = [], []
    Simulation(1234, trace=first.append).run()
    Simulation(1234, trace=second.append).run()
    assert first == second and len(first) > 3


def test_the_simulator_catches_replies_sent_before_the_disk_sync(monkeypatch):
    """A driver that sends a Ready's messages before syncing (a follower acking entries a crash
    then loses) must be caught: committed entries end up on fewer disks than a majority."""
    def send_at_once(self, node):
        messages, node.outbox = node.outbox, []
        for dst, msg in messages:
            self._send(node.id, dst, msg)
        original(self, node)

    original = Simulation._start_sync
    monkeypatch.setattr(Simulation, "_start_sync", send_at_once)
    caught = []
    for seed in range(300):  # until the first seed that shows it
        try:
            run_seed(seed)
        except InvariantViolation as exc:
            caught.append(str(exc))
            if "durable on" in caught[-1]:
                break
    assert caught and "durable on" in caught[-1], caught[:3]


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
}


@pytest.mark.parametrize("seed", sorted(REGRESSIONS), ids=[REGRESSIONS[s][:50] for s in sorted(REGRESSIONS)])
def test_named_regression_seed(seed):
    stats = run_seed(seed)
    assert stats["acked"] > 0
