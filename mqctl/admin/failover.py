"""``mqctl failover``: a planned switchover of a group under a controller (replication.controller):
the controller elects the replica named (or the in-sync replica holding the most), tells the
group, and the old master becomes its slave.

Only a live member of the SyncStateSet can take over: it holds every acknowledged message, so
nothing acknowledged is lost. What the old master wrote and no member acknowledged (an async
group's tail) is cut when it rejoins, as after any election.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from mqctl.common.context import config_path, load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows
from mqctl.nodes.controller_ops import hand_over

FAILOVER_WAIT_S = 10.0


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
    if not any(b.name == group for b in config.brokers):
        raise CliError(f"no broker group {group!r} in {config_path(ctx)}")
    started = time.monotonic()
    node, previous, epoch = hand_over(config, group, to, wait_s)
    print_rows([{"group": group, "master": node, "previous": previous, "epoch": epoch,
                 "seconds": round(time.monotonic() - started, 3)}],
               ("group", "master", "previous", "epoch", "seconds"), as_json=as_json)
