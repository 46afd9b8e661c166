"""A master's SyncStateSet under a controller (RocketMQ's AutoSwitchHAService: its
isInSyncReplicas checks and the AlterSyncStateSet requests), and the sends that wait for it.

```
 fenced   no put taken while the controller has not answered for a heartbeat timeout
 shrink   a member whose HA link dropped, or that said nothing for SLAVE_SILENT_S (it reports
          every 100 ms: it is stopped or cut off): at once; one behind for
          ha_max_time_slave_not_catchup
 expand   a slave less than JOIN_LAG_S behind starts joining: from then on sends wait for it
          too; once it holds the confirm offset of that moment, it holds every acknowledged
          message, and is asked into the set
 sends    (sync) wait until every member and joiner acknowledged their end
 readers  see records up to the confirm offset: what every member acknowledged (all of the log
          while the master is alone in the set); held back past it until then
```

A change takes effect only once the controller has it (a fenced AlterSyncStateSet): a member
the controller still counts could still be elected, so a send never stops waiting for it sooner.
"""

from __future__ import annotations

import logging

import trio

from core.broker.replication import Replicated
from core.config import ReplicationConfig
from core.store.interfaces import ReplicatedStore
from replication.controller.controller_link import AlterRefused, ControllerLink, RoleInfo
from replication.master_slave.ha_service import HAService
from replication.watermark_waiters import AckWaiters

log = logging.getLogger(__name__)

JOIN_LAG_S = 1.0
SLAVE_SILENT_S = 0.5  # a slave's 300 ms stall stays under it
CHECK_INTERVAL_S = 0.1


class SyncStateSetKeeper:
    """The SyncStateSet of the master ``me`` for one master epoch."""

    def __init__(self, me: int, info: RoleInfo, link: ControllerLink, settings: ReplicationConfig,
                 store: ReplicatedStore) -> None:
        self.me = me
        self.master_epoch = info.master_epoch
        self.members = info.sync_state_set
        self.epoch = info.sync_state_set_epoch
        self.link = link
        self.store = store
        self.catchup_max_s = settings.ha_max_time_slave_not_catchup_ms / 1000
        self.min_in_sync = settings.min_in_sync_replicas
        self.controller_timeout_s = settings.controller_heartbeat_timeout_ms / 1000
        self.service: HAService | None = None
        self.acks = AckWaiters()
        self.joining: dict[int, int] = {}  # broker id -> the confirm offset when it began joining
        self.alters = 0
        self._news = trio.Event()
        self._deposed = False

    def acked_by(self) -> dict[int, int]:
        """Each connected slave's newest ack, by broker id."""
        out: dict[int, int] = {}
        for link in self.service.links if self.service is not None else ():
            if link.member.isdigit():
                out[int(link.member)] = max(out.get(int(link.member), 0), link.acked or 0)
        return out

    def slaves(self) -> list[dict[str, object]]:
        """Each connected slave's address, ack and lag (the HA service's status)."""
        return self.service.status() if self.service is not None else []

    def _waited(self) -> set[int]:
        return (set(self.members) - {self.me}) | set(self.joining)

    def confirm_offset(self, acks: dict[int, int] | None = None) -> int:
        """What every member holds (``acks``: :meth:`acked_by`, when the caller has it): readers
        may go this far without seeing anything a later master could lack."""
        acks = self.acked_by() if acks is None else acks
        end = self.store.log_end
        return min([end] + [acks.get(b, 0) for b in self.members if b != self.me])

    def slave_news(self) -> None:
        """A slave connected, acknowledged or dropped: sends and readers go as far as the
        members hold. Runs at every ack of a sync master: the acks are read once."""
        acks = self.acked_by()
        others = any(b != self.me for b in self.members)
        self.store.set_readable_limit(self.confirm_offset(acks) if others else None)
        waited = self._waited()
        if waited:
            self.acks.advance(min(acks.get(b, 0) for b in waited))
        self._news.set()

    def told(self, members: frozenset[int], epoch: int) -> None:
        """The controller's SyncStateSet of this master epoch (a heartbeat's answer)."""
        if epoch > self.epoch:
            self.members, self.epoch = members, epoch
            self.check_enough()
            self.slave_news()

    def deposed(self) -> None:
        """No longer master: what no member confirmed stays unread (cut when it follows the new one)."""
        self._deposed = True
        self.store.set_replicas_short(None)  # a replica's own refusal takes over
        self.acks.wake()

    def check_enough(self) -> None:
        """Refuse puts while the set is smaller than min_in_sync_replicas (RocketMQ's check), and
        while the controller has not answered for a heartbeat timeout: by then it may have
        elected another master (RocketMQ's master keeps acknowledging; an async one loses it all)."""
        silent = self.link.silent_s
        if silent > self.controller_timeout_s:
            reason: str | None = (f"this master has not reached the controller for {silent:.1f} s: another may "
                                  "have been elected")
        elif len(self.members) < self.min_in_sync:
            reason = f"the SyncStateSet holds {len(self.members)} broker(s), min_in_sync_replicas is {self.min_in_sync}"
        else:
            reason = None
        self.store.set_replicas_short(reason)

    async def wait_all_acked(self, end: int, timeout_s: float) -> Replicated:
        if not self._waited():
            return Replicated.OK
        done = await self.acks.wait(end, timeout_s, lambda: self._deposed)
        if self._deposed:
            return Replicated.LOST_LEADERSHIP
        return Replicated.OK if done else Replicated.TIMEOUT

    async def run(self) -> None:
        self.check_enough()
        self.slave_news()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.acks.tick)
            while not self._deposed:
                with trio.move_on_after(CHECK_INTERVAL_S):
                    await self._news.wait()
                self._news = trio.Event()
                self.check_enough()
                await self._adjust()

    async def _adjust(self) -> None:
        service = self.service
        if service is None:
            return
        acks, end, now = self.acked_by(), self.store.log_end, trio.current_time()
        lag = {b: service.timeline.lag_s(a, end, now) for b, a in acks.items()}
        heard = {int(link.member): link.last_heard for link in service.links if link.member.isdigit()}
        drop = {b for b in self.members if b != self.me and (b not in acks or lag[b] > self.catchup_max_s
                                                             or now - heard.get(b, now) > SLAVE_SILENT_S)}
        for b in list(self.joining):
            if b not in acks or lag[b] > JOIN_LAG_S or now - heard.get(b, now) > SLAVE_SILENT_S:
                del self.joining[b]
        for b in acks:
            if b not in self.members and b not in self.joining and lag[b] <= JOIN_LAG_S \
                    and now - heard.get(b, now) <= SLAVE_SILENT_S:
                self.joining[b] = self.confirm_offset()
        ready = {b for b, at in self.joining.items() if acks.get(b, -1) >= at}
        wanted = (self.members - drop) | ready
        if wanted == self.members:
            return
        try:
            members, epoch = await self.link.alter_sync_state_set(self.master_epoch, wanted, self.epoch)
        except AlterRefused as exc:
            log.warning("SyncStateSet %s -> %s refused (%s): %s", sorted(self.members), sorted(wanted), exc.code, exc)
            await trio.sleep(CHECK_INTERVAL_S)
            return
        self.alters += 1
        log.info("SyncStateSet %s -> %s (epoch %d)", sorted(self.members), sorted(members), epoch)
        self.members, self.epoch = members, epoch
        self.check_enough()
        for b in ready:
            self.joining.pop(b, None)
        self.slave_news()
