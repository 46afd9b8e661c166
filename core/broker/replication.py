"""What the broker needs from its replication strategy (made by the ``mq_replication`` hook).

The broker calls these; the strategies live in ``replication/`` behind plugins, so core code
never imports them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import trio


class Replicated(enum.Enum):
    """How a send's wait for its replicas ended."""

    OK = "ok"
    TIMEOUT = "timeout"  # FLUSH_SLAVE_TIMEOUT: stored, not confirmed by a replica in time
    NO_REPLICA = "no_replica"  # SLAVE_NOT_AVAILABLE: stored, no replica close enough to wait for
    LOST_LEADERSHIP = "lost_leadership"  # raft: the node stopped leading first; it may or may not commit


@dataclass(frozen=True, slots=True)
class ReplicaLag:
    """How far one replica is behind this master."""

    peer: str
    lag_bytes: int
    lag_seconds: float


@dataclass(frozen=True, slots=True)
class RaftProgress:
    term: int
    commit_index: int
    applied_index: int
    last_index: int
    elections: int  # elections this member stood in


@dataclass(frozen=True, slots=True)
class ControllerProgress:
    """A broker under a controller: the master epoch it knows, its SyncStateSet's size (a
    master's; 0 on a slave) and how many roles it has taken since it started."""

    master_epoch: int
    sync_state_set_size: int
    role_changes: int


@dataclass(frozen=True, slots=True)
class ReplicationMetrics:
    """What the metrics endpoint shows of a node's replication."""

    role: str  # master, slave; leader, candidate, follower under raft
    replicas: tuple[ReplicaLag, ...] = ()  # a master's connected slaves; a raft leader's followers
    raft: RaftProgress | None = None
    controller: ControllerProgress | None = None

    @property
    def slaves_connected(self) -> int:
        """Connected slaves (master-slave modes; a raft leader lists every follower, reachable or not)."""
        return 0 if self.raft is not None else len(self.replicas)


class Replication(Protocol):
    """One broker node's part in its group's replication."""

    @property
    def writable(self) -> bool:
        """Whether this node takes writes (a master); replicas refuse sends."""

    @property
    def waits_for_replicas(self) -> bool:
        """Whether sends wait in :meth:`wait_replicated` before they are answered."""

    @property
    def broker_id(self) -> int:
        """The id this node registers under now: 0 while it is its group's master."""

    async def wait_role_changed(self) -> None:
        """Return when :attr:`writable` or :attr:`broker_id` may have changed (raft elections);
        strategies whose roles are fixed never return."""

    @property
    def master_missing(self) -> bool:
        """A replica that does not know its master yet (the broker registers sooner)."""

    async def serve(self, ha_listen: str, *, task_status: trio.TaskStatus[str | None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the replication tasks until cancelled; ``started`` with the HA address served
        (``None`` when this node serves none)."""

    def master_learned(self, master_addr: str | None, ha_addr: str | None) -> None:
        """The name servers' answer to a registration: the group's master and its HA address."""

    async def wait_replicated(self, phys_offset: int, end_offset: int) -> Replicated:
        """Wait until replicas hold the record at ``phys_offset`` and the log up to
        ``end_offset`` (the modes that wait: sync and dledger)."""

    def transfer_leadership(self, target: str) -> str | None:
        """Hand the group's leadership to member ``target``; ``None``, or why not."""

    def runtime_info(self) -> dict[str, str]:
        """Fields for GET_BROKER_RUNTIME_INFO (strings, as RocketMQ's table)."""

    def metrics(self) -> ReplicationMetrics:
        """This node's role, its replicas' lag, and raft's progress (read when scraped)."""
