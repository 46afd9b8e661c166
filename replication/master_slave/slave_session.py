"""What a slave does with each batch its master streams (sans-IO): verify, truncate, append.

RocketMQ's slave reports its max offset and appends whatever follows; a slave whose log forked
(an old master rejoining after an async failover, or a master that lost an unflushed tail) keeps
the fork forever, or is dropped and waits for an operator to wipe it. Ours checks first:

1. A non-empty slave reports the start of a record some ``window`` bytes before its end, not
   its end, so the master streams bytes the slave already has.
2. The slave compares them with its own. All equal up to its end: it appends from there on.
3. A record differs: the logs agree up to the start of that record, so the slave cuts its log
   there and appends the master's bytes instead.
4. The very first record compared differs, or the master's log ends below the report: the fork
   is further back. The slave reconnects with a window four times larger.
5. Its oldest record differs too: there is no common prefix to keep. The slave refuses to
   replicate and says so, leaving its files for the operator.

Until its bytes are verified the slave acknowledges only what it has compared, so a sync send
never counts an unverified replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from replication.errors import ProtocolError
from replication.master_slave.protocol import Transfer

VERIFY_WINDOW_BYTES = 64 * 1024
WINDOW_GROWTH = 4


class LocalLog(Protocol):
    """The slave's CommitLog, as the session reads it."""

    @property
    def log_end(self) -> int: ...

    @property
    def log_start(self) -> int: ...

    def record_start_at_or_before(self, target: int) -> int: ...

    def first_difference(self, offset: int, data: bytes) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Append:
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Truncate:
    """Cut the local log at ``end``: the master's log differs from there on."""

    end: int


@dataclass(frozen=True, slots=True)
class GoBack:
    """Reconnect and verify from further back (``window`` bytes before the end)."""

    window: int


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


Action = Append | Truncate | GoBack | Refuse


class ReplicaSession:
    """One connection's worth of a slave's decisions."""

    def __init__(self, log: LocalLog, window: int = VERIFY_WINDOW_BYTES) -> None:
        self.log = log
        self.window = window
        end = log.log_end
        self.empty = end == 0 or end == log.log_start
        self.verify_end = end
        self.start = 0 if self.empty else log.record_start_at_or_before(max(log.log_start, end - window))
        self.position: int | None = None if self.empty else self.start  # next offset expected
        self.verifying = not self.empty and self.start < end

    @property
    def request_offset(self) -> int:
        """The first report: where the master should start."""
        return 0 if self.empty else self.start

    @property
    def ack_offset(self) -> int:
        """What the slave may claim to hold: only verified bytes while verifying."""
        if self.verifying:
            assert self.position is not None
            return self.position
        return self.log.log_end

    def on_transfer(self, t: Transfer) -> list[Action]:
        if self.position is None:  # an empty slave: the master chose the start
            if not t.data:
                return []
            self.position = t.end
            return [Append(t.offset, t.data)]
        if not t.data:
            return self._on_heartbeat(t.offset)
        if t.offset != self.position:
            raise ProtocolError(f"master sent bytes at {t.offset}, expected {self.position}")
        if not self.verifying:
            self.position = t.end
            return [Append(t.offset, t.data)]
        return self._verify(t)

    def _on_heartbeat(self, master_next: int) -> list[Action]:
        assert self.position is not None
        if master_next == self.position:
            if self.verifying and self.position > self.start:
                # the master's log ends inside ours, and everything before agrees: cut our tail
                self.verifying = False
                return [Truncate(self.position)]
            if self.verifying:
                return self._further_back("the master's log ends where our check begins")
            return []
        if master_next < self.position and self.verifying:
            return self._further_back(f"the master's log ends at {master_next}, below {self.position}")
        if master_next > self.position:
            return [Refuse(f"the master cannot send offset {self.position} (it offers {master_next}): "
                           "its older segments are gone")]
        raise ProtocolError(f"master heartbeat at {master_next}, expected {self.position}")

    def _verify(self, t: Transfer) -> list[Action]:
        count = min(len(t.data), self.verify_end - t.offset)
        differs = self.log.first_difference(t.offset, t.data[:count])
        if differs is None:
            self.position = t.offset + count
            if self.position < self.verify_end:
                return []
            self.verifying = False
            rest = t.data[count:]
            self.position = t.end
            return [Append(t.offset + count, rest)] if rest else []
        cut = self.log.record_start_at_or_before(differs)
        if cut <= self.start:
            return self._further_back(f"the record at {self.start} differs from the master's")
        self.verifying = False
        self.position = t.end
        return [Truncate(cut), Append(cut, t.data[cut - t.offset :])]

    def _further_back(self, why: str) -> list[Action]:
        if self.start <= self.log.log_start:
            return [Refuse(f"this slave's log shares no prefix with its master's ({why}, and the slave's "
                           f"oldest record at {self.log.log_start} is part of the fork)")]
        return [GoBack(self.window * WINDOW_GROWTH)]
