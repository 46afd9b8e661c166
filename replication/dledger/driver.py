"""The trio side of one raft member: feeds the sans-IO :class:`RaftNode` the network, the
clock and proposals, and carries out its Readies in order (term and vote to disk, the log
synced, then the messages out), as the simulator's driver does in tests. A leader's pushes and
heartbeats are the exception: they go out before its own log sync (Raft section 10.2.1), since
they claim nothing about its disk; the leader counts itself towards a quorum once synced.
Without ``RaftSettings.sync_appends`` (a store that flushes asynchronously) step 2 is left to a
flush task every ``flush_interval_s``: appends are answered from the page cache, which survives
any process crash, and the commit checkpoint covers only what that task synced.

```
 transport --receive--> node <--propose-- append()          every input wakes the loop:
                          |                                 tick, then carry out the Ready:
                    take_ready()                            1 currterm file (thread)
                          |                                 2 log fdatasync (thread)
   transport <--send-- messages, completions --> waiters    3 messages, 4 completions,
                                                              commit index, checkpoint
```
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from replication.dledger.disk_log import DiskRaftLog, sync_files
from replication.dledger.messages import Code, Message
from replication.dledger.quorum import Completion
from replication.dledger.raft_node import RaftNode, RaftSettings, Ready, Role, early_messages
from replication.dledger.state_files import (
    load_commit_checkpoint,
    load_hard_state,
    save_commit_checkpoint,
    save_hard_state,
)
from replication.dledger.transport import RaftTransport
from replication.member_keys import Membership

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Appended:
    """The outcome of one appended entry."""

    code: Code
    index: int
    term: int


class RaftDriver:
    """One member of raft group ``group`` storing its log under ``store_dir``."""

    def __init__(self, group: str, node_id: str, peers: dict[str, str], store_dir: Path, segment_size: int,
                 settings: RaftSettings | None = None, rng: random.Random | None = None, *,
                 log: DiskRaftLog | None = None, on_commit: Callable[[int], None] | None = None,
                 membership: Membership | None = None, source_host: str | None = None) -> None:
        """``log`` is one its owner (a broker's store) opened already; else the driver opens
        and closes its own. ``on_commit`` is called on the loop with each new commit index,
        before the appends it completes are answered. ``membership``: with ACL on, the keys
        the raft port's connections prove membership with. ``source_host``: the local address
        connections to peers start from (None: any)."""
        self.group = group
        self.id = node_id
        self.peers = peers  # every member (this one included): id -> raft address
        self.store_dir = store_dir
        self.settings = settings or RaftSettings()
        self._owns_log = log is None
        self.log = log if log is not None else DiskRaftLog(store_dir, segment_size)
        self._on_commit = on_commit
        self._state_dir = store_dir / "dledger"
        self._rng = rng or random.Random()
        self.node: RaftNode | None = None
        self.transport = RaftTransport(group, {p: a for p, a in peers.items() if p != node_id}, self._receive,
                                       me=node_id, membership=membership, source_host=source_host)
        self.commit_index = -1
        self.role = Role.FOLLOWER
        self.leader: str | None = None
        self.term = 0
        self._wake = trio.Event()
        self._waiters: dict[int, tuple[trio.Event, list[Completion]]] = {}
        self._committed = trio.Event()
        self._role_changed = trio.Event()
        self._checkpointed = -1

    async def run(self, listen: str, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the log, serve the raft port, and run the member until cancelled."""
        committed = load_commit_checkpoint(self._state_dir / "checkpoint")
        if self._owns_log:
            await trio.to_thread.run_sync(self.log.open, committed)
        try:
            now = trio.current_time()
            self.node = RaftNode(self.id, tuple(self.peers), self.log, self.settings, self._rng, now,
                                 load_hard_state(self._state_dir / "currterm"), committed)
            self.commit_index = self._checkpointed = self.node.commit_index
            self.term = self.node.term
            async with trio.open_nursery() as nursery:
                port = await nursery.start(self.transport.serve, listen)
                if not self.settings.sync_appends:
                    nursery.start_soon(self._flush_loop)
                task_status.started(port)
                await self._loop()
        finally:
            with trio.CancelScope(shield=True):
                await self._checkpoint()
            if self._owns_log:
                self.log.close()

    # ------------------------------------------------------------------ inputs

    def _receive(self, msg: Message) -> None:
        if self.node is not None:
            self.node.receive(msg, trio.current_time())
            self._wake.set()

    async def append(self, bodies: list[bytes]) -> list[Appended] | Code:
        """Append ``bodies`` (message records) and wait for each to commit or fail; a refusal
        (NOT_LEADER, LEADER_TRANSFERRING, LEADER_PENDING_FULL) comes back at once."""
        node = self.node
        if node is None:
            return Code.NOT_LEADER
        proposals = node.propose(bodies, trio.current_time())
        if isinstance(proposals, Code):
            return proposals
        done = trio.Event()
        results: list[Completion] = []
        for p in proposals:
            self._waiters[p] = (done, results)
        self._wake.set()
        while len(results) < len(proposals):
            await done.wait()
            done = trio.Event()
            for p in proposals:
                if p in self._waiters:
                    self._waiters[p] = (done, results)
        order = {p: i for i, p in enumerate(proposals)}
        results.sort(key=lambda c: order[c.proposal])
        return [Appended(c.code, c.index, c.term) for c in results]

    def propose(self, bodies: list[bytes]) -> range | Code:
        """Append ``bodies`` without waiting: their proposal numbers, or why not (the caller
        learns the outcome from the commit index and the entries' terms)."""
        if self.node is None:
            return Code.NOT_LEADER
        out = self.node.propose(bodies, trio.current_time())
        self._wake.set()
        return out

    def transfer_leadership(self, target: str) -> str | None:
        if self.node is None:
            return "not running"
        why = self.node.transfer_leadership(target, trio.current_time())
        self._wake.set()
        return why

    async def wait_committed(self, index: int) -> None:
        while self.commit_index < index:
            await self._committed.wait()

    async def wait_role_change(self) -> None:
        await self._role_changed.wait()

    # ------------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        node = self.node
        assert node is not None
        last_checkpoint = trio.current_time()
        while True:
            with trio.move_on_at(node.next_wakeup(trio.current_time())):
                await self._wake.wait()
            self._wake = trio.Event()
            node.tick(trio.current_time())
            await self._carry_out()
            now = trio.current_time()
            if now - last_checkpoint >= CHECKPOINT_INTERVAL_S:
                last_checkpoint = now
                await self._checkpoint()

    async def _carry_out(self) -> None:
        """Carry out Readies until there is nothing left to do."""
        node = self.node
        assert node is not None
        while True:
            ready = node.take_ready(trio.current_time())
            cuts = self.log.cuts
            synced = self.log.last_index
            files = self.log.take_dirty_files() if self.settings.sync_appends else []
            early, messages = early_messages(ready, bool(files))
            for dst, msg in early:  # a leader's pushes go out while it syncs; answers wait
                self.transport.send(dst, msg)
            if ready.hard_state is not None:
                await trio.to_thread.run_sync(save_hard_state, self._state_dir / "currterm", ready.hard_state)
            if files:
                await trio.to_thread.run_sync(sync_files, files)
            for dst, msg in messages:
                self.transport.send(dst, msg)
            if files and self.log.cuts == cuts:  # no truncation while it synced
                self.log.durable_index = synced
            node.log_synced(synced, trio.current_time())
            self._publish(ready)
            if not (ready.messages or ready.hard_state or files or ready.completions) and \
                    self.log.last_index == synced:
                return

    def _publish(self, ready: Ready) -> None:
        waiters = self._waiters
        if waiters:  # the broker's sends follow the commit index and wait on no proposal
            for run in ready.completions:
                for done in run.each():
                    waiter = waiters.pop(done.proposal, None)
                    if waiter is not None:
                        waiter[1].append(done)
                        waiter[0].set()
        if ready.commit_index > self.commit_index:
            self.commit_index = ready.commit_index
            if self._on_commit is not None:
                self._on_commit(ready.commit_index)
            self._committed.set()
            self._committed = trio.Event()
        if (ready.role, ready.leader, ready.term) != (self.role, self.leader, self.term):
            if ready.role is not self.role or ready.leader != self.leader:
                log.info("raft %s/%s: %s of term %d, leader %s", self.group, self.id, ready.role.value,
                         ready.term, ready.leader)
            self.role, self.leader, self.term = ready.role, ready.leader, ready.term
            self._role_changed.set()
            self._role_changed = trio.Event()

    async def _flush_loop(self) -> None:
        """Without ``sync_appends``: make the log durable every ``flush_interval_s``."""
        log_ = self.log
        while True:
            await trio.sleep(self.settings.flush_interval_s)
            cuts, last, files = log_.cuts, log_.last_index, log_.take_dirty_files()
            if files:
                await trio.to_thread.run_sync(sync_files, files)
            if log_.cuts == cuts:  # no truncation meanwhile: everything through ``last`` is on disk
                log_.durable_index = max(log_.durable_index, last)

    async def _checkpoint(self) -> None:
        # only what is on disk: recovery trusts the entries up to the checkpoint unchecked
        upto = min(self.commit_index, self.log.durable_index)
        if upto > self._checkpointed:
            await trio.to_thread.run_sync(save_commit_checkpoint, self._state_dir / "checkpoint", upto,
                                          self.log.last_index)
            self._checkpointed = upto
