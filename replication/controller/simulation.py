"""A seeded simulation of one broker group under a controller: puts, replication, acks,
SyncStateSet changes, kills, returns, late role notices and elections, all through the
controller's own rules (:mod:`replication.controller.group_state`) and the returning replica's
truncation (:mod:`replication.controller.epochs`). Logs are lists of record ids (a record's
offset is its index).

Invariants checked after every step:

- one master per master epoch;
- sync mode: a newly elected master holds every acknowledged record;
- what consumers read (below the confirm offset: what every SyncStateSet member holds) is never
  replaced: a master's log never holds another record where one was read, so a fenced master's
  writes never become readable.

    python -m replication.controller.simulation --seeds 0-999 [--steps 400] [--mode async]
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field

from formats.epoch_file import EpochEntry
from replication.controller.epochs import consistent_point
from replication.controller.group_state import (
    Candidate,
    GroupState,
    MasterElected,
    Refused,
    alter_sync_state_set,
    apply,
    elect,
    register,
)

GROUP = "g"


@dataclass
class SimBroker:
    broker_id: int
    alive: bool = True
    log: list[int] = field(default_factory=list)
    epochs: list[EpochEntry] = field(default_factory=list)
    master_epoch: int = 0  # the newest master epoch it was told of
    is_master: bool = False
    known_set: frozenset[int] = frozenset()  # as master: its SyncStateSet and that set's epoch
    known_set_epoch: int = 0

    def last_epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else 0


class Violation(AssertionError):
    pass


class Simulation:
    def __init__(self, seed: int, brokers: int = 3, sync: bool = True, unclean: bool = False) -> None:
        self.rng = random.Random(seed)
        self.sync = sync
        self.unclean = unclean  # elect from every replica, not the SyncStateSet only (a fault to find)
        self.stale_puts = 0  # puts taken by a master a newer one had replaced: fenced writes
        self.cut_records = 0  # records returning replicas cut to agree with their new master
        self.brokers = {i: SimBroker(i) for i in range(brokers)}
        self.groups: dict[str, GroupState] = {}
        self.masters_by_epoch: dict[int, int] = {}
        self.acked: set[int] = set()
        self.pending: dict[int, tuple[int, int]] = {}  # record -> (master, offset) awaiting acks
        self.read: dict[int, int] = {}  # offset -> record consumers saw there
        self.next_record = 0
        for b in self.brokers.values():
            event = register(self.state, b.broker_id, f"b{b.broker_id}")
            assert event is not None
            apply(self.groups, event)

    @property
    def state(self) -> GroupState:
        return self.groups.get(GROUP) or GroupState(GROUP)

    # ------------------------------------------------------------------ the controller

    def candidates(self) -> dict[int, Candidate]:
        return {b.broker_id: Candidate(b.broker_id, b.alive, b.last_epoch(), len(b.log)) for b in self.brokers.values()}

    def election(self) -> None:
        state = self.state
        if state.master_id is not None and self.brokers[state.master_id].alive:
            return
        try:
            event = elect(state, self.candidates(), unclean=self.unclean)
        except Refused:
            return
        apply(self.groups, event)
        if event.master_id is not None and event.master_epoch not in self.masters_by_epoch:
            self.elected(event)

    def elected(self, event: MasterElected) -> None:
        assert event.master_id is not None
        if self.masters_by_epoch.setdefault(event.master_epoch, event.master_id) != event.master_id:
            raise Violation(f"epoch {event.master_epoch} has two masters")
        master = self.brokers[event.master_id]
        missing = sorted(r for r in self.acked if r not in master.log) if self.sync else []
        if missing:
            raise Violation(f"new master {master.broker_id} lacks acknowledged records {missing[:5]}")
        for offset, record in self.read.items():
            if offset < len(master.log) and master.log[offset] != record:
                raise Violation(f"new master {master.broker_id} holds {master.log[offset]} where {record} was read")
        self.notify(master)

    def notify(self, b: SimBroker) -> None:
        """A broker hears of the current master epoch (NOTIFY_BROKER_ROLE_CHANGED)."""
        state = self.state
        if not b.alive or b.master_epoch >= state.master_epoch or state.master_id is None:
            return
        b.master_epoch = state.master_epoch
        if state.master_id == b.broker_id:
            b.is_master = True
            b.known_set, b.known_set_epoch = state.sync_state_set, state.sync_state_set_epoch
            b.epochs.append(EpochEntry(state.master_epoch, len(b.log)))
            return
        b.is_master = False
        master = self.brokers[state.master_id]
        cut = consistent_point(b.epochs, len(b.log), master.epochs, len(master.log))
        cut = 0 if cut is None else cut
        self.cut_records += len(b.log) - cut
        del b.log[cut:]
        b.epochs = [e for e in b.epochs if e.start_offset < cut]
        for r in list(self.pending):
            if self.pending[r][0] == b.broker_id:
                del self.pending[r]  # a put to a master that lost its role fails

    # ------------------------------------------------------------------ brokers

    def master(self) -> SimBroker | None:
        state = self.state
        b = self.brokers.get(state.master_id) if state.master_id is not None else None
        return b if b is not None and b.alive and b.is_master and b.master_epoch == state.master_epoch else None

    def put(self, b: SimBroker) -> None:
        if b.master_epoch != self.state.master_epoch:
            self.stale_puts += 1
        record = self.next_record
        self.next_record += 1
        b.log.append(record)
        if self.sync:
            self.pending[record] = (b.broker_id, len(b.log) - 1)
        else:
            self.acked.add(record)

    def replicate(self, slave: SimBroker, master: SimBroker) -> None:
        """The slave copies a prefix of what the master has past its own end (with the epochs
        those records belong to)."""
        if len(slave.log) > len(master.log) or master.log[:len(slave.log)] != slave.log:
            return  # not yet truncated to agree: it waits for its role notice
        end = self.rng.randint(len(slave.log), len(master.log))
        slave.log.extend(master.log[len(slave.log):end])
        slave.epochs = [e for e in master.epochs if e.start_offset < end]

    def settle_acks(self) -> None:
        for record, (master_id, offset) in list(self.pending.items()):
            m = self.brokers[master_id]
            if all(len(self.brokers[s].log) > offset and self.brokers[s].log[offset] == record for s in m.known_set):
                self.acked.add(record)
                del self.pending[record]

    def alter(self, m: SimBroker, new_set: frozenset[int]) -> None:
        alive = frozenset(b.broker_id for b in self.brokers.values() if b.alive)
        try:
            event = alter_sync_state_set(self.state, m.broker_id, m.master_epoch, new_set, m.known_set_epoch, alive)
        except Refused:
            return
        apply(self.groups, event)
        m.known_set, m.known_set_epoch = event.sync_state_set, event.sync_state_set_epoch

    def confirm_offset(self, m: SimBroker) -> int:
        return min(len(self.brokers[s].log) for s in m.known_set)

    # ------------------------------------------------------------------ a step

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        brokers = list(self.brokers.values())
        believers = [b for b in brokers if b.alive and b.is_master]
        if roll < 0.35 and believers:  # a put to whoever thinks it is master (stale ones too)
            self.put(rng.choice(believers))
        elif roll < 0.60:
            m = self.master()
            if m is not None:
                slave = rng.choice(brokers)
                if slave is not m and slave.alive and slave.master_epoch == m.master_epoch:
                    self.replicate(slave, m)
        elif roll < 0.68:  # the master drops a member that is dead or behind, or adds one caught up
            m = self.master()
            if m is not None:
                b = rng.choice(brokers)
                if b.broker_id in m.known_set and b is not m and (not b.alive or len(b.log) < len(m.log)):
                    self.alter(m, m.known_set - {b.broker_id})
                elif b.broker_id not in m.known_set and b.alive and len(b.log) >= self.confirm_offset(m) \
                        and b.log == m.log[:len(b.log)] and b.master_epoch == m.master_epoch:
                    self.alter(m, m.known_set | {b.broker_id})
        elif roll < 0.74:  # consumers read below the confirm offset
            m = self.master()
            if m is not None:
                for offset in range(self.confirm_offset(m)):
                    self.read.setdefault(offset, m.log[offset])
        elif roll < 0.79:
            b = rng.choice(brokers)
            b.alive = False
        elif roll < 0.86:
            b = rng.choice(brokers)
            b.alive = True  # it still believes what it last heard
        elif roll < 0.94:
            self.notify(rng.choice(brokers))
        else:
            self.election()
        self.settle_acks()
        self.check()

    def check(self) -> None:
        for b in self.brokers.values():
            if b.is_master:
                for offset, record in self.read.items():
                    if offset < len(b.log) and b.log[offset] != record and b.master_epoch == self.state.master_epoch:
                        raise Violation(f"master {b.broker_id} holds {b.log[offset]} where {record} was read")


def run(seed: int, steps: int = 400, *, sync: bool = True, unclean: bool = False) -> Simulation:
    sim = Simulation(seed, sync=sync, unclean=unclean)
    sim.election()
    for _ in range(steps):
        sim.step()
    return sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-99")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    for seed in range(int(first), int(last or first) + 1):
        sim = run(seed, args.steps, sync=args.mode == "sync")
        print(f"seed {seed}: {len(sim.masters_by_epoch)} epochs, {len(sim.acked)} acknowledged, {len(sim.read)} read, "
              f"{sim.stale_puts} fenced puts, {sim.cut_records} records cut")


if __name__ == "__main__":
    main()
