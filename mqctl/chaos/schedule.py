"""A chaos drill's fault schedule (sans-IO): which fault hits which node when, from a seed.

One fault at a time: it is injected, lasts a few seconds, is healed, and a quiet gap follows
in which the cluster should recover. The same seed, fault kinds, nodes and duration always give
the same schedule, so a failing drill can be replayed exactly.

Kinds:

- ``kill``: SIGKILL the node; the heal restarts it.
- ``pause``: SIGSTOP the node; the heal sends SIGCONT.
- ``partition``: cut every link to and from the node; the heal reopens them.
- ``one-way``: the node's packets to every other host are dropped; it still hears them.
- ``split``: the node on one side, the other members on the other; name server, proxy and
  clients reach both (three members or more).
- ``bridge``: the other members lose each other; the node still reaches both (three or more).
- ``loss``: a share of the node's packets dropped, both ways.
- ``rate``: what the node sends is limited to a slow link's rate.
- ``disk-full``: the node's disk reports full; the heal frees it.
- ``delay``: every chunk into the node held a while (a fault proxy).

Where the cluster runs decides which kinds it can make (mqctl/chaos/cluster.py, lab_cluster.py):
on loopback, partitions and delay go through fault proxies and the kernel-level kinds need a lab.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

FAULT_KINDS = ("kill", "pause", "partition", "one-way", "split", "bridge", "loss", "rate", "disk-full", "delay")
NEEDS_THREE = ("split", "bridge")  # a side of the group against another: three members or more
FAULT_SECONDS = (2.0, 6.0)  # how long one fault lasts, drawn uniformly
GAP_SECONDS = (3.0, 6.0)  # quiet time after each heal
WARMUP_SECONDS = 3.0  # traffic before the first fault
DRAIN_SECONDS = 5.0  # no fault starts closer than this to the end


LEADER = "leader"  # a target named when the fault begins: the group's master / raft leader then


@dataclass(frozen=True, slots=True)
class PlannedFault:
    at: float  # seconds after the drill started
    kind: str
    target: str  # a node name, or LEADER
    lasts: float

    @property
    def heal_at(self) -> float:
        return self.at + self.lasts


def parse_faults(text: str) -> tuple[str, ...]:
    """``kill,pause`` -> the kinds, checked; raises ValueError naming an unknown one."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise ValueError(f"faults must be a comma list of {', '.join(FAULT_KINDS)}, not {text!r}")
    return kinds


def plan_faults(seed: int, kinds: Sequence[str], targets: Sequence[str], duration_s: float) -> list[PlannedFault]:
    """The schedule for a drill of ``duration_s`` seconds (see the module docstring)."""
    if not kinds or not targets:
        return []
    rng = random.Random(seed)
    plan: list[PlannedFault] = []
    t = WARMUP_SECONDS
    while True:
        lasts = rng.uniform(*FAULT_SECONDS)
        if t + lasts > duration_s - DRAIN_SECONDS:
            return plan
        plan.append(PlannedFault(round(t, 3), rng.choice(list(kinds)), rng.choice(list(targets)), round(lasts, 3)))
        t += lasts + rng.uniform(*GAP_SECONDS)
