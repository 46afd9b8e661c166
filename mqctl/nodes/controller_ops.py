"""Talking to the controller of a cluster in controller mode (replication.controller): its answers
(the name servers that do not lead it say where its leader is), a group's replicas as it sees
them, a planned switchover, and waiting until a broker is back in its group's SyncStateSet.
``mqctl failover`` and the rolling restart use them."""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
import trio

from core.config import Config
from core.errors import RemotingError
from core.node_specs import BrokerNode
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from mqctl.common import probe
from mqctl.common.errors import CliError
from mqctl.nodes.leadership import group_infos
from mqctl.nodes.replication_view import controller_master

POLL_S = 0.05


def ask_controller(config: Config, code: int, fields: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    """``code`` answered by the controller's leader (the name servers that are not say where it is)."""
    errors = []
    addresses = list(config.namesrv_addresses)
    tried: set[str] = set()
    while addresses:
        address = addresses.pop(0)
        if address in tried:
            continue
        tried.add(address)
        cmd = RemotingCommand(code=code, ext_fields=dict(fields or {}), body=body)
        try:
            reply = trio.run(lambda: probe.call(address, cmd, credentials=config.acl.credentials()))
        except RemotingError as exc:
            errors.append(f"{address}: {exc}")
            continue
        if reply.code != ResponseCode.CONTROLLER_NOT_LEADER:
            return reply
        hint = reply.ext_fields.get("controllerLeaderAddress")
        if hint:
            addresses.insert(0, hint)
        errors.append(f"{address}: not the controller's leader")
    raise CliError("no controller leader answered: " + "; ".join(errors))


def replicas_of(config: Config, group: str) -> dict[str, Any]:
    """The controller's view of ``group``: master, epochs, replicas in and out of sync."""
    reply = ask_controller(config, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=orjson.dumps([group]))
    if reply.code != ResponseCode.SUCCESS:
        raise CliError(reply.remark or f"the controller refused with code {reply.code}")
    table = orjson.loads(reply.body).get("replicasInfoTable", {})
    if group not in table:
        raise CliError(f"the controller knows no broker group {group!r} (are its brokers running?)")
    info: dict[str, Any] = table[group]
    return info


def hand_over(config: Config, group: str, to: int | None, wait_s: float) -> tuple[str, int | None, int]:
    """Make ``to`` (default: the live in-sync replica holding the most) ``group``'s master and
    wait until it takes writes: (its node, the previous master's id, the new epoch)."""
    members = {b.id: b for b in config.brokers if b.name == group}
    started = time.monotonic()
    info = replicas_of(config, group)
    previous = info.get("masterBrokerId")
    in_sync = [r["brokerId"] for r in info.get("inSyncReplicas", []) if r.get("alive") and r["brokerId"] != previous]
    if to is None:
        if not in_sync:
            raise CliError(f"{group} has no live in-sync replica besides its master {previous}: nothing to hand over to")
        infos = group_infos(config, group)

        def held(broker_id: int) -> int:
            member = members.get(broker_id)
            return int(((infos.get(member.node) if member else None) or {}).get("commitLogMaxOffset", 0))
        to = max(in_sync, key=held)
    if to == previous:
        raise CliError(f"broker {to} is {group}'s master already")
    if to not in in_sync:
        raise CliError(f"broker {to} is not a live in-sync replica of {group} (in sync and alive: {in_sync or 'none'})")
    reply = ask_controller(config, RequestCode.CONTROLLER_ELECT_MASTER, {
        "clusterName": config.cluster.name, "brokerName": group, "brokerId": str(to), "designateElect": "true"})
    if reply.code != ResponseCode.SUCCESS:
        raise CliError(reply.remark or f"the controller refused with code {reply.code}")
    epoch = int(reply.ext_fields.get("masterEpoch", 0))
    node = members[to].node if to in members else str(to)
    while (group_infos(config, group).get(node) or {}).get("haRole") != "master":
        if time.monotonic() - started > wait_s:
            raise CliError(f"{node} was elected (epoch {epoch}) and did not take writes within {wait_s:g} s "
                           "(see mqctl status)")
        time.sleep(POLL_S)
    return node, previous, epoch


def current_master(config: Config, group: str) -> str | None:
    """The node of ``group`` that says it is master now."""
    return controller_master(group_infos(config, group))


def wait_in_sync(config: Config, broker: BrokerNode, deadline: float) -> dict[str, Any]:
    """Wait until ``broker`` is master of its group or in its master's SyncStateSet."""
    while True:
        infos = group_infos(config, broker.name)
        master = controller_master(infos)
        if master == broker.node:
            return {"note": "master"}
        row = infos.get(master) if master else None
        if row and broker.id in json.loads(row.get("haSyncStateSet") or "[]"):
            return {"note": f"in {master}'s SyncStateSet"}
        if time.monotonic() > deadline:
            raise CliError(f"{broker.node} did not rejoin its group's SyncStateSet in time (see mqctl status)")
        time.sleep(POLL_S)
