"""Raft replication as the broker sees it (core.broker.replication.Replication): the members of
a broker group elect a leader, which takes the writes and registers as the master (broker id
0); followers register as slaves and refuse sends.

```
 send -> store.put -> raft propose (entry appended) ... quorum commit -> on_commit:
         dispatch committed entries, advance the commit watermark -> the send is answered
```
A new leader takes writes only once the first entry of its term (the election no-op) is
committed: by then every entry before it is committed and dispatched, so queue offsets continue
from its ConsumeQueues.
"""

from __future__ import annotations

import logging

import orjson
import trio

from core.addresses import own_loopback, split_address
from core.broker.replication import RaftProgress, ReplicaLag, Replicated, ReplicationMetrics
from core.clock import now_ms
from core.config import Config
from core.node_specs import BrokerNode
from core.store.interfaces import ReplicatedStore
from core.store.store_types import StoreRole
from formats import dledger
from formats.errors import FormatError
from replication.dledger.driver import RaftDriver
from replication.dledger.raft_node import RaftSettings, Role
from replication.dledger.store import RaftParts
from replication.member_keys import Membership
from replication.watermark_waiters import AckWaiters

log = logging.getLogger(__name__)


def raft_address(node: BrokerNode) -> str:
    """Where the other members reach a member's raft port: its ``ha_advertise``, else its broker
    port + 1 (the HA port of the other modes)."""
    if node.ha_advertise:
        return node.ha_advertise
    host, port = split_address(node.listen)
    return f"{host}:{port + 1}"


def follower_broker_id(node: BrokerNode) -> int:
    """The id a member registers under while it follows: stable, distinct, never 0."""
    return node.id + 1


class DLedgerReplication:
    """One member of a raft group: the [[brokers]] sharing ``node.name``."""

    def __init__(self, node: BrokerNode, config: Config, store: ReplicatedStore, raft: RaftParts,
                 settings: RaftSettings | None = None) -> None:
        """``raft``: the raft parts ``store`` was made with (its ``parts``)."""
        self.node = node
        self.store = store
        self.raft = raft
        members = [b for b in config.brokers if b.name == node.name]
        self.peers = {b.node: raft_address(b) for b in members}
        # the log is synced before an append is answered only when the store flushes so too
        self.settings = settings or RaftSettings(sync_appends=store.config.flush == "sync",
                                                 flush_interval_s=store.config.flush_interval_ms / 1000)
        self.driver = RaftDriver(node.name, node.node, self.peers, store.root, store.config.segment_size_bytes,
                                 self.settings, log=raft.raft_log, on_commit=self._committed,
                                 membership=Membership.from_config(config),  # ACL on: members prove it
                                 source_host=own_loopback(node.listen))
        self.commits = AckWaiters()  # watermark: commit index + 1
        self._leading = False
        self._role_changed = trio.Event()
        raft.attach_proposer(self.driver.propose)

    # ------------------------------------------------------------------ Replication

    @property
    def writable(self) -> bool:
        return self._leading

    @property
    def waits_for_replicas(self) -> bool:
        return True

    @property
    def broker_id(self) -> int:
        return 0 if self._leading else follower_broker_id(self.node)

    @property
    def master_missing(self) -> bool:
        return False  # elections, not registrations, find the leader

    async def wait_role_changed(self) -> None:
        await self._role_changed.wait()

    async def serve(self, ha_listen: str, *, task_status: trio.TaskStatus[str | None] = trio.TASK_STATUS_IGNORED) -> None:
        self.commits.advance(self.raft.committed_index + 1)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(self.driver.run, ha_listen)
            nursery.start_soon(self._follow_roles)
            nursery.start_soon(self.commits.tick)
            task_status.started(f"{split_address(ha_listen)[0]}:{port}")

    def master_learned(self, master_addr: str | None, ha_addr: str | None) -> None:
        pass  # the leader is whoever won the election

    async def wait_replicated(self, phys_offset: int, end_offset: int) -> Replicated:
        index, term = self.raft.entry_at_record(phys_offset)
        driver = self.driver

        def deposed() -> bool:
            return driver.term != term or not self._leading

        await self.commits.wait(index + 1, self.settings.wait_ack_timeout_s, deposed)
        if driver.commit_index >= index:
            return Replicated.OK if self.raft.raft_log.term_at(index) == term else Replicated.LOST_LEADERSHIP
        return Replicated.LOST_LEADERSHIP if deposed() else Replicated.TIMEOUT

    def transfer_leadership(self, target: str) -> str | None:
        """Hand leadership to member ``target`` (a node name such as broker-a-1); None, or
        why not."""
        return self.driver.transfer_leadership(target)

    def runtime_info(self) -> dict[str, str]:
        driver, node = self.driver, self.driver.node
        leader = driver.leader
        return {
            "haMode": "dledger", "haRole": driver.role.value if not self._leading else "leader",
            "raftMember": driver.id, "raftTerm": str(driver.term), "raftLeader": leader or "",
            "raftLeaderAddr": self.peers.get(leader, "") if leader else "",
            "raftFirstIndex": str(self.raft.raft_log.first_index), "raftInstallEnd": str(self.raft.raft_log.install_end),
            "raftCommitIndex": str(driver.commit_index), "raftLastIndex": str(self.raft.raft_log.last_index),
            "raftWritable": str(self._leading).lower(),
            "raftWatermarks": orjson.dumps(node.watermarks() if node is not None else {}).decode(),
            "raftPeers": orjson.dumps(self.peers).decode(),
            "raftRejectedFrames": str(driver.transport.stats.rejected),
        }

    def metrics(self) -> ReplicationMetrics:
        driver, node = self.driver, self.driver.node
        raft = RaftProgress(driver.term, driver.commit_index, self.raft.committed_index,
                            self.raft.raft_log.last_index, node.elections_started if node is not None else 0)
        followers: tuple[ReplicaLag, ...] = ()
        if self._leading and node is not None:  # only a leader knows what its followers hold
            now = now_ms()
            followers = tuple(self._follower_lag(peer, mark, now)
                              for peer, mark in sorted(node.watermarks().items()) if peer != driver.id)
        return ReplicationMetrics(driver.role.value, followers, raft)

    def _follower_lag(self, peer: str, holds: int, now_ms: int) -> ReplicaLag:
        """How far a follower that holds entries up to ``holds`` is behind: the log bytes after
        them, and the age of the first entry it lacks (its record's store time)."""
        log = self.raft.raft_log
        if holds >= log.last_index:
            return ReplicaLag(peer, 0, 0.0)
        start = log.position(holds + 1)
        if start is None:
            return ReplicaLag(peer, 0, 0.0)
        lag_bytes = max(0, self.store.log_end - start)
        try:
            stamp = self.store.read_record(start + dledger.HEADER_SIZE).store_timestamp
        except (KeyError, FormatError):  # a no-op entry, or one retired meanwhile
            stamp = now_ms
        return ReplicaLag(peer, lag_bytes, max(0, now_ms - stamp) / 1000)

    # ------------------------------------------------------------------ roles

    def _committed(self, commit_index: int) -> None:
        self.raft.dispatch_committed(commit_index)
        self.commits.advance(commit_index + 1)
        self._check_role()

    async def _follow_roles(self) -> None:
        while True:
            await self.driver.wait_role_change()
            self._check_role()

    def _check_role(self) -> None:
        driver = self.driver
        leading = (driver.role is Role.LEADER and driver.commit_index >= 0
                   and self.raft.raft_log.term_at(driver.commit_index) == driver.term)
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            self.store.set_role(StoreRole.WRITER)  # queue offsets continue from the ConsumeQueues
            log.info("raft %s: leading term %d from index %d", driver.id, driver.term, driver.commit_index)
        else:
            self.store.set_role(StoreRole.REPLICA, f"raft member {driver.id} is not the leader of {self.node.name} "
                                     f"(leader: {driver.leader or 'being elected'}): send to the master")
        self.commits.wake()
        self._role_changed.set()
        self._role_changed = trio.Event()
