"""Which brokers the controller leader believes alive (RocketMQ's DefaultBrokerHeartbeatManager),
sans-IO: heartbeats, connections and the slaves' view of their master, judged at a given time.

RocketMQ expires a broker silent for 10 s, found by a scan every 5 s (a dropped channel
triggers the scan sooner), so its users wait about 10 s. The goal here is a writable new master
well inside a second without electing on a stall, so a broker counts as gone when:

```
 its connection to the controller dropped and did not come back within drop_grace_ms    a kill
 its heartbeats stopped for heartbeat_timeout_ms                                  a partition
 it is late by more than two heartbeat intervals and every live slave that
   follows it says its HA link to it is down                                a kill, sooner
```

A loaded broker that pauses (300 ms of garbage collection, a long fsync) keeps its connections
and beats again when it resumes: none of the three fires, and it is not replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from replication.controller.group_state import Candidate


@dataclass(frozen=True, slots=True)
class LivenessSettings:
    heartbeat_interval_ms: int = 100
    heartbeat_timeout_ms: int = 3000
    drop_grace_ms: int = 150  # a reconnect this soon (a restarted socket, not a dead broker) counts as alive


@dataclass
class BrokerBeat:
    """What the last heartbeat of one broker said, and its connection's state."""

    last_beat_ms: int
    epoch: int = 0
    max_offset: int = 0
    priority: int = 2**31 - 1
    dropped_at_ms: int | None = None  # its controller connection dropped then (None: connected)
    master_link_down_since_ms: int | None = None  # as a slave: its HA link to its master is down


class Liveness:
    """The controller leader's view of every broker's liveness; ``now`` is always given."""

    def __init__(self, settings: LivenessSettings = LivenessSettings()) -> None:
        self.settings = settings
        self.brokers: dict[str, dict[int, BrokerBeat]] = {}

    def beat(self, group: str, broker_id: int, now_ms: int, *, epoch: int, max_offset: int,
             priority: int = 2**31 - 1, master_link_down_since_ms: int | None = None) -> None:
        """A heartbeat (BROKER_HEARTBEAT): the broker is connected and says where its log is."""
        self.brokers.setdefault(group, {})[broker_id] = BrokerBeat(
            now_ms, epoch, max_offset, priority, None, master_link_down_since_ms)

    def dropped(self, group: str, broker_id: int, now_ms: int) -> None:
        """The broker's connection to the controller closed."""
        beat = self.brokers.get(group, {}).get(broker_id)
        if beat is not None and beat.dropped_at_ms is None:
            beat.dropped_at_ms = now_ms

    def forget(self, group: str, broker_id: int) -> None:
        self.brokers.get(group, {}).pop(broker_id, None)

    def alive(self, group: str, broker_id: int, now_ms: int, *, followers: frozenset[int] = frozenset()) -> bool:
        """Whether ``broker_id`` counts as alive at ``now_ms``; ``followers``: the slaves that
        follow it (when it is the master), whose view of it counts too."""
        beats = self.brokers.get(group, {})
        beat = beats.get(broker_id)
        if beat is None:
            return False
        s = self.settings
        if beat.dropped_at_ms is not None and now_ms - beat.dropped_at_ms >= s.drop_grace_ms:
            return False
        silent = now_ms - beat.last_beat_ms
        if silent >= s.heartbeat_timeout_ms:
            return False
        if followers and silent > 2 * s.heartbeat_interval_ms:
            views = [beats[f] for f in followers if f in beats and self._connected(beats[f], now_ms)]
            if views and all(v.master_link_down_since_ms is not None for v in views):
                return False
        return True

    def candidates(self, group: str, now_ms: int, master_id: int | None = None,
                   followers: frozenset[int] = frozenset()) -> Mapping[int, Candidate]:
        """Every known broker of ``group`` as :func:`replication.controller.group_state.elect`
        weighs it."""
        return {broker_id: Candidate(broker_id,
                                     self.alive(group, broker_id, now_ms,
                                                followers=followers if broker_id == master_id else frozenset()),
                                     beat.epoch, beat.max_offset, beat.priority)
                for broker_id, beat in self.brokers.get(group, {}).items()}

    def _connected(self, beat: BrokerBeat, now_ms: int) -> bool:
        return beat.dropped_at_ms is None and now_ms - beat.last_beat_ms < self.settings.heartbeat_timeout_ms
