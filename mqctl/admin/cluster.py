"""``mqctl cluster``: the brokers the name servers know."""

from __future__ import annotations

import trio
import typer

from mqctl.common import probe
from mqctl.common.context import load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows

cluster_app = typer.Typer(help="The brokers the name servers know.", no_args_is_help=True)


@cluster_app.command("list")
def cluster_list(ctx: typer.Context, as_json: JsonOutput = False) -> None:
    """Clusters, broker groups and their nodes."""
    config = load(ctx)
    info = trio.run(probe.cluster_info, config.namesrv_addresses)
    if info is None:
        raise CliError("no name server answered")
    rows = []
    for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
        for name in names:
            data = info["brokerAddrTable"].get(name, {})
            for broker_id, addr in sorted(data.get("brokerAddrs", {}).items(), key=lambda kv: int(kv[0])):
                runtime = trio.run(lambda: probe.runtime_info(addr, credentials=config.acl.credentials())) or {}
                rows.append({"cluster": cluster, "broker": name, "id": int(broker_id), "address": addr,
                             "role": "master" if broker_id == "0" else "slave",
                             "max_offset": int(runtime.get("commitLogMaxOffset", 0)) if runtime else None})
    print_rows(rows, ("cluster", "broker", "id", "role", "address", "max_offset"), as_json=as_json)
