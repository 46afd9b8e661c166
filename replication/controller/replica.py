"""A broker under a controller (RocketMQ 5's controller mode, the broker's side): its role comes
from the controller, not from its id, and changes at run time.

```
 controller --role (notice, heartbeat answer)--> told() --> the role task:
   master: store WRITER, epoch file += (master epoch, log end), HA service on the HA port
           (each slave's link starts with its broker id and this master's epochs), and the
           SyncStateSet kept (sync_state_set.SyncStateSetKeeper)
   slave:  store REPLICA, HA client to the master's HA port; its link's preface gives the
           master's epochs: cut this log at the consistent point, then copy; the master's
           epochs enter this epoch file as the copied log reaches them
```

A newer master epoch supersedes the running role at once: a master that is told of another
stops taking writes before anything else (its waiting sends end LOST_LEADERSHIP). In ``sync``
mode a send waits for every member of the SyncStateSet (RocketMQ's allAckInSyncStateSet).
The master registers in routes as broker id 0, a slave under its own id (a configured id 0
serving as slave under the group's highest id + 1), as RocketMQ's brokers do.
"""

from __future__ import annotations

import dataclasses
import logging

import orjson
import trio

from core.addresses import own_loopback
from core.broker.replication import ControllerProgress, ReplicaLag, Replicated, ReplicationMetrics
from core.config import Config
from core.node_specs import BrokerNode
from core.store.epoch_checkpoint import EpochCheckpoint, note_master_epoch
from core.store.interfaces import ReplicatedStore
from core.store.store_types import StoreRole
from formats.epoch_file import EpochEntry
from replication.controller.controller_link import BeatStatus, ControllerLink, RoleInfo
from replication.controller.epochs import consistent_point
from replication.controller.ha_preface import greet_master, greet_slave
from replication.controller.sync_state_set import SyncStateSetKeeper
from replication.dledger.strategy import raft_address
from replication.errors import ProtocolError
from replication.master_slave.ha_client import HAClient
from replication.master_slave.ha_service import HAService
from replication.master_slave.handshake import master_gate, slave_pass
from replication.member_keys import Membership

log = logging.getLogger(__name__)

HA_HEARTBEAT_MS = 100
MASTER_SILENT_S = 0.5  # a 300 ms stall of the master stays under it; a partition does not


class ControllerReplication:
    """One broker of a group whose master the controller elects."""

    def __init__(self, node: BrokerNode, config: Config, store: ReplicatedStore, *, sync: bool) -> None:
        self.node = node
        self.config = config
        self.store = store
        self.mode = "sync" if sync else "async"
        self._sync = sync
        # under a controller the HA link beats often: a slave that hears nothing from its master
        # for MASTER_SILENT_S tells the controller, which elects sooner than a heartbeat timeout
        self.settings = dataclasses.replace(config.replication, ha_heartbeat_interval_ms=min(
            config.replication.ha_heartbeat_interval_ms, HA_HEARTBEAT_MS))
        self.sync_timeout_s = config.store.sync_flush_timeout_ms / 1000
        self.members = {b.id: b for b in config.brokers if b.name == node.name}
        self.slave_id = node.id or max(self.members) + 1
        self.epochs = EpochCheckpoint(store.root)
        self._membership = Membership.from_config(config)
        self.link = ControllerLink(node, config.cluster.name, config.namesrv_addresses,
                                   self.settings.controller_heartbeat_interval_ms, status=self._status,
                                   told=self.told, confirmed=self._master_confirmed,
                                   credentials=config.acl.credentials(),
                                   source_host=own_loopback(node.listen))
        self.role: RoleInfo | None = None  # what the running role task acts on
        self._latest: RoleInfo | None = None  # the newest the controller said
        self._news = trio.Event()
        self._role_changed = trio.Event()
        self.is_master = False
        self.keeper: SyncStateSetKeeper | None = None
        self.client: HAClient | None = None
        self._pending_epochs: list[EpochEntry] = []
        self._agreed_epoch = -1  # the master epoch whose log this replica agrees with (after its cut)
        self.roles_taken = 0
        store.set_role(StoreRole.REPLICA, f"broker {node.node} waits for the controller to elect its group's master")

    # ------------------------------------------------------------------ Replication

    @property
    def writable(self) -> bool:
        return self.is_master

    @property
    def waits_for_replicas(self) -> bool:
        return self._sync and self.is_master

    @property
    def broker_id(self) -> int:
        return 0 if self.is_master else self.slave_id

    @property
    def master_missing(self) -> bool:
        return not self.is_master and (self.client is None or self.client.master_ha is None)

    async def wait_role_changed(self) -> None:
        await self._role_changed.wait()

    async def serve(self, ha_listen: str, *, task_status: trio.TaskStatus[str | None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.link.run)
            nursery.start_soon(self._run_roles, ha_listen)
            task_status.started(ha_listen)

    def master_learned(self, master_addr: str | None, ha_addr: str | None) -> None:
        pass  # the controller names the master, not the name servers

    async def wait_replicated(self, phys_offset: int, end_offset: int) -> Replicated:
        keeper = self.keeper
        if keeper is None:
            return Replicated.LOST_LEADERSHIP
        return await keeper.wait_all_acked(end_offset, self.sync_timeout_s)

    def transfer_leadership(self, target: str) -> str | None:
        return "under a controller, hand a group over with `mqctl failover GROUP --to ID`"

    def runtime_info(self) -> dict[str, str]:
        role = self._latest or self.role  # the newest word: a slave's SyncStateSet changes under it
        info = {"haMode": self.mode, "haController": "true", "haRole": "master" if self.is_master else "slave",
                "haMasterEpoch": str(role.master_epoch if role else 0),
                "haSyncStateSet": orjson.dumps(sorted(role.sync_state_set) if role else []).decode(),
                "haEpochs": orjson.dumps([[e.epoch, e.start_offset] for e in self.epochs.entries]).decode()}
        if self.keeper is not None:
            info["haSyncStateSet"] = orjson.dumps(sorted(self.keeper.members)).decode()
            info["haSlaves"] = orjson.dumps(self.keeper.slaves()).decode()
        if self.client is not None:
            info.update(haMasterHaAddr=self.client.master_ha or "", haConnected=str(self.client.connected).lower(),
                        haLocalAddr=self.client.local_addr or "", haRefused=self.client.refused or "",
                        haTruncatedBytes=str(self.client.truncated_bytes))
        return info

    def metrics(self) -> ReplicationMetrics:
        keeper = self.keeper
        progress = ControllerProgress(self.role.master_epoch if self.role else 0,
                                      len(keeper.members) if keeper is not None else 0, self.roles_taken)
        if keeper is None:
            return ReplicationMetrics("slave", controller=progress)
        lags = tuple(ReplicaLag(str(s["addr"]), int(str(s["lagBytes"])), float(str(s["lagSeconds"])))
                     for s in keeper.slaves())
        return ReplicationMetrics("master", lags, controller=progress)

    # ------------------------------------------------------------------ the controller's word

    def told(self, info: RoleInfo) -> None:
        """Role information from the controller; a newer master epoch (or the same epoch's
        newer SyncStateSet) supersedes what runs."""
        latest = self._latest
        if latest is not None and (info.master_epoch, info.sync_state_set_epoch) <= (
                latest.master_epoch, latest.sync_state_set_epoch):
            return
        self._latest = info
        if self.keeper is not None and latest is not None and info.master_epoch == latest.master_epoch:
            self.keeper.told(info.sync_state_set, info.sync_state_set_epoch)
            return
        if self.is_master and info.master_id != self.node.id:
            self._step_down()  # fenced: no write more, before anything else
        self._news.set()

    def _status(self) -> BeatStatus:
        keeper = self.keeper
        client = self.client
        return BeatStatus(self.epochs.last_epoch, self.store.log_end,
                          keeper.confirm_offset() if keeper is not None else self.store.log_end,
                          ha_link_down=client is not None and client.silent_s > MASTER_SILENT_S)

    async def _run_roles(self, ha_listen: str) -> None:
        while True:
            info = self._latest
            if info is None or info is self.role or info.master_id is None:
                if info is not None and info.master_id is None and self.is_master:
                    self._step_down()
                await self._news.wait()
                self._news = trio.Event()
                continue
            self.role = info
            self._news = trio.Event()
            async with trio.open_nursery() as nursery:
                if info.master_id == self.node.id:
                    nursery.start_soon(self._be_master, info, ha_listen)
                else:
                    nursery.start_soon(self._be_slave, info)
                await self._superseded(info)
                nursery.cancel_scope.cancel()
            if self.is_master and (self._latest is None or self._latest.master_id != self.node.id):
                self._step_down()

    async def _superseded(self, info: RoleInfo) -> None:
        while self._latest is None or self._latest.master_epoch <= info.master_epoch:
            await self._news.wait()
            self._news = trio.Event()

    def _step_down(self) -> None:
        self.store.set_role(StoreRole.REPLICA, f"broker {self.node.node} is no longer its group's master")
        self.is_master = False
        if self.keeper is not None:
            self.keeper.deposed()
            self.keeper = None
        self._changed()

    def _changed(self) -> None:
        self.roles_taken += 1
        changed, self._role_changed = self._role_changed, trio.Event()
        changed.set()

    # ------------------------------------------------------------------ master

    async def _be_master(self, info: RoleInfo, ha_listen: str) -> None:
        store = self.store
        store.set_readable_limit(None)  # its log is the group's now; the keeper limits what follows
        store.set_role(StoreRole.WRITER)  # cuts a partial tail first
        if info.master_epoch > self.epochs.last_epoch:
            await trio.to_thread.run_sync(self.epochs.begin, info.master_epoch, store.log_end)
        await trio.to_thread.run_sync(note_master_epoch, store.root, info.master_epoch)
        gate = master_gate(self._membership, self.node.name) if self._membership is not None else None
        keeper = SyncStateSetKeeper(self.node.id, info, self.link, self.settings, store)
        service = HAService(store, self.settings, self.sync_timeout_s, gate=gate,
                            preface=lambda stream: greet_slave(stream, self._epochs_now),
                            on_slave_news=keeper.slave_news)
        keeper.service = service
        self.keeper = keeper
        self.client = None
        self.is_master = True
        log.warning("broker %s: master of %s, epoch %d, SyncStateSet %s", self.node.node, self.node.name,
                    info.master_epoch, sorted(info.sync_state_set))
        self._changed()
        async with trio.open_nursery() as nursery:
            await nursery.start(service.serve, ha_listen)
            nursery.start_soon(keeper.run)

    def _epochs_now(self) -> tuple[list[EpochEntry], int]:
        return list(self.epochs.entries), self.store.log_end

    # ------------------------------------------------------------------ slave

    async def _be_slave(self, info: RoleInfo) -> None:
        if self.is_master:
            self._step_down()
        master = self.members.get(info.master_id) if info.master_id is not None else None
        if master is None:
            log.error("broker %s: the controller names broker %s master of %s, which conf.toml does not have",
                      self.node.node, info.master_id, self.node.name)
            return
        prover = slave_pass(self._membership, self.node.name, self.node.id) if self._membership is not None else None
        client = HAClient(self.store, self.settings, prover=prover, source_host=own_loopback(self.node.listen),
                          preface=self._follow_epochs, on_appended=self._appended)
        client.set_master(raft_address(master))
        self.client = client
        log.info("broker %s: slave of broker %d (epoch %d)", self.node.node, master.id, info.master_epoch)
        self._changed()
        await client.run()

    async def _follow_epochs(self, stream: trio.SocketStream) -> None:
        """An HA link's preface: cut this log where it and the master's agree, and note the
        master's later epochs to take as the copy reaches them."""
        entries, master_end = await greet_master(stream, self.node.id)
        local_end = self.store.log_end
        point = consistent_point(self.epochs.entries, local_end, entries, master_end)
        if point is None:
            raise ProtocolError("this log shares no epoch with the master's: wipe this broker's store to copy "
                                f"the master afresh (epochs here {self.epochs.entries}, there {entries})")
        if point < local_end:
            cut = self.store.truncate(point)
            log.warning("broker %s: cut %d bytes past offset %d that master epoch history does not hold",
                        self.node.node, cut, point)
        self.epochs.truncate(point)
        self.store.set_readable_limit(point)  # past it, readers wait for the master's confirm offset
        self._agreed_epoch = self.role.master_epoch if self.role is not None else -1
        self._pending_epochs = [e for e in entries if e.epoch > self.epochs.last_epoch]
        self._appended(self.store.log_end)

    def _master_confirmed(self, master_epoch: int, offset: int) -> None:
        """The master's confirm offset: a slave that agrees with that master's log lets readers
        go as far (never one still holding a tail the master may not have)."""
        if not self.is_master and master_epoch == self._agreed_epoch:
            self.store.set_readable_limit(offset)

    def _appended(self, log_end: int) -> None:
        # an epoch that began where this log ends is taken too (it may hold nothing yet): a slave
        # that copied nothing of a master's epoch still shares it with the next master
        while self._pending_epochs and self._pending_epochs[0].start_offset <= log_end:
            entry = self._pending_epochs.pop(0)
            self.epochs.begin(entry.epoch, entry.start_offset)
