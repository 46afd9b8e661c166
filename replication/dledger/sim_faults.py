"""The simulator's fault plans and run settings (:mod:`replication.dledger.simulation`): how
hostile one seeded run is, drawn from the seed."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from random import Random

from replication.dledger.dispatcher import PushLimits
from replication.dledger.raft_node import RaftSettings


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """How hostile one run is; :meth:`random` draws one from a seed."""

    drop_p: float = 0.0
    duplicate_p: float = 0.0
    delay_min_s: float = 0.0005
    delay_max_s: float = 0.005
    long_delay_p: float = 0.0  # some messages take up to long_delay_s: they arrive reordered
    long_delay_s: float = 0.3
    crash_every_s: float = 0.0  # mean time between crashes (0: none)
    down_max_s: float = 2.0
    partition_every_s: float = 0.0  # mean time between partitions (0: none)
    partition_max_s: float = 3.0
    disk_sync_max_s: float = 0.004
    # retention: a node deletes its committed, synced prefix about this often (0: never),
    # keeping at least retain_entries of it; lagging members then need an INSTALL
    retain_every_s: float = 0.0
    retain_entries: int = 0
    install_crash_p: float = 0.0  # an INSTALL sent: the chance that its sender or receiver crashes soon after
    disk_log: bool = False  # the nodes run the real DiskRaftLog, and a crash tears unsynced writes
    # store.flush = "async": appends are answered from the page cache (no log sync before an
    # answer); a crash is a process crash, which the page cache survives
    async_flush: bool = False

    @classmethod
    def random(cls, rng: random.Random) -> FaultPlan:
        return cls(
            drop_p=rng.choice((0.0, 0.01, 0.05, 0.15)),
            duplicate_p=rng.choice((0.0, 0.02, 0.1)),
            delay_max_s=rng.choice((0.002, 0.01, 0.05)),
            long_delay_p=rng.choice((0.0, 0.01, 0.05)),
            crash_every_s=rng.choice((0.0, 1.5, 4.0)),
            partition_every_s=rng.choice((0.0, 2.0, 5.0)),
            disk_sync_max_s=rng.choice((0.001, 0.01, 0.05)),
        )

    def with_retention(self, rng: Random) -> FaultPlan:
        """This plan with retention drawn from ``rng`` (a stream of its own, so the plans and
        schedules of seeds without retention stay what they were)."""
        return dataclasses.replace(self, retain_every_s=rng.choice((0.0, 0.0, 0.2, 1.0)),
                                   retain_entries=rng.choice((0, 3, 40)), install_crash_p=rng.choice((0.0, 0.5)),
                                   disk_log=rng.random() < 0.25, async_flush=rng.random() < 0.25)


SIM_SETTINGS = RaftSettings(push=PushLimits(max_pending=64, batch_count=8, push_timeout_s=0.3))


@dataclass
class SimConfig:
    nodes: int = 3
    fault_s: float = 6.0  # faults and proposals
    quiet_s: float = 8.0  # then healed, no faults, no proposals
    propose_every_s: float = 0.02
    settings: RaftSettings = SIM_SETTINGS
