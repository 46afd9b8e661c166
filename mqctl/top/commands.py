"""``mqctl top`` (a live view of the cluster from its metrics endpoints) and ``mqctl metrics
targets`` (where they are, as Prometheus file_sd targets)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.config import Config
from mqctl.common.context import load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

    from mqctl.top.scrape import Scrape

# rich's live view and prometheus_client's parser load when a command here runs: every other
# mqctl command starts without them

metrics_app = typer.Typer(help="The nodes' Prometheus metrics endpoints.", no_args_is_help=True)

Interval = Annotated[float, typer.Option("--interval", "-i", help="Seconds between refreshes (and between "
                                                                    "the two scrapes of a --json snapshot).")]


def _scrape_all(config: Config) -> list[Scrape]:
    from mqctl.top.scrape import scrape, targets

    found = targets(config)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(found)))) as pool:
        return list(pool.map(scrape, found))


def top(
    ctx: typer.Context,
    interval_s: Interval = 1.0,
    count: Annotated[int, typer.Option("--count", "-n", help="Stop after this many refreshes (0: until Ctrl-C).")] = 0,
    as_json: JsonOutput = False,
) -> None:
    """A live view of the cluster from every node's metrics endpoint.

    A live view of the cluster: message rates per topic, lag per group, replication, raft
    roles and proxy failovers, read from every node's metrics endpoint and refreshed in place.
    --json prints one snapshot (rates over --interval) and exits."""
    from rich.console import Console
    from rich.live import Live

    from mqctl.top.view import snapshot

    config = load(ctx)
    if not config.metrics.enabled:
        raise CliError("[metrics] enabled = false in this config: the nodes serve no metrics to read")
    if interval_s <= 0:
        raise CliError("--interval must be positive")
    before = _scrape_all(config)
    if as_json:
        time.sleep(interval_s)  # a rate needs two readings
        typer.echo(json.dumps(snapshot(before, _scrape_all(config))))
        return
    console = Console()
    shown = 0
    with Live(render(snapshot([], before)), console=console, auto_refresh=False, transient=False) as live:
        try:
            while count == 0 or shown < count:
                time.sleep(interval_s)
                after = _scrape_all(config)
                live.update(render(snapshot(before, after)), refresh=True)
                before, shown = after, shown + 1
        except KeyboardInterrupt:
            pass


def render(view: dict[str, Any]) -> Group:
    """The snapshot as tables."""
    from rich.console import Group
    topics = _table("Topics", ("topic", "in/s", "stored", "out/s"))
    for row in view["topics"]:
        topics.add_row(row["topic"], f"{row['in_per_s']:.1f}", f"{row['in_total']:.0f}", f"{row['out_per_s']:.1f}")
    groups = _table("Consumer groups", ("group", "topic", "lag", "lag age s", "out/s"))
    for row in view["groups"]:
        groups.add_row(row["group"], row["topic"], str(row["lag"]), f"{row['lag_seconds']:.1f}", f"{row['out_per_s']:.1f}")
    brokers = _table("Brokers", ("node", "mode", "role", "slaves", "slave lag B", "term", "commit", "in sync",
                                 "elections", "store B"))
    for row in view["brokers"]:
        brokers.add_row(row["node"], row["mode"], row["role"], str(row["slaves"]), str(row["lag_bytes"]),
                        str(row.get("term", "-")), str(row.get("commit", "-")), str(row.get("in_sync", "-")),
                        str(row.get("elections", "-")), str(row["store_bytes"]))
    proxies = _table("Proxies", ("node", "sessions", "5.x clients", "failovers", "waiting", "resent"))
    for row in view["proxies"]:
        proxies.add_row(row["node"], str(row["sessions"]), str(row["grpc_clients"]), str(row["failovers"]),
                        str(row["writes_waiting"]), str(row["resent"]))
    nodes = _table("Nodes", ("node", "kind", "up", "cpu %", "rss MiB"))
    for row in view["nodes"]:
        nodes.add_row(row["node"], row["kind"], "yes" if row["up"] else f"no: {row.get('error', '')}",
                      str(row.get("cpu_percent", "-")), f"{row.get('rss_bytes', 0) / 2**20:.0f}")
    return Group(topics, groups, brokers, proxies, nodes)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left", expand=False)
    for column in columns:
        table.add_column(column, justify="left" if column in ("topic", "group", "node", "mode", "role", "kind", "up")
                         else "right")
    return table


@metrics_app.command("targets")
def metrics_targets(ctx: typer.Context) -> None:
    """The running nodes' metrics addresses as Prometheus file_sd targets.

    The running nodes' metrics addresses as Prometheus file_sd targets (JSON), labelled with
    cluster, node and kind: point a file_sd_configs entry at the file this writes."""
    from mqctl.top.scrape import targets

    config = load(ctx)
    found = [t for t in targets(config) if t.address]
    if not found:
        raise CliError("no node serves metrics (none running, or [metrics] enabled = false)")
    typer.echo(json.dumps([{"targets": [t.address], "labels": {"cluster": config.cluster.name, "mqctl_node": t.node,
                                                                "mqctl_kind": t.kind}} for t in found], indent=2))
