"""The controller leader's elections: the brokers' liveness as it hears them, the scan that
finds a group without a live master, the election itself (through the rules of
:mod:`replication.controller.group_state` and the raft log) and the role notices after it.

A new leader knows no heartbeat yet: it judges a group only once every replica of it has beaten
since it took over, or a heartbeat timeout has passed. The first election of a group waits for
the configured master (id 0) as long as a heartbeat timeout, then takes the longest log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from replication.controller import replies
from replication.controller.group_state import (
    FIRST_MASTER_ID,
    Event,
    GroupState,
    MasterElected,
    Refused,
    elect,
)
from replication.controller.liveness import Liveness, LivenessSettings
from replication.controller.replicated_state import ControllerState

log = logging.getLogger(__name__)

SCAN_INTERVAL_S = 0.05
NOTICE_TIMEOUT_S = 3.0


class Elections:
    """What the controller leader knows of the brokers, and the elections it holds."""

    def __init__(self, state: ControllerState, append: Callable[[Event], Awaitable[None]],
                 settings: LivenessSettings, *, unclean: bool, clock: Callable[[], int]) -> None:
        """``append`` replicates an event and returns once it is applied (or raises Refused)."""
        self.state = state
        self._append = append
        self.settings = settings
        self.unclean = unclean
        self.clock = clock
        self.liveness = Liveness(settings)
        self.lock = trio.Lock()  # one state change judged and applied at a time
        self.links: dict[tuple[str, int], Any] = {}  # (group, broker id) -> the connection it beats on
        self.count = 0
        self._leading_term: int | None = None
        self._leading_since = 0
        self._first_seen: dict[str, int] = {}  # group -> when this leader first judged it
        self._nursery: trio.Nursery | None = None

    def dropped(self, conn: Any) -> None:
        now = self.clock()
        for key in [k for k, c in self.links.items() if c is conn]:
            del self.links[key]
            self.liveness.dropped(*key, now)

    def alive(self, group: str, broker_id: int) -> bool:
        state = self.state.group(group)
        followers = frozenset(state.replicas) - {broker_id} if broker_id == state.master_id else frozenset()
        return self.liveness.alive(group, broker_id, self.clock(), followers=followers)

    def alive_ids(self, state: GroupState) -> frozenset[int]:
        return frozenset(b for b in state.replicas if self.alive(state.group, b))

    async def elect(self, group: str, prefer: int | None = None) -> MasterElected | None:
        """Elect ``group``'s master now (``prefer``: an operator's choice), tell its brokers, and
        return the event; None when there was nothing to change. Raises :class:`Refused`."""
        async with self.lock:
            state = self.state.group(group)
            now = self.clock()
            candidates = self.liveness.candidates(group, now, state.master_id,
                                                  frozenset(state.replicas) - {state.master_id})
            event = elect(state, candidates, prefer=prefer, unclean=self.unclean)
            if event.master_id is None and state.master_id is None:
                return None
            await self._append(event)
            self.count += 1
        log.warning("controller: %s master is now broker %s (epoch %d, SyncStateSet %s)", group, event.master_id,
                    event.master_epoch, sorted(event.sync_state_set))
        self._notify(group)
        return event

    def _notify(self, group: str) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED to every broker of ``group`` connected to this leader."""
        state = self.state.group(group)
        fields = replies.master_fields(state)
        fields.setdefault("masterBrokerId", "-1")
        for (g, _), conn in list(self.links.items()):
            if g == group and self._nursery is not None:
                notice = RemotingCommand(code=RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields=dict(fields),
                                         body=replies.sync_state_set(state))
                self._nursery.start_soon(self._send_notice, conn, notice)

    @staticmethod
    async def _send_notice(conn: Any, notice: RemotingCommand) -> None:
        with trio.move_on_after(NOTICE_TIMEOUT_S):
            try:
                await conn.oneway(notice)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                log.info("role notice to %s not sent: %s", conn.remote, exc)

    async def run(self, leading: Callable[[], bool], term: Callable[[], int]) -> None:
        """Scan while ``leading()``, for as long as the controller runs."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._scan_loop, leading, term)

    async def _scan_loop(self, leading: Callable[[], bool], term: Callable[[], int]) -> None:
        while True:
            await trio.sleep(SCAN_INTERVAL_S)
            if not leading():
                self._leading_term = None
                continue
            now = self.clock()
            if self._leading_term != term():  # took over: liveness starts afresh
                self._leading_term, self._leading_since = term(), now
                self.liveness = Liveness(self.settings)
                self._first_seen.clear()
                continue
            for group, state in list(self.state.groups.items()):
                if self._due(state, now):
                    try:
                        await self.elect(group)
                    except Refused as exc:
                        log.debug("controller: no election in %s: %s", group, exc.remark)

    def _due(self, state: GroupState, now: int) -> bool:
        """Whether ``state``'s group needs an election now, as far as this leader can judge."""
        if not state.replicas:
            return False
        beats = self.liveness.brokers.get(state.group, {})
        settled = now - self._leading_since >= self.settings.heartbeat_timeout_ms or all(
            b in beats and beats[b].last_beat_ms >= self._leading_since for b in state.replicas)
        if not settled:
            return False
        if state.master_epoch == 0:  # the first election: the configured master, unless it does not come
            first_seen = self._first_seen.setdefault(state.group, now)
            return self.alive(state.group, FIRST_MASTER_ID) or (
                now - first_seen >= self.settings.heartbeat_timeout_ms and bool(self.alive_ids(state)))
        if state.master_id is None:
            pool = state.replicas.keys() if self.unclean else state.sync_state_set
            return any(self.alive(state.group, b) for b in pool)
        return not self.alive(state.group, state.master_id)
