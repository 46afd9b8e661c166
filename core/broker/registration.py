"""Registering with every name server: at start, every ``register_interval_ms``, after a
topic change; unregistering on a graceful stop.

A registration names every topic, except right after topics were created or changed: then it
names only those and says ``incremental`` (RocketMQ 5's registerIncrementBrokerData), so a
create costs the name servers the same at 20,000 topics as at 20. A name server that does not
know the broker yet (restarted) answers an increment with ``wantFull``, and gets every topic at
once. A deletion is registered whole (an increment cannot say a topic went).
"""

from __future__ import annotations

import logging
import zlib
from typing import Protocol

import orjson
import trio

from core.broker.replication import Replication
from core.broker.tables.topics import TopicTable
from core.config import BrokerSettings
from core.errors import RemotingError
from core.node_specs import BrokerNode
from core.remoting.client import RemotingClient
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

MASTER_SEARCH_INTERVAL_S = 1.0


class RegisteringBroker(Protocol):
    """What registering with the name servers needs from the broker (``Broker`` is one)."""

    address: str
    cluster: str
    ha_address: str
    node: BrokerNode
    register_wanted: trio.Event
    replication: Replication
    settings: BrokerSettings
    topics: TopicTable

    def master_learned(self, master_addr: str | None, ha_addr: str | None) -> None: ...


def _ext(broker: RegisteringBroker) -> dict[str, str]:
    return {"brokerName": broker.node.name, "brokerAddr": broker.address, "clusterName": broker.cluster,
            "haServerAddr": broker.node.ha_advertise or broker.ha_address, "brokerId": str(broker.replication.broker_id)}


async def register_all(broker: RegisteringBroker, client: RemotingClient, namesrv: list[str], *,
                       changed: list[str] | None = None) -> int:
    """Register with each name server (``changed``: only those topics, an increment); returns
    how many accepted."""
    body = orjson.dumps({"filterServerList": [], "topicConfigSerializeWrapper": broker.topics.wrapper(changed)})
    increment = {"incremental": "true"} if changed is not None else {}
    ok = 0
    want_full: list[str] = []

    async def one(addr: str) -> None:
        nonlocal ok
        cmd = RemotingCommand(code=RequestCode.REGISTER_BROKER, body=body, ext_fields={
            **_ext(broker), "compressed": "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF), **increment})
        try:
            resp = await client.invoke(addr, cmd, broker.settings.register_timeout_ms / 1000)
        except RemotingError as exc:
            log.warning("registering with name server %s failed: %s", addr, exc)
            return
        if resp.code == ResponseCode.SUCCESS:
            ok += 1
            broker.master_learned(resp.ext_fields.get("masterAddr") or None,
                                  resp.ext_fields.get("haServerAddr") or None)
            if changed is not None and resp.ext_fields.get("wantFull") == "true":
                want_full.append(addr)
        else:
            log.warning("name server %s refused registration: %s", addr, resp.remark)

    async with trio.open_nursery() as nursery:
        for addr in namesrv:
            nursery.start_soon(one, addr)
    if want_full:  # a name server that did not know us yet gets every topic now
        await register_all(broker, client, want_full)
    return ok


async def unregister_all(broker: RegisteringBroker, client: RemotingClient, namesrv: list[str]) -> None:
    async def one(addr: str) -> None:
        try:
            await client.invoke(addr, RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=_ext(broker)), 3)
        except RemotingError as exc:
            log.warning("unregistering from name server %s failed: %s", addr, exc)

    async with trio.open_nursery() as nursery:
        for addr in namesrv:
            nursery.start_soon(one, addr)


async def registration_loop(broker: RegisteringBroker, client: RemotingClient, namesrv: list[str]) -> None:
    interval = broker.settings.register_interval_ms / 1000
    whole = True
    while True:
        changes, broker.topics.unregistered = broker.topics.unregistered, {}
        if whole or any(changes.values()):  # the period's registration, or a topic deleted
            await register_all(broker, client, namesrv)
        else:
            await register_all(broker, client, namesrv, changed=list(changes))
        # a replica that has not learned its master yet asks again soon, not in 30 s
        with trio.move_on_after(MASTER_SEARCH_INTERVAL_S if broker.replication.master_missing else interval) as waited:
            await broker.register_wanted.wait()
        # woken by a change of topics: an increment; by the period or anything else (a new role): whole
        whole = waited.cancelled_caught or not broker.topics.unregistered
        broker.register_wanted = trio.Event()
