"""A deterministic simulator for the raft core: seeded faults, a virtual clock, an in-memory
network and disks that lose what was not synced.

One seed fixes everything: the fault rates, the schedule of crashes and partitions, every
message delay, drop and duplicate, the nodes' election timeouts and the client's proposals, so
a failing seed fails the same way every time::

    python -m replication.dledger.simulation --seeds 0-999
    python -m replication.dledger.simulation --seeds 4242 --trace   # replay one, with a trace

A node's driver does what a broker's does: it carries out each ``Ready`` in order, so messages
wait for the disk sync (of a random duration) that makes their promises durable. A crash drops
the node's unsynced log changes and hard state, its queued messages, and restarts it later
from what the disk kept.

After every step the invariants of :class:`Invariants` are checked: at most one leader per
term, log matching, leader completeness, committed entries never lost or changed, every
acknowledged append committed. The run ends with the faults healed and a quiet period, after
which the group must have a leader whose log holds every acknowledged append.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from replication.dledger.messages import Code, Message, PushEntry, PushKind
from replication.dledger.raft_log import MemoryLog
from replication.dledger.raft_node import RaftNode, Role, early_messages
from replication.dledger.retention import deletable_through
from replication.dledger.sim_disk import DiskModelLog, RecoveryViolation
from replication.dledger.sim_faults import FaultPlan, SimConfig
from replication.dledger.sim_invariants import Invariants, InvariantViolation, SimNode, SimSync

__all__ = ["FaultPlan", "InvariantViolation", "Invariants", "SimConfig", "SimNode", "Simulation", "run_seed"]

STALL_STEPS_MAX = 20_000
DISK_SEGMENT_SIZE = 4096  # small data files: entries roll over, pad and get deleted often


class Simulation:
    """One seeded run."""

    def __init__(self, seed: int, config: SimConfig | None = None, plan: FaultPlan | None = None,
                 trace: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.config = config or SimConfig()
        self.rng = random.Random(seed)
        self._retention_rng = random.Random(seed * 104_729 + 17)
        self.plan = self.fault_plan = plan or FaultPlan.random(self.rng).with_retention(self._retention_rng)
        self.trace = trace
        self.now = 0.0
        self.ids = tuple(f"n{i}" for i in range(self.config.nodes))
        self._disk_dir = tempfile.mkdtemp(prefix="raft-sim-") if self.plan.disk_log else None
        self.nodes = {i: SimNode(i, self._log_of(i)) for i in self.ids}
        self.invariants = Invariants(len(self.ids))
        self._events: list[tuple[float, int, str, tuple]] = []
        self._seq = itertools.count()
        self._cut: set[tuple[str, str]] = set()  # (a, b): a's messages to b are lost
        self._faults_on = True
        self._next_body = 0
        self._believed_leader: str | None = None
        self.steps = 0
        self.stats = {"acked": 0, "refused": 0, "timeouts": 0, "crashes": 0, "partitions": 0, "elections": 0,
                      "retained": 0, "installs": 0, "crashes_installing": 0, "new_leaders_installing": 0,
                      "power_losses": 0}
        for node in self.nodes.values():
            self._boot(node)

    def _log_of(self, node_id: str) -> MemoryLog | DiskModelLog:
        if self._disk_dir is None:
            return MemoryLog()
        rng = random.Random(self.seed * 7_001 + self.ids.index(node_id))
        return DiskModelLog(Path(self._disk_dir) / node_id, DISK_SEGMENT_SIZE, rng)

    def close(self) -> None:
        """Remove the nodes' files (disk-log runs)."""
        if self._disk_dir is not None:
            for node in self.nodes.values():
                node.log.close()  # type: ignore[union-attr]
            shutil.rmtree(self._disk_dir, ignore_errors=True)
            self._disk_dir = None

    # ------------------------------------------------------------------ scheduling

    def _at(self, when: float, kind: str, *args: object) -> None:
        heapq.heappush(self._events, (when, next(self._seq), kind, args))

    def _log(self, text: str) -> None:
        if self.trace is not None:
            self.trace(f"{self.now:9.4f} {text}")

    def run(self) -> dict[str, int]:
        cfg = self.config
        fault_end = cfg.fault_s
        end = cfg.fault_s + cfg.quiet_s
        self._at(0.0, "propose")
        if self.plan.crash_every_s:
            self._at(self.rng.expovariate(1 / self.plan.crash_every_s), "crash")
        if self.plan.partition_every_s:
            self._at(self.rng.expovariate(1 / self.plan.partition_every_s), "partition")
        if self.plan.retain_every_s:
            self._at(self._retention_rng.expovariate(1 / self.plan.retain_every_s), "retain")
        self._at(fault_end, "heal")
        stalled = 0
        while True:
            when, node_id = self._next_timer()
            stalled = stalled + 1 if when <= self.now else 0
            if stalled > STALL_STEPS_MAX:
                self.invariants.fail(f"no progress: {stalled} steps without the clock moving (a busy loop)")
            if self._events and self._events[0][0] <= when:
                when, _, kind, args = heapq.heappop(self._events)
                if when > end:
                    break
                self.now = max(self.now, when)
                self._handle(kind, args)
            else:
                if when > end:
                    break
                self.now = max(self.now, when)
                node = self.nodes[node_id]
                assert node.raft is not None
                node.raft.tick(self.now)
                self._after_input(node)
            self.steps += 1
        self._check_final()
        return self.stats

    def _next_timer(self) -> tuple[float, str]:
        best, best_id = float("inf"), ""
        for node in self.nodes.values():
            if node.raft is not None:
                t = node.raft.next_wakeup(self.now)
                if t < best:
                    best, best_id = t, node.id
        return max(best, self.now), best_id

    def _handle(self, kind: str, args: tuple) -> None:
        if kind == "deliver":
            src, dst, msg = args
            node = self.nodes[dst]
            if node.raft is None or (src, dst) in self._cut:
                return
            node.raft.receive(msg, self.now)
            self._after_input(node)
        elif kind == "sync_done":
            node_id, incarnation = args
            node = self.nodes[node_id]
            if node.incarnation == incarnation:
                self._finish_sync(node)
        elif kind == "propose":
            self._propose()
            if self._faults_on:
                self._at(self.now + self.rng.expovariate(1 / self.config.propose_every_s), "propose")
        elif kind == "crash":
            if not self._faults_on:
                return
            self._crash()
            if self._faults_on:
                self._at(self.now + self.rng.expovariate(1 / self.plan.crash_every_s), "crash")
        elif kind == "restart":
            (node_id,) = args
            if self.nodes[node_id].raft is None:
                self._boot(self.nodes[node_id])
        elif kind == "partition":
            if not self._faults_on:
                return
            self._partition()
            if self._faults_on:
                self._at(self.now + self.rng.expovariate(1 / self.plan.partition_every_s), "partition")
        elif kind == "unpartition":
            if not self._cut:
                return
            self._cut.clear()
            self._log("partition healed")
        elif kind == "heal":
            self._heal()
        elif kind == "crash_node":
            if self._faults_on:
                self._crash_node(self.nodes[args[0]], self._retention_rng)
        elif kind == "retain":
            self._retain()
            self._at(self.now + self._retention_rng.expovariate(1 / self.plan.retain_every_s), "retain")

    # ------------------------------------------------------------------ nodes

    def _boot(self, node: SimNode) -> None:
        node.incarnation += 1
        rng = random.Random(self.seed * 7919 + self.ids.index(node.id) * 131 + node.incarnation)
        node.raft = RaftNode(node.id, self.ids, node.log, self.config.settings, rng, self.now,
                             node.durable_hard, node.checkpoint_commit)
        node.outbox, node.unsaved_hard, node.sync, node.proposals = [], None, None, {}
        node.checked_commit = -1
        node.role, node.term = Role.FOLLOWER, node.durable_hard.term
        node.log.changed_from = 0
        self._log(f"{node.id} starts: term {node.durable_hard.term}, log to {node.log.last_index}, "
                  f"commit {node.raft.commit_index}")
        self.invariants.check_node(node)

    def _crash(self) -> None:
        up = [n for n in self.nodes.values() if n.raft is not None]
        if not up:
            return
        self._crash_node(self.rng.choice(up), self.rng)

    def _crash_node(self, node: SimNode, rng: random.Random) -> None:
        if node.raft is None:
            return
        if node.log.last_index < node.log.install_end:
            self.stats["crashes_installing"] += 1
        node.raft = None
        node.incarnation += 1  # its sync in flight never finishes
        if self.plan.async_flush:  # a process crash: the page cache keeps every write
            try:
                node.log.process_crash(node.checkpoint_commit)
            except RecoveryViolation as exc:
                self.invariants.fail(f"{node.id}: {exc}")
        elif isinstance(node.log, DiskModelLog):
            self.stats["power_losses"] += 1
            try:
                node.log.power_loss(node.checkpoint_commit)
            except RecoveryViolation as exc:
                self.invariants.fail(f"{node.id}: {exc}")
        else:
            node.log.crash()
        self.stats["crashes"] += 1
        self._log(f"{node.id} crashes: disk keeps log to {node.log.last_index}, term {node.durable_hard.term}")
        self.invariants.check_durable(list(self.nodes.values()))
        self._at(self.now + rng.uniform(0.05, self.plan.down_max_s), "restart", node.id)

    def _partition(self) -> None:
        ids = list(self.ids)
        if len(ids) < 2:
            return
        self.rng.shuffle(ids)
        alone = ids[: self.rng.randint(1, len(ids) // 2)]
        one_way = self.rng.random() < 0.2
        self._cut = {(a, b) for a in alone for b in ids if b not in alone}
        if not one_way:
            self._cut |= {(b, a) for a, b in self._cut}
        self.stats["partitions"] += 1
        self._log(f"partition: {alone} cut off{' (one way)' if one_way else ''}")
        self._at(self.now + self.rng.uniform(0.2, self.plan.partition_max_s), "unpartition")

    def _heal(self) -> None:
        self._faults_on = False
        self._cut.clear()
        self.plan = FaultPlan(delay_max_s=0.002, disk_sync_max_s=0.002, retain_every_s=self.plan.retain_every_s,
                              retain_entries=self.plan.retain_entries, async_flush=self.plan.async_flush)
        for node in self.nodes.values():
            if node.raft is None:
                self._boot(node)
        self._log("faults end: everything healed")

    def _retain(self) -> None:
        """Retention on one running node: delete its committed, synced entries but the last
        ``retain_entries`` (a broker deletes whole data files so, once they are dispatched)."""
        up = [n for n in self.nodes.values() if n.raft is not None]
        if not up:
            return
        node = self._retention_rng.choice(up)
        assert node.raft is not None
        upto = self.retained_through(node)
        if upto < node.log.first_index:
            return
        self.invariants.check_retained(node, upto)
        node.log.compact(upto)
        self.stats["retained"] += 1
        self._log(f"{node.id} deletes its entries through {upto}")

    def retained_through(self, node: SimNode) -> int:
        """Where retention on ``node`` may delete through: committed, on its disk, minus the
        entries it keeps."""
        assert node.raft is not None
        commit = node.raft.commit_index  # the simulated state machine applies at commit
        return deletable_through(commit, node.log.durable.last_index, commit) - self.plan.retain_entries

    # ------------------------------------------------------------------ the driver

    def _after_input(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        ready = raft.take_ready(self.now)
        if self.trace is not None and (ready.role, ready.term) != (node.role, node.term):
            self._log(f"{node.id} is {ready.role.value} of term {ready.term} (log to {node.log.last_index}, "
                      f"commit {ready.commit_index})")
        self.invariants.check_node(node)
        if ready.role is Role.LEADER:
            if self._believed_leader != node.id and any(
                    n.raft is not None and n.log.last_index < n.log.install_end for n in self.nodes.values()):
                self.stats["new_leaders_installing"] += 1
            self._believed_leader = node.id
        for done in (d for run in ready.completions for d in run.each()):
            body = node.proposals.pop(done.proposal, None)
            if body is None:
                continue
            if done.code is Code.SUCCESS:
                self.invariants.check_ack(node, done.index, body)
                self.stats["acked"] += 1
            else:
                self.stats["timeouts"] += 1
        if self.plan.async_flush:
            node.log.sync()  # in the page cache: what a process crash keeps
        early, late = early_messages(ready, node.log.dirty)
        for dst, msg in early:  # as the broker's driver does: a leader's pushes before its own sync
            self._send(node.id, dst, msg)
        node.outbox.extend(late)
        if ready.hard_state is not None:
            node.unsaved_hard = ready.hard_state
        self._start_sync(node)

    def _start_sync(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        if self.plan.async_flush and node.sync is None and node.unsaved_hard is None:
            # the driver without sync_appends: nothing waits for the log, only for term and vote
            outbox, node.outbox = node.outbox, []
            for dst, msg in outbox:
                self._send(node.id, dst, msg)
            if raft.synced_index < node.log.last_index or outbox:
                node.checkpoint_commit = max(node.checkpoint_commit, raft.commit_index)
                raft.log_synced(node.log.last_index, self.now)
                self._after_input(node)
            return
        if node.sync is not None or not (node.outbox or node.unsaved_hard or node.log.dirty):
            return
        hard = node.unsaved_hard or node.durable_hard
        node.sync = SimSync(self.now + self.rng.uniform(0, self.plan.disk_sync_max_s), node.log.snapshot(), hard,
                          raft.commit_index, node.outbox)
        node.outbox, node.unsaved_hard = [], None
        self._at(node.sync.done_at, "sync_done", node.id, node.incarnation)

    def _finish_sync(self, node: SimNode) -> None:
        sync, node.sync = node.sync, None
        assert sync is not None and node.raft is not None
        node.log.make_durable(sync.snapshot)
        node.durable_hard = sync.hard
        node.checkpoint_commit = max(node.checkpoint_commit, min(sync.commit_index, sync.snapshot.last_index))
        for dst, msg in sync.messages:
            self._send(node.id, dst, msg)
        node.raft.log_synced(sync.snapshot.last_index, self.now)
        self._after_input(node)

    def _send(self, src: str, dst: str, msg: Message) -> None:
        self.invariants.check_answer(self.nodes[src], msg)
        if isinstance(msg, PushEntry) and msg.kind is PushKind.INSTALL:
            self.stats["installs"] += 1
            rng = self._retention_rng
            if self._faults_on and rng.random() < self.plan.install_crash_p:  # the installer or its leader
                self._at(self.now + rng.uniform(0, 0.01), "crash_node", rng.choice((src, dst)))
        plan = self.plan
        rng = self.rng
        if (src, dst) in self._cut or rng.random() < plan.drop_p:
            return
        copies = 2 if rng.random() < plan.duplicate_p else 1
        for _ in range(copies):
            delay = rng.uniform(plan.delay_min_s, plan.delay_max_s)
            if rng.random() < plan.long_delay_p:
                delay += rng.uniform(0, plan.long_delay_s)
            self._at(self.now + delay, "deliver", src, dst, msg)

    def _propose(self) -> None:
        target = self._believed_leader
        node = self.nodes.get(target) if target else None
        if node is None or node.raft is None or self.rng.random() < 0.1:
            node = self.nodes[self.rng.choice(self.ids)]
        if node.raft is None:
            return
        count = self.rng.choice((1, 1, 1, 3))
        bodies = [f"{self.seed}:{self._next_body + k}".encode() for k in range(count)]
        self._next_body += count
        result = node.raft.propose(bodies, self.now)
        if isinstance(result, Code):
            self.stats["refused"] += 1
            if node.raft.leader is not None:
                self._believed_leader = node.raft.leader
            return
        node.proposals.update(zip(result, bodies))
        self._after_input(node)

    # ------------------------------------------------------------------ the end

    def _check_final(self) -> None:
        inv = self.invariants
        nodes = list(self.nodes.values())
        inv.check_durable(nodes)
        leaders = [n for n in nodes if n.raft is not None and n.raft.role is Role.LEADER]
        if len(leaders) != 1:
            inv.fail(f"after {self.config.quiet_s} s without faults there are {len(leaders)} leaders")
        leader = leaders[0]
        assert leader.raft is not None
        top = max(n.raft.term for n in nodes if n.raft is not None)
        if leader.raft.term != top:
            inv.fail(f"the leader {leader.id} is in term {leader.raft.term}, behind term {top}")
        for index, body in inv.acked.items():
            if index < leader.log.first_index:
                continue  # deleted by retention, which deletes only committed entries
            e = leader.log.entry(index)
            if e is None or e.body != body or index > leader.raft.commit_index:
                inv.fail(f"acknowledged entry {index} is not committed in the final leader's log")
        for n in nodes:
            assert n.raft is not None
            lo = max(n.log.first_index, leader.log.first_index)
            if n.raft.commit_index != leader.raft.commit_index or any(
                    n.log.entry(i) != leader.log.entry(i) for i in range(lo, n.raft.commit_index + 1)):
                inv.fail(f"{n.id} did not converge: commit {n.raft.commit_index} vs the leader's "
                         f"{leader.raft.commit_index}")
        self.stats["elections"] = len(inv.leaders)
        self.stats["committed"] = len(inv.committed)


def run_seed(seed: int, config: SimConfig | None = None, *, trace: bool = False) -> dict[str, int]:
    """Run one seed; raises :class:`InvariantViolation` (naming the seed) when a check fails."""
    lines: list[str] = []
    sim = Simulation(seed, config, trace=lines.append if trace else None)
    try:
        return sim.run()
    except InvariantViolation as exc:
        tail = "\n".join(lines[-60:])
        raise InvariantViolation(f"seed {seed} at t={sim.now:.4f} (step {sim.steps}, {sim.fault_plan}): {exc}"
                                 + (f"\n{tail}" if tail else "")) from None
    finally:
        sim.close()


def _seed_range(text: str) -> range:
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-99", help="a seed or a range, e.g. 0-999")
    parser.add_argument("--trace", action="store_true", help="print the last events of a failing seed")
    args = parser.parse_args(argv)
    failed = 0
    for seed in _seed_range(args.seeds):
        try:
            run_seed(seed, trace=args.trace)
        except InvariantViolation as exc:
            failed += 1
            print(exc, file=sys.stderr)
    print(f"{len(_seed_range(args.seeds)) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
