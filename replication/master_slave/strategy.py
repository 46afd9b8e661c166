"""Master-slave replication as the broker sees it (core.broker.replication.Replication): the
master runs the HA service, a slave its HA client; in sync mode a send waits for a slave
(:mod:`replication.master_slave.group_transfer`)."""

from __future__ import annotations

import orjson
import trio

from core.addresses import own_loopback
from core.broker.replication import ReplicaLag, Replicated, ReplicationMetrics
from core.config import Config
from core.node_specs import BrokerNode
from core.store.interfaces import ReplicatedStore
from core.store.store_types import StoreRole
from replication.master_slave.ha_client import HAClient
from replication.master_slave.ha_service import HAService
from replication.master_slave.handshake import master_gate, slave_pass
from replication.member_keys import Membership


class MasterSlaveReplication:
    """One node of a master-slave group: broker id 0 is the master, any other id a slave."""

    def __init__(self, node: BrokerNode, config: Config, store: ReplicatedStore, *, sync: bool) -> None:
        self.node = node
        self.mode = "sync" if sync else "async"
        self.store = store
        self.settings = config.replication
        self.sync_timeout_s = config.store.sync_flush_timeout_ms / 1000
        self.is_master = node.is_master
        membership = Membership.from_config(config)  # ACL on: the HA link starts with a handshake
        if self.is_master:
            gate = master_gate(membership, node.name) if membership is not None else None
            self.service: HAService | None = HAService(store, self.settings, self.sync_timeout_s, gate=gate)
            self.client: HAClient | None = None
        else:
            prover = slave_pass(membership, node.name, node.id) if membership is not None else None
            self.service = None
            self.client = HAClient(store, self.settings, prover=prover, source_host=own_loopback(node.listen))
        self._sync = sync
        if not self.is_master:
            store.set_role(StoreRole.REPLICA,
                           f"broker {node.name} id {node.id} is a slave: send to its master (broker id 0)")

    @property
    def writable(self) -> bool:
        return self.is_master

    @property
    def waits_for_replicas(self) -> bool:
        return self._sync and self.is_master

    @property
    def broker_id(self) -> int:
        return self.node.id

    async def wait_role_changed(self) -> None:
        await trio.sleep_forever()  # ids decide the roles, once

    @property
    def master_missing(self) -> bool:
        return self.client is not None and self.client.master_ha is None

    async def serve(self, ha_listen: str, *, task_status: trio.TaskStatus[str | None] = trio.TASK_STATUS_IGNORED) -> None:
        if self.service is not None:
            await self.service.serve(ha_listen, task_status=task_status)
            return
        assert self.client is not None
        task_status.started(None)
        await self.client.run()

    def master_learned(self, master_addr: str | None, ha_addr: str | None) -> None:
        if self.client is not None:
            self.client.set_master(ha_addr)

    async def wait_replicated(self, phys_offset: int, end_offset: int) -> Replicated:
        assert self.service is not None
        return await self.service.transfers.wait_transfer(end_offset)

    def transfer_leadership(self, target: str) -> str | None:
        return (f"replication.mode = {self.mode!r} has no elected leader: broker id 0 is the master "
                "(leadership transfer needs replication.mode = 'dledger')")

    def runtime_info(self) -> dict[str, str]:
        info = {"haMode": self.mode, "haRole": "master" if self.is_master else "slave"}
        if self.service is not None:
            info["haSlaves"] = orjson.dumps(self.service.status()).decode()
            info["haRejectedPeers"] = str(self.service.rejected)
        if self.client is not None:
            info.update(haMasterHaAddr=self.client.master_ha or "",
                        haConnected=str(self.client.connected).lower(), haLocalAddr=self.client.local_addr or "",
                        haRefused=self.client.refused or "", haTruncatedBytes=str(self.client.truncated_bytes))
        return info

    def metrics(self) -> ReplicationMetrics:
        if self.service is None:
            return ReplicationMetrics("slave")
        lags = tuple(ReplicaLag(str(s["addr"]), int(s["lagBytes"]), float(s["lagSeconds"]))  # type: ignore[arg-type]
                     for s in self.service.status())
        return ReplicationMetrics("master", lags)
