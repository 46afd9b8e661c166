"""The proxy's view of the broker groups: each group's members by broker id, from the name
servers, and which member to send to now.

The name servers learn a new master or raft leader at once (a broker registers as soon as its
role changes; a broker whose connection closes is dropped), so the view asks them again as soon
as a request tells it something changed: an upstream connection that closed, a timeout, a
member that refuses writes. It then looks every ``FAST_REFRESH_S`` until the group has a master
again, and every ``STEADY_REFRESH_S`` otherwise (new groups, planned leadership changes;
``ELECTING_REFRESH_S`` where groups elect: a master cut off by a partition fails no request
until a timeout, and its successor registers within a second). A member that failed is not
chosen as master for ``DISTRUST_S``, even while a name server still lists it. When a group's
master changes, ``on_master_moved`` hears of it (the forwarder closes its connections to the
old one, so writes waiting there go to the new one at once).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import orjson
import trio

from core.errors import RemotingError
from core.node_specs import MASTER_ID
from core.remoting.client import RemotingClient
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

STEADY_REFRESH_S = 2.0
ELECTING_REFRESH_S = 0.25
FAST_REFRESH_S = 0.05
HURRY_S = 10.0  # how long a suspicion keeps the fast pace (a raft election takes a few seconds)
DISTRUST_S = 3.0
NAMESRV_TIMEOUT_S = 1.0

Members = dict[int, str]  # broker id -> address


def parse_cluster_info(body: bytes) -> dict[str, Members]:
    """GET_BROKER_CLUSTER_INFO's ``brokerAddrTable`` as group -> broker id -> address."""
    doc: dict[str, Any] = orjson.loads(body)
    table = doc.get("brokerAddrTable") or {}
    return {name: {int(i): str(a) for i, a in (data.get("brokerAddrs") or {}).items()}
            for name, data in table.items() if isinstance(data, dict)}


class ClusterView:
    """Group members as the name servers last said, less the members that just failed."""

    def __init__(self, client: RemotingClient, namesrv: list[str], *, steady_refresh_s: float = STEADY_REFRESH_S,
                 on_master_moved: Callable[[str, str], None] | None = None) -> None:
        """``on_master_moved(group, old master)``: called when a refresh finds another master."""
        self._client = client
        self._namesrv = list(namesrv)
        self._steady_s = steady_refresh_s
        self.on_master_moved = on_master_moved
        self.groups: dict[str, Members] = {}
        self._failed: dict[str, float] = {}  # address -> when a request to it failed
        self._changed = trio.Event()
        self._hurry = trio.Event()
        self._hurry_until = -math.inf
        self.refreshes = 0
        self.failovers: dict[str, int] = {}  # group -> times its master changed or went
        self.writes_waiting = 0  # requests waiting for their group to have a master again

    # ------------------------------------------------------------------ reading

    def master(self, group: str) -> str | None:
        """The member to write to now: the group's id 0, unless it just failed."""
        address = self.groups.get(group, {}).get(MASTER_ID)
        return None if address is None or self._distrusted(address) else address

    def members(self, group: str) -> list[str]:
        """Every member to read from, the master first, then the slaves by id; failed ones last."""
        ordered = [a for _, a in sorted(self.groups.get(group, {}).items())]
        return sorted(ordered, key=self._distrusted)  # stable: keeps id order within each part

    def _distrusted(self, address: str) -> bool:
        failed = self._failed.get(address)
        return failed is not None and trio.current_time() - failed < DISTRUST_S

    # ------------------------------------------------------------------ being told

    def suspect(self, group: str, address: str) -> None:
        """A request to ``address`` of ``group`` failed the way a dead or demoted member fails:
        stop choosing it, and ask the name servers again now and often."""
        self._failed[address] = trio.current_time()
        log.info("%s of group %s failed: looking for the group's master", address, group)
        self._hurry_until = trio.current_time() + HURRY_S
        self._hurry.set()
        self._changed.set()
        self._changed = trio.Event()

    async def wait_master(self, group: str, deadline: float) -> str | None:
        """The group's master, waiting until ``deadline`` (trio time) for one to appear."""
        if (address := self.master(group)) is not None:
            return address
        self.writes_waiting += 1
        try:
            while (address := self.master(group)) is None:
                if trio.current_time() >= deadline:
                    return None
                self._hurry_until = max(self._hurry_until, deadline)
                self._hurry.set()
                changed = self._changed
                with trio.move_on_at(min(deadline, trio.current_time() + DISTRUST_S)):
                    await changed.wait()
            return address
        finally:
            self.writes_waiting -= 1

    # ------------------------------------------------------------------ asking

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Refresh until cancelled; ``started`` after the first answer (or first attempt)."""
        await self.refresh()
        task_status.started()
        while True:
            pace = FAST_REFRESH_S if trio.current_time() < self._hurry_until else self._steady_s
            with trio.move_on_after(pace):
                await self._hurry.wait()
            self._hurry = trio.Event()
            await self.refresh()

    async def refresh(self) -> bool:
        """Ask the name servers (the first that answers); True when the view changed."""
        for address in self._namesrv:
            try:
                resp = await self._client.invoke(address, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO),
                                                 NAMESRV_TIMEOUT_S)
            except RemotingError as exc:
                log.debug("name server %s: %s", address, exc)
                continue
            if resp.code != ResponseCode.SUCCESS or not resp.body:
                continue
            try:
                groups = parse_cluster_info(resp.body)
            except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
                log.warning("name server %s sent a cluster table that does not parse: %s", address, exc)
                continue
            self.refreshes += 1
            if groups == self.groups:
                return False
            moved = []
            for group, members in self.groups.items():
                old = members.get(MASTER_ID)
                if old is not None and groups.get(group, {}).get(MASTER_ID) != old:
                    self.failovers[group] = self.failovers.get(group, 0) + 1
                    moved.append((group, old))
            self.groups = groups
            if self.on_master_moved is not None:
                for group, old in moved:
                    self.on_master_moved(group, old)
            self._changed.set()
            self._changed = trio.Event()
            return True
        return False
