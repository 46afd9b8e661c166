"""The ``mqctl`` command, composed here from its sub-packages.

Where a command lives: node lifecycle (start, stop, restart, status) in ``nodes/commands.py``;
each admin noun or verb in ``admin/<name>.py`` (topic, cluster, consumer, message, config,
leader, failover, send, tail); ``bench``, ``chaos``, ``analyze``, ``dump`` and ``top`` (with ``metrics``) in
``<name>/commands.py``.
Helpers every command shares are in ``common/``. A sub-package imports ``common`` and the ones
below it in this order: common <- nodes <- admin <- analyze, dump <- bench, chaos.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer

from core.errors import CoreError
from mqctl.admin.cluster import cluster_app
from mqctl.admin.config import config_app
from mqctl.admin.consumer import consumer_app
from mqctl.admin.failover import failover
from mqctl.admin.group import group_app
from mqctl.admin.leader import leader_app
from mqctl.admin.message import message_app
from mqctl.admin.send import send
from mqctl.admin.tail import tail
from mqctl.admin.topic import topic_app
from mqctl.analyze.commands import analyze
from mqctl.bench.commands import bench_app
from mqctl.chaos.commands import chaos
from mqctl.common.errors import CliError
from mqctl.common.root_options import give_every_command_root_options
from mqctl.dump.commands import dump
from mqctl.nodes import commands as nodes
from mqctl.top.commands import metrics_app, top

DEFAULT_CONFIG = Path("conf.toml")

app = typer.Typer(
    name="mqctl",
    help="A RocketMQ-compatible message broker and its operations toolkit.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("start")(nodes.start)
app.command("stop")(nodes.stop_cmd)
app.command("restart")(nodes.restart)
app.command("status")(nodes.status)
app.command("send")(send)
app.command("tail")(tail)
app.add_typer(topic_app, name="topic")
app.add_typer(cluster_app, name="cluster")
app.add_typer(consumer_app, name="consumer")
app.add_typer(group_app, name="group")
app.add_typer(message_app, name="message")
app.command("dump")(dump)
app.command("analyze")(analyze)
app.add_typer(bench_app, name="bench")
app.command("chaos")(chaos)
app.add_typer(config_app, name="config")
app.add_typer(leader_app, name="leader")
app.command("failover")(failover)
app.command("top")(top)
app.add_typer(metrics_app, name="metrics")
give_every_command_root_options(app)  # -c/--config and -v after any command too


def _version(value: bool) -> None:
    if value:
        try:
            typer.echo(version("mqctl"))
        except PackageNotFoundError:
            typer.echo("unknown")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    config: Annotated[Path, typer.Option("--config", "-c", help="The cluster's conf.toml.", envvar="MQCTL_CONFIG")] = DEFAULT_CONFIG,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log more.")] = False,
    show_version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    ctx.obj = {"config": config}


def main() -> None:
    """Console entry point: domain errors become one clear line and an exit code."""
    try:
        app()
    except CliError as exc:
        typer.echo(f"mqctl: {exc}", err=True)
        raise SystemExit(exc.exit_code) from None
    except CoreError as exc:
        typer.echo(f"mqctl: {exc}", err=True)
        raise SystemExit(2) from None
