"""RocketMQ 5's controller as one member of a group of name servers (the ``ha_controller``
plugin's :class:`core.namesrv.controller.HostedController`).

Every name server of the cluster is a member; their raft group (the project's raft engine, on
each name server's port + 1) replicates the controller's events, so the death of a member loses
nothing. Only the raft leader answers: the others say CONTROLLER_NOT_LEADER and where the leader
is (``controllerLeaderAddress``), and the brokers go there.

```
 broker --REGISTER / HEARTBEAT (every 100 ms) / ALTER_SYNC_STATE_SET--> leader
 leader: judge by the rules (group_state) -> one event -> raft -> applied on every member
         -> answer;  a new master: NOTIFY_BROKER_ROLE_CHANGED to every broker of the group, on
         the connection it heartbeats on
 scan (every 50 ms, leader): a group whose master is not alive (liveness) elects from its
         SyncStateSet
```

Requests that change the state are judged and applied one at a time (the elections' lock), so
two never pass against the same state.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from core.addresses import own_loopback, shifted
from core.clock import now_ms
from core.config import Config
from core.node_specs import NameServerNode
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.controller_headers import (
    AlterSyncStateSetHeader,
    ApplyBrokerIdHeader,
    CleanBrokerDataHeader,
    ElectMasterHeader,
    GroupHeader,
    HeartbeatHeader,
    NextBrokerIdHeader,
    RegisterHeader,
    checked_group,
    parse_group_names,
    parse_ids,
    parse_sync_state_set,
)
from core.remoting.header_fields import HeaderFieldError
from replication.controller import replies
from replication.controller.elections import Elections
from replication.controller.event_codec import encode_event
from replication.controller.group_state import (
    FIRST_MASTER_ID,
    Event,
    Refused,
    alter_sync_state_set,
    clean,
    register,
)
from replication.controller.liveness import LivenessSettings
from replication.controller.replicated_state import ControllerState
from replication.dledger.driver import RaftDriver
from replication.dledger.messages import Code
from replication.dledger.raft_node import Role
from replication.member_keys import Membership

log = logging.getLogger(__name__)

RAFT_GROUP = "controller"
SEGMENT_BYTES = 4 * 1024 * 1024
SCAN_INTERVAL_S = 0.05
NOTICE_TIMEOUT_S = 3.0

Handler = Callable[[RemotingCommand, Any], RemotingCommand | Awaitable[RemotingCommand]]


def _refusal(request: RemotingCommand, exc: HeaderFieldError | Refused) -> RemotingCommand:
    if isinstance(exc, Refused):
        return request.reply(exc.code, exc.remark)
    return request.reply(ResponseCode.CONTROLLER_INVALID_REQUEST, str(exc))


async def _answered(request: RemotingCommand, answer: Awaitable[RemotingCommand]) -> RemotingCommand:
    try:
        return await answer
    except (HeaderFieldError, Refused) as exc:
        return _refusal(request, exc)


class ControllerService:
    """One controller member: the raft member, the state it applies, and (while it leads) the
    brokers' liveness, the elections and the role notices."""

    def __init__(self, node: NameServerNode, config: Config, data_dir: Path,
                 clock: Callable[[], int] = now_ms) -> None:
        self.name = node.name
        self.cluster = config.cluster.name
        self.addresses = {ns.name: ns.address for ns in config.nameservers}
        self.listen = shifted(node.listen, 1)
        settings = config.replication
        self.unclean = settings.unclean_election
        self.liveness_settings = LivenessSettings(settings.controller_heartbeat_interval_ms,
                                                  settings.controller_heartbeat_timeout_ms)
        self.clock = clock
        self.state = ControllerState()
        self._confirmed: dict[str, tuple[int, int]] = {}  # group -> its master's (epoch, confirm offset)
        self.elections = Elections(self.state, self._append, self.liveness_settings, unclean=self.unclean, clock=clock)
        self.driver = RaftDriver(RAFT_GROUP, node.name, {ns.name: shifted(ns.address, 1) for ns in config.nameservers},
                                 data_dir / "controller", SEGMENT_BYTES, rng=random.Random(),
                                 on_commit=self._committed, membership=Membership.from_config(config),
                                 source_host=own_loopback(node.listen))
        self._handlers: dict[int, Handler] = {
            RequestCode.BROKER_HEARTBEAT: self._heartbeat,
            RequestCode.CONTROLLER_REGISTER_BROKER: self._register,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter,
            RequestCode.CONTROLLER_ELECT_MASTER: self._elect_request,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self._replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self._sync_state_data,
            RequestCode.CLEAN_BROKER_DATA: self._clean,
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self._next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self._apply_broker_id,
        }
        self._any_member: dict[int, Handler] = {
            RequestCode.CONTROLLER_GET_METADATA_INFO: self._metadata,
            RequestCode.GET_CONTROLLER_CONFIG: self._get_config,
            RequestCode.UPDATE_CONTROLLER_CONFIG: self._update_config,
        }

    # ------------------------------------------------------------------ HostedController

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._handlers) | frozenset(self._any_member)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.driver.run, self.listen)
            self._committed(self.driver.commit_index)  # what its log held, before it serves
            nursery.start_soon(self.elections.run, lambda: self.leading, lambda: self.driver.term)
            log.info("controller member %s: raft on %s", self.name, self.listen)
            task_status.started()

    def process(self, request: RemotingCommand, conn: Any) -> RemotingCommand | Awaitable[RemotingCommand]:
        try:
            if (handler := self._any_member.get(request.code)) is not None:
                answer = handler(request, conn)
            elif not self.leading:
                return self._not_leader(request)
            else:
                answer = self._handlers[request.code](request, conn)
        except (HeaderFieldError, Refused) as exc:
            return _refusal(request, exc)
        if isinstance(answer, RemotingCommand):
            return answer
        return _answered(request, answer)

    def connection_closed(self, conn: Any) -> None:
        self.elections.dropped(conn)

    def metrics(self) -> dict[str, float]:
        return {"rocketmq_controller_leader": float(self.leading),
                "rocketmq_controller_elections_total": float(self.elections.count),
                "rocketmq_controller_groups": float(len(self.state.groups))}

    # ------------------------------------------------------------------ leadership

    @property
    def leading(self) -> bool:
        """Leader of the raft group, with every entry of earlier terms committed and applied:
        its state is the whole state, so it may judge requests."""
        d = self.driver
        return (d.role is Role.LEADER and d.commit_index >= 0 and d.log.term_at(d.commit_index) == d.term
                and self.state.applied >= d.commit_index)

    def _committed(self, commit_index: int) -> None:
        self.state.apply_committed(self.driver.log, commit_index)

    def _not_leader(self, request: RemotingCommand) -> RemotingCommand:
        leader = self.driver.leader
        ext = {"controllerLeaderAddress": self.addresses[leader]} if leader in self.addresses else {}
        return request.reply(ResponseCode.CONTROLLER_NOT_LEADER, "The controller is not in leader state",
                             ext_fields=ext)

    async def _append(self, event: Event) -> None:
        """Replicate ``event``; once this returns, every member applies it and this one has."""
        results = await self.driver.append([encode_event(event)])
        if isinstance(results, Code) or results[0].code is not Code.SUCCESS:
            raise Refused(ResponseCode.CONTROLLER_NOT_LEADER, "the controller lost its leadership")

    # ------------------------------------------------------------------ brokers

    def _heartbeat(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        h = HeartbeatHeader.of(request)
        group = checked_group(h.broker_name)
        state = self.state.groups.get(group)
        if state is None or h.broker_id not in state.replicas:
            return request.reply(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                                 f"broker {h.broker_id} of {group} is not registered")
        now = self.clock()
        before = self.elections.liveness.brokers.get(group, {}).get(h.broker_id)
        down_since = (before.master_link_down_since_ms if before and before.master_link_down_since_ms is not None
                      else now) if h.ha_link_down else None
        self.elections.liveness.beat(group, h.broker_id, now, epoch=max(h.epoch, 0), max_offset=max(h.max_offset, 0),
                           priority=h.election_priority, master_link_down_since_ms=down_since)
        self.elections.links[(group, h.broker_id)] = conn
        if h.broker_id == state.master_id and h.epoch == state.master_epoch and h.confirm_offset >= 0:
            self._confirmed[group] = (state.master_epoch, h.confirm_offset)
        # ours: the group's master as the controller has it, so a broker that missed a notice
        # learns it at its next beat; and the master's confirm offset, how far its slaves may
        # let readers go
        fields = replies.master_fields(state)
        epoch, confirm = self._confirmed.get(group, (-1, -1))
        if epoch == state.master_epoch:
            fields["confirmOffset"] = str(confirm)
        return request.reply(ResponseCode.SUCCESS, "Heart beat success", ext_fields=fields,
                             body=replies.sync_state_set(state))

    async def _register(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        h = RegisterHeader.of(request)
        group = checked_group(h.broker_name)
        async with self.elections.lock:
            event = register(self.state.group(group), h.broker_id, h.broker_address)
            if event is not None:
                await self._append(event)
                log.info("controller: broker %d of %s registered at %s", h.broker_id, group, h.broker_address)
        state = self.state.group(group)
        return request.reply(ResponseCode.SUCCESS, ext_fields=replies.master_fields(state) | {
            "clusterName": h.cluster_name, "brokerName": group}, body=replies.sync_state_set(state))

    async def _alter(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        h = AlterSyncStateSetHeader.of(request)
        group = checked_group(h.broker_name)
        members, epoch = parse_sync_state_set(request.body)
        async with self.elections.lock:
            state = self.state.groups.get(group)
            if state is None:
                raise Refused(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"no broker group {group}")
            if members == state.sync_state_set and epoch == state.sync_state_set_epoch:
                raise Refused(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the SyncStateSet is that already")
            event = alter_sync_state_set(state, h.master_broker_id, h.master_epoch, members, epoch,
                                         self.elections.alive_ids(state))
            await self._append(event)
        log.info("controller: %s SyncStateSet %s (epoch %d)", group, sorted(event.sync_state_set),
                 event.sync_state_set_epoch)
        return request.reply(ResponseCode.SUCCESS, ext_fields={"newSyncStateSetEpoch": str(event.sync_state_set_epoch)},
                             body=replies.sync_state_set(self.state.group(group)))

    async def _elect_request(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        h = ElectMasterHeader.of(request)
        group = checked_group(h.broker_name)
        if group not in self.state.groups:
            raise Refused(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"no broker group {group}")
        prefer = h.broker_id if h.designate_elect else None
        try:
            await self.elections.elect(group, prefer)
        except Refused as exc:
            if exc.code is not ResponseCode.CONTROLLER_MASTER_STILL_EXIST:
                raise
            state = self.state.group(group)
            return request.reply(exc.code, exc.remark, ext_fields=replies.master_fields(state),
                                 body=replies.sync_state_set(state))
        state = self.state.group(group)
        if state.master_id is None:
            raise Refused(ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE if h.broker_id < 0
                          else ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, f"no live in-sync replica of {group}")
        return request.reply(ResponseCode.SUCCESS, ext_fields=replies.master_fields(state),
                             body=replies.elect_body(self.cluster, state))

    def _replica_info(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        group = checked_group(GroupHeader.of(request).broker_name)
        state = self.state.groups.get(group)
        if state is None:
            return request.reply(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        fields = {k: v for k, v in replies.master_fields(state).items() if k != "syncStateSetEpoch"}
        return request.reply(ResponseCode.SUCCESS, ext_fields=fields, body=replies.sync_state_set(state))

    def _sync_state_data(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        names = parse_group_names(request.body)
        states = [self.state.groups[n] for n in names if n in self.state.groups]
        return request.reply(ResponseCode.SUCCESS, body=replies.replicas_info(states, self.elections.alive))

    async def _clean(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        h = CleanBrokerDataHeader.of(request)
        group = checked_group(h.broker_name)
        ids = parse_ids(h.broker_controller_ids_to_clean)
        async with self.elections.lock:
            state = self.state.groups.get(group)
            if state is None:
                raise Refused(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"no broker group {group}")
            alive = frozenset() if h.is_clean_living_broker else self.elections.alive_ids(state)
            await self._append(clean(state, ids, alive))
        for broker_id in ids:
            self.elections.liveness.forget(group, broker_id)
        return request.reply(ResponseCode.SUCCESS)

    def _next_broker_id(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        h = NextBrokerIdHeader.of(request)
        state = self.state.groups.get(checked_group(h.broker_name))
        following = max(state.replicas) + 1 if state and state.replicas else FIRST_MASTER_ID
        return request.reply(ResponseCode.SUCCESS, ext_fields={"clusterName": h.cluster_name,
                                                               "brokerName": h.broker_name,
                                                               "nextBrokerId": str(following)})

    async def _apply_broker_id(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        h = ApplyBrokerIdHeader.of(request)
        group = checked_group(h.broker_name)
        address = h.register_check_code.split(";", 1)[0]
        async with self.elections.lock:
            state = self.state.group(group)
            taken = state.replicas.get(h.applied_broker_id)
            if taken is not None and taken != address:
                raise Refused(ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                              f"broker id {h.applied_broker_id} of {group} is {taken}'s")
            event = register(state, h.applied_broker_id, address)
            if event is not None:
                await self._append(event)
        return request.reply(ResponseCode.SUCCESS, ext_fields={"clusterName": h.cluster_name, "brokerName": group})

    # ------------------------------------------------------------------ any member

    def _metadata(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        leader = self.driver.leader
        fields = {"group": RAFT_GROUP, "isLeader": str(self.leading).lower(),
                  "peers": "".join(f"{n}:{shifted(a, 1)};" for n, a in self.addresses.items())}
        if leader in self.addresses:
            fields |= {"controllerLeaderId": leader, "controllerLeaderAddress": self.addresses[leader]}
        return request.reply(ResponseCode.SUCCESS, ext_fields=fields)

    def _get_config(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        s = self.liveness_settings
        text = (f"controllerDLegerGroup={RAFT_GROUP}\ncontrollerDLegerSelfId={self.name}\n"
                f"enableElectUncleanMaster={str(self.unclean).lower()}\nnotifyBrokerRoleChanged=true\n"
                f"heartbeatIntervalMills={s.heartbeat_interval_ms}\nheartbeatTimeoutMills={s.heartbeat_timeout_ms}\n")
        return request.reply(ResponseCode.SUCCESS, body=text.encode())

    def _update_config(self, request: RemotingCommand, conn: Any) -> RemotingCommand:
        return request.reply(ResponseCode.NO_PERMISSION, "the controller's settings come from conf.toml's "
                             "[replication]: change them with `mqctl config set` and restart the name servers")
