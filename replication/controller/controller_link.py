"""A broker's line to its controller (RocketMQ's ReplicasManager and BrokerOuterAPI, the
controller half): register, heartbeat every ``controller_heartbeat_interval_ms``, take the role
notices, ask for SyncStateSet changes.

The controller members are the name servers; only their leader answers, and a member that is
not says where the leader is, so the link follows CONTROLLER_NOT_LEADER's
``controllerLeaderAddress`` (or tries the next name server). Every heartbeat's answer carries
the group's master as the controller has it (ours: RocketMQ's carries nothing), so a broker
that missed a NOTIFY_BROKER_ROLE_CHANGED learns its role at the next beat; the notice itself
comes on the same connection, at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from core.errors import RemotingError
from core.node_specs import BrokerNode
from core.remoting.client import RemotingClient, open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.controller_headers import RoleNotice, parse_sync_state_set, sync_state_set_body
from core.remoting.header_fields import HeaderFieldError, as_int
from core.remoting.signing import Credentials

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class RoleInfo:
    """A group's master as the controller told it."""

    master_id: int | None
    master_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class BeatStatus:
    """What a heartbeat tells the controller of this broker."""

    epoch: int
    max_offset: int
    confirm_offset: int
    ha_link_down: bool


class AlterRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


class ControllerLink:
    """One broker's registration, heartbeats and role notices."""

    def __init__(self, node: BrokerNode, cluster: str, controllers: list[str], interval_ms: int, *,
                 status: Callable[[], BeatStatus], told: Callable[[RoleInfo], None],
                 confirmed: Callable[[int, int], None] = lambda epoch, offset: None,
                 credentials: Credentials | None = None, source_host: str | None = None) -> None:
        """``status``: this broker's epoch and log at each beat; ``told``: every role
        information the controller gives (notices and heartbeat answers, possibly repeated);
        ``confirmed``: the master's confirm offset of a master epoch, as its heartbeats report it."""
        self.node = node
        self.cluster = cluster
        self.controllers = controllers
        self.interval_s = interval_ms / 1000
        self._status = status
        self._told = told
        self._confirmed = confirmed
        self._credentials = credentials
        self._source_host = source_host
        self.leader = controllers[0]
        self.registered = False
        self._answered_at = trio.current_time()  # the last heartbeat or registration the leader answered
        self.client: RemotingClient | None = None

    @property
    def silent_s(self) -> float:
        """Seconds since the controller's leader last answered this broker's heartbeat."""
        return trio.current_time() - self._answered_at

    def process(self, request: RemotingCommand, conn: Any) -> RemotingCommand | None:
        """Requests the controller sends on this broker's connection: its role notices."""
        if request.code != RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            return request.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request {request.code} not supported here")
        try:
            notice = RoleNotice.of(request)
            members, epoch = parse_sync_state_set(request.body)
        except HeaderFieldError as exc:
            log.warning("bad role notice from %s: %s", conn.remote, exc)
            return None
        self._told(RoleInfo(None if notice.master_broker_id < 0 else notice.master_broker_id, notice.master_address,
                            notice.master_epoch, members, epoch))
        return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_remoting_client(self, credentials=self._credentials, source_host=self._source_host) as client:
            self.client = client
            task_status.started()
            while True:
                reply = await self._beat() if self.registered else await self._register()
                if reply is not None and reply.code == ResponseCode.SUCCESS:
                    self._answered_at = trio.current_time()
                    self._told_by(reply)
                elif reply is not None and reply.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                    self.registered = False
                    continue
                await trio.sleep(self.interval_s)

    async def _register(self) -> RemotingCommand | None:
        reply = await self.ask(RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": self.cluster, "brokerName": self.node.name, "brokerId": str(self.node.id),
            "brokerAddress": self.node.registered_address})
        if reply is not None and reply.code == ResponseCode.SUCCESS:
            self.registered = True
            log.info("broker %s registered with the controller at %s", self.node.node, self.leader)
            await self._beat()  # at once: its liveness counts from now
        return reply

    async def _beat(self) -> RemotingCommand | None:
        s = self._status()
        return await self.ask(RequestCode.BROKER_HEARTBEAT, {
            "clusterName": self.cluster, "brokerName": self.node.name, "brokerId": str(self.node.id),
            "brokerAddr": self.node.registered_address, "epoch": str(s.epoch), "maxOffset": str(s.max_offset),
            "confirmOffset": str(s.confirm_offset), "heartbeatTimeoutMills": str(int(self.interval_s * 15_000)),
            "haLinkDown": "true" if s.ha_link_down else "false"})

    def _told_by(self, reply: RemotingCommand) -> None:
        try:
            ext = reply.ext_fields
            members, epoch = parse_sync_state_set(reply.body)
            master = as_int(ext, "masterBrokerId", -1, bits=32)
            master_epoch = as_int(ext, "masterEpoch", 0, bits=32)
            self._told(RoleInfo(None if master < 0 else master, ext.get("masterAddress", ""),
                                master_epoch, members, epoch))
            if ext.get("confirmOffset"):
                self._confirmed(master_epoch, as_int(ext, "confirmOffset"))
        except HeaderFieldError as exc:
            log.warning("bad controller answer: %s", exc)

    async def alter_sync_state_set(self, master_epoch: int, members: frozenset[int],
                                   epoch: int) -> tuple[frozenset[int], int]:
        """Ask for SyncStateSet ``members`` (its current epoch ``epoch``); the new set and epoch,
        or :class:`AlterRefused`."""
        reply = await self.ask(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": self.node.name, "masterBrokerId": str(self.node.id), "masterEpoch": str(master_epoch)},
            sync_state_set_body(members, epoch))
        if reply is None:
            raise AlterRefused(ResponseCode.CONTROLLER_NOT_LEADER, "no controller answered")
        if reply.code != ResponseCode.SUCCESS:
            raise AlterRefused(reply.code, reply.remark or "")
        try:
            return parse_sync_state_set(reply.body)
        except HeaderFieldError as exc:
            raise AlterRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None

    async def ask(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand | None:
        """``code`` to the controller's leader (following where the members say it is, at most
        once round them); None when none answered as leader."""
        assert self.client is not None
        for _ in range(len(self.controllers) + 1):
            request = RemotingCommand(code=code, ext_fields=dict(fields), body=body)
            try:
                reply = await self.client.invoke(self.leader, request, ANSWER_TIMEOUT_S)
            except (RemotingError, OSError) as exc:
                log.debug("controller %s: %s", self.leader, exc)
                self.client.drop(self.leader)
                self._next_controller(None)
                continue
            if reply.code != ResponseCode.CONTROLLER_NOT_LEADER:
                return reply
            self._next_controller(reply.ext_fields.get("controllerLeaderAddress"))
        return None

    def _next_controller(self, hint: str | None) -> None:
        if hint and hint in self.controllers and hint != self.leader:
            self.leader = hint
        else:
            self.leader = self.controllers[(self.controllers.index(self.leader) + 1) % len(self.controllers)]
