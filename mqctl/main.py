"""The ``mqctl`` command: one sub-app per noun, composed here."""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer

from core.errors import CoreError
from mqctl import client_cmds, nodes_cmd
from mqctl.analyze_cmd import analyze
from mqctl.bench import bench_app
from mqctl.chaos_cmd import chaos
from mqctl.config_cmd import config_app
from mqctl.consumer_cmd import consumer_app
from mqctl.dump import dump
from mqctl.errors import CliError
from mqctl.leader_cmd import leader_app
from mqctl.message_cmd import message_app
from mqctl.root_options import give_every_command_root_options
from mqctl.topic_cmd import cluster_app, topic_app

DEFAULT_CONFIG = Path("conf.toml")

app = typer.Typer(
    name="mqctl",
    help="A RocketMQ-compatible message broker and its operations toolkit.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("start")(nodes_cmd.start)
app.command("stop")(nodes_cmd.stop_cmd)
app.command("restart")(nodes_cmd.restart)
app.command("status")(nodes_cmd.status)
app.command("send")(client_cmds.send)
app.command("tail")(client_cmds.tail)
app.add_typer(topic_app, name="topic")
app.add_typer(cluster_app, name="cluster")
app.add_typer(consumer_app, name="consumer")
app.add_typer(message_app, name="message")
app.command("dump")(dump)
app.command("analyze")(analyze)
app.add_typer(bench_app, name="bench")
app.command("chaos")(chaos)
app.add_typer(config_app, name="config")
app.add_typer(leader_app, name="leader")
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
