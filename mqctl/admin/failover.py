"""``mqctl failover``: a planned switchover of a group under a controller (replication.controller):
the controller elects the replica named (or the in-sync replica holding the most), tells the
group, and the old master becomes its slave.

Only a live member of the SyncStateSet can take over: it holds every acknowledged message, so
nothing acknowledged is lost. What the old master wrote and no member acknowledged (an async
group's tail) is cut when it rejoins, as after any election.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import orjson
import trio
import typer

from core.config import Config
from core.errors import RemotingError
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from mqctl.common import probe
from mqctl.common.context import config_path, load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows
from mqctl.nodes.leadership import group_infos

FAILOVER_WAIT_S = 10.0


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


def failover(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="The broker group, e.g. broker-a.")],
    to: Annotated[int | None, typer.Option("--to", help="The broker id to make master (default: the in-sync "
                                                          "replica holding the most).")] = None,
    wait_s: Annotated[float, typer.Option("--wait", help="Seconds to wait for it to take writes.")] = FAILOVER_WAIT_S,
    as_json: JsonOutput = False,
) -> None:
    """Hand GROUP's mastership to another in-sync replica (controller mode).

    The controller elects it, the group follows, and the old master becomes its slave; nothing
    acknowledged is lost."""
    config = load(ctx)
    if not config.replication.controller:
        raise CliError("replication.controller is off: the group's master is its broker id 0 (mqctl config set "
                       "replication.controller true, then restart, to fail over)")
    members = {b.id: b for b in config.brokers if b.name == group}
    if not members:
        raise CliError(f"no broker group {group!r} in {config_path(ctx)}")
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
        time.sleep(0.05)
    print_rows([{"group": group, "master": node, "previous": previous, "epoch": epoch,
                 "seconds": round(time.monotonic() - started, 3)}],
               ("group", "master", "previous", "epoch", "seconds"), as_json=as_json)
