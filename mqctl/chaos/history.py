"""Checking a chaos drill's history (sans-IO): what producers were told against what consumers got.

Producers record every send attempt: its key (unique per drill), when it started and ended, and
its outcome: acknowledged (with the queue and queue offset the broker assigned), failed (the
broker said no: nothing was stored), or unknown (a timeout or a lost connection: it may or may
not be stored). Consumers record every delivery: key, queue, queue offset and when.

The verdict, as RocketMQ users would judge it:

- **lost**: acknowledged, never delivered. The only failure the replication modes differ on:
  sync, dledger and controller promise none; async may lose what the master acknowledged and had not yet
  shipped to its slave when it died (reported with its window, allowed).
- **phantom**: delivered, never attempted. Always a failure (a store that invents messages).
- **moved**: delivered, but never at the queue offset acknowledged: the acknowledged copy is gone
  and an earlier attempt's copy (a send retried after an unknown outcome) or another message
  took its place. Judged as loss: a failure unless the mode allows loss. (A retried send stored
  twice whose acknowledged copy is delivered is a duplicate.)
- **duplicated**: delivered more than once. RocketMQ delivers at least once (a rebalance or a
  consumer restart redelivers from the last committed offset): reported, allowed.
- **reordered**: a message the group got for the first time after one of the same queue with a
  higher queue offset (skipped, then delivered later), in time order, for consumers that
  promise queue order (orderly push consumers; a POP consumer does not). A broken promise where
  loss is one.
- **FIFO broken**: a FIFO stream's messages (sent to one queue, an answer before the next send,
  keys ``<producer>.<stream>.<n>``) acknowledged at queue offsets that do not rise in send order.
  A broken promise where loss is one.
- **unavailability windows**: stretches in which every send attempt failed or went unanswered,
  from the first such attempt to the next acknowledgement (a quarter second or longer), with what those sends were told
  (their ``why``, counted); per fault, the sends acknowledged while it lasted and the time from
  its heal to the first acknowledgement after it (its recovery time), and from the fault to the
  first acknowledgement of a send begun after it (a failover's length when it hit the master).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

Outcome = Literal["ok", "failed", "unknown"]
EXAMPLES_MAX = 10  # examples of each finding kept in a report
WINDOW_MIN_S = 0.25  # an unavailability window this short or longer is reported


@dataclass(frozen=True, slots=True)
class SendAttempt:
    key: str
    started: float
    ended: float
    outcome: Outcome
    queue: str = ""  # "broker-a/3" when acknowledged
    queue_offset: int = -1
    why: str = ""  # when not acknowledged: what the producer was told (its status or last error)
    producer: str = ""


@dataclass(frozen=True, slots=True)
class Delivery:
    key: str
    queue: str
    queue_offset: int
    at: float
    consumer: str = "c0"
    ordered: bool = True  # the consumer promises queue order (a push consumer; not POP)


@dataclass(frozen=True, slots=True)
class FaultSpan:
    """A fault as it was injected: active from ``started`` until ``healed``."""

    kind: str
    target: str
    started: float  # in force from here (its injection done)
    healed: float  # healed by here (the heal done: a killed node serves again)
    was_leader: bool = False  # the target was the group's master / raft leader when the fault began
    heal_began: float | None = None  # the heal started here (None: at ``healed``)
    heal_failed: str | None = None  # why the heal failed (a killed node that did not start again)


@dataclass(frozen=True, slots=True)
class Window:
    """Sends failing from ``started`` to ``ended`` (the next acknowledgement; None: never)."""

    started: float
    ended: float | None
    attempts: int
    reasons: tuple[tuple[str, int], ...] = ()  # the attempts' ``why``, most frequent first

    @property
    def length(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass(frozen=True, slots=True)
class Recovery:
    fault: FaultSpan
    first_ack_after_heal: float | None  # seconds after the heal (None: none came)
    acked_during: int = 0  # sends started and acknowledged while the fault lasted
    # seconds from the fault to the first acknowledgement of a send begun after it (a failover's
    # length, when the fault hit the master)
    first_ack_after_fault: float | None = None


@dataclass
class Verdict:
    attempts: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    delivered: int = 0
    lost: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    fifo_broken: list[str] = field(default_factory=list)
    per_queue: dict[str, dict[str, int]] = field(default_factory=dict)
    loss_window: tuple[float, float] | None = None  # acknowledgement times of the lost, first and last
    windows: list[Window] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    reasons: tuple[tuple[str, int], ...] = ()  # why sends were not acknowledged, most frequent first

    def broken_promises(self, loss_allowed: bool) -> list[str]:
        """What the drill must fail on: lost and moved messages (the acknowledged copy is gone
        either way) unless the mode allows loss, and always phantoms."""
        problems = []
        if self.lost and not loss_allowed:
            problems.append(f"{len(self.lost)} acknowledged message(s) lost")
        if self.moved and not loss_allowed:
            problems.append(f"{len(self.moved)} message(s) delivered only away from their acknowledged queue offset")
        if self.reordered and not loss_allowed:
            problems.append(f"{len(self.reordered)} message(s) delivered out of queue order")
        if self.fifo_broken and not loss_allowed:
            problems.append(f"{len(self.fifo_broken)} FIFO message(s) acknowledged out of send order")
        if self.phantom:
            problems.append(f"{len(self.phantom)} message(s) delivered that were never sent")
        return problems

    def summary(self) -> dict[str, object]:
        """Counts, with a few examples of each finding (JSON-ready)."""
        return {
            "attempts": self.attempts, "acknowledged": self.acknowledged, "failed": self.failed,
            "unknown": self.unknown, "delivered": self.delivered, "reasons": dict(self.reasons),
            **{name: {"count": len(keys), "examples": keys[:EXAMPLES_MAX]} for name, keys in (
                ("lost", self.lost), ("phantom", self.phantom), ("moved", self.moved),
                ("duplicated", self.duplicated), ("reordered", self.reordered), ("fifo_broken", self.fifo_broken))},
            "per_queue": self.per_queue,
            "loss_window": self.loss_window,
            "unavailable": [{"started": w.started, "ended": w.ended, "seconds": w.length, "attempts": w.attempts,
                             "reasons": dict(w.reasons)} for w in self.windows],
            "recoveries": [{"fault": r.fault.kind, "target": r.fault.target, "was_leader": r.fault.was_leader,
                            "started": r.fault.started,
                            "healed": r.fault.healed, "first_ack_after_heal_s": r.first_ack_after_heal,
                            "first_ack_after_fault_s": r.first_ack_after_fault,
                            "acked_during": r.acked_during}
                           for r in self.recoveries],
        }


def check_history(attempts: Sequence[SendAttempt], deliveries: Sequence[Delivery],
                  faults: Sequence[FaultSpan] = (), fifo_producers: Iterable[str] = ()) -> Verdict:
    """Judge one drill's sends against one consumer group's deliveries (see the module
    docstring); ``fifo_producers`` send FIFO streams."""
    verdict = Verdict(attempts=len(attempts), delivered=len(deliveries))
    attempted: set[str] = set()
    acked: dict[str, SendAttempt] = {}
    for a in attempts:
        attempted.add(a.key)
        if a.outcome == "ok":
            verdict.acknowledged += 1
            acked[a.key] = a
        elif a.outcome == "failed":
            verdict.failed += 1
        else:
            verdict.unknown += 1
    seen: dict[str, int] = defaultdict(int)
    places: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for d in deliveries:
        seen[d.key] += 1
        places[d.key].add((d.queue, d.queue_offset))
        if d.key not in attempted:
            verdict.phantom.append(d.key)
    # a send retried after an unknown outcome may be stored twice: only the acknowledged place counts
    verdict.moved = sorted(k for k, a in acked.items() if k in places and a.queue and (a.queue, a.queue_offset) not in places[k])
    verdict.duplicated = sorted(k for k, n in seen.items() if n > 1)
    verdict.lost = sorted((k for k in acked if k not in seen), key=lambda k: acked[k].ended)
    if verdict.lost:
        verdict.loss_window = (acked[verdict.lost[0]].ended, acked[verdict.lost[-1]].ended)
    verdict.reordered = _reordered(deliveries)
    verdict.fifo_broken = _fifo_broken(attempts, set(fifo_producers))
    verdict.per_queue = _per_queue(acked, deliveries, verdict)
    verdict.windows = unavailability(attempts)
    verdict.reasons = _counted(a.why for a in attempts if a.outcome != "ok")
    verdict.recoveries = [_recovery(f, attempts) for f in faults]
    return verdict


def _reordered(deliveries: Iterable[Delivery]) -> list[str]:
    """Keys delivered for the first time (by any consumer of the group) after a message of the
    same queue with a higher queue offset: a message skipped and delivered later. Deliveries are
    taken in time order; a consumer reading again from an earlier offset (a restart, a rebalance,
    a committed offset that was lost with a master) only redelivers what the group already got,
    and is counted under duplicates. Consumers that promise no order (POP) are not judged."""
    highest: dict[str, int] = {}
    first_time: set[str] = set()
    out = []
    for d in sorted((d for d in deliveries if d.ordered), key=lambda d: d.at):
        if d.key in first_time:
            continue
        first_time.add(d.key)
        top = highest.get(d.queue, -1)
        if d.queue_offset < top:
            out.append(d.key)
        highest[d.queue] = max(top, d.queue_offset)
    return out


def _fifo_broken(attempts: Iterable[SendAttempt], fifo_producers: set[str]) -> list[str]:
    """Keys of FIFO streams acknowledged at an offset not above the one acknowledged before
    them in send order (``<producer>.<stream>.<n>``)."""
    streams: dict[tuple[str, str], list[tuple[int, SendAttempt]]] = defaultdict(list)
    for a in attempts:
        if a.outcome == "ok" and a.producer in fifo_producers and a.queue:
            head, _, n = a.key.rpartition(".")
            if n.isdigit():
                streams[(head, a.queue)].append((int(n), a))
    out = []
    for sent in streams.values():
        sent.sort(key=lambda pair: pair[0])
        for (_, before), (_, after) in pairwise(sent):
            if after.queue_offset <= before.queue_offset:
                out.append(after.key)
    return out


def _per_queue(acked: dict[str, SendAttempt], deliveries: Iterable[Delivery], verdict: Verdict) -> dict[str, dict[str, int]]:
    """Each queue's counts: acknowledged there, delivered from it, and the findings."""
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for a in acked.values():
        rows[a.queue or "(not told)"]["acknowledged"] += 1
    for d in deliveries:
        rows[d.queue or "(not told)"]["delivered"] += 1
    for name, keys in (("lost", verdict.lost), ("moved", verdict.moved)):
        for k in keys:
            rows[acked[k].queue or "(not told)"][name] += 1
    where = {d.key: d.queue or "(not told)" for d in deliveries}
    for name, keys in (("duplicated", verdict.duplicated), ("reordered", verdict.reordered),
                       ("phantom", verdict.phantom)):
        for k in keys:
            rows[where.get(k, "(not told)")][name] += 1
    for k in verdict.fifo_broken:
        rows[acked[k].queue]["fifo_broken"] += 1
    return {q: dict(sorted(c.items())) for q, c in sorted(rows.items())}


def unavailability(attempts: Sequence[SendAttempt], shortest_s: float = WINDOW_MIN_S) -> list[Window]:
    """Stretches of failing or unanswered sends between acknowledgements, in time order; those
    shorter than ``shortest_s`` are left out (with several producers, one send failing while
    the others are acknowledged is no unavailability; those sends still count among the reasons)."""
    windows = []
    start: float | None = None
    last_ack: float | None = None
    whys: list[str] = []
    for a in sorted(attempts, key=lambda a: a.ended):
        if a.outcome == "ok":
            if start is not None:
                if a.ended - start >= shortest_s:
                    windows.append(Window(start, a.ended, len(whys), _counted(whys)))
                start, whys = None, []
            last_ack = a.ended
        else:
            if start is None:
                # a send that timed out after 3 s began while others were still acknowledged:
                # the window opens at the later of its start and the last acknowledgement
                start = a.started if last_ack is None else max(a.started, last_ack)
            whys.append(a.why)
    if start is not None:
        windows.append(Window(start, None, len(whys), _counted(whys)))
    return windows


def _counted(whys: Iterable[str]) -> tuple[tuple[str, int], ...]:
    return tuple(Counter(why or "not recorded" for why in whys).most_common())


def _recovery(fault: FaultSpan, attempts: Sequence[SendAttempt]) -> Recovery:
    """Sends acknowledged while the fault was in force (started after it was injected, answered
    before its heal began), and the first acknowledgement after the heal."""
    until = fault.healed if fault.heal_began is None else fault.heal_began
    after = [a.ended for a in attempts if a.outcome == "ok" and a.ended >= fault.healed]
    during = sum(1 for a in attempts if a.outcome == "ok" and fault.started <= a.started and a.ended <= until)
    since = [a.ended for a in attempts if a.outcome == "ok" and a.started >= fault.started]
    return Recovery(fault, min(after) - fault.healed if after else None, during,
                    min(since) - fault.started if since else None)
