"""Run one node of a config in the foreground: ``python -m mqctl.nodes.node --config C --node N``.

``mqctl start`` launches this in the background. SIGTERM or SIGINT stops the node gracefully
(a broker unregisters, saves offsets and closes its store).
"""

from __future__ import annotations

import errno
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated

import trio
import typer

from core.config import Config, load_config
from core.errors import CoreError
from core.servers.broker import serve_broker
from core.servers.namesrv import serve_nameserver
from core.servers.proxy import serve_proxy
from mqctl.nodes.port_holders import held_port
from plugins import plugin_host

log = logging.getLogger("mqctl.nodes.node")


async def run_node(config: Config, name: str) -> None:
    plugins = plugin_host()
    data_dir = config.data_dir
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
        nameserver = config.nameserver(name)
        broker = config.broker_node(name)
        if nameserver is not None:
            port = await nursery.start(lambda task_status: serve_nameserver(
                nameserver, config, plugins, data_dir=data_dir, task_status=task_status))
        elif broker is not None:
            port = await nursery.start(lambda task_status: serve_broker(
                broker, config, plugins, data_dir=data_dir, task_status=task_status))
        elif (proxy := config.proxy_node(name)) is not None:
            port = await nursery.start(lambda task_status: serve_proxy(proxy, config, plugins, task_status=task_status))
        else:
            raise CoreError(f"no node named {name!r} in {config.source} (nodes: {', '.join(config.node_names())})")
        log.info("node %s serving on port %d", name, port)


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("signal %d: stopping", signum)
            scope.cancel()
            return


def run(config_path: Path, name: str, log_level: str) -> int:
    """Serve node ``name`` of the config at ``config_path`` until a signal; the exit status."""
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(config_path)
        trio.run(run_node, config, name)
    except CoreError as exc:
        log.error("%s", exc)
        return 2
    except (OSError, BaseExceptionGroup) as exc:
        if _address_in_use(exc) is None:
            raise
        log.error("node %s cannot listen: %s", name, _held_port(config, name))
        return 2
    log.info("node %s stopped", name)
    return 0


def node_command(
    config: Annotated[Path, typer.Option("--config", "-c", help="The cluster's conf.toml.")],
    node: Annotated[str, typer.Option("--node", help="The node of that config to run, e.g. broker-a-0.")],
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="Log level (INFO unless -v).")] = "INFO",
) -> None:
    """Run one node of a config in the foreground (mqctl start runs it in the background)."""
    raise typer.Exit(run(config, node, "DEBUG" if verbose else log_level.upper()))


def main(argv: list[str] | None = None) -> int:
    """``python -m mqctl.nodes.node``: the same option spellings as every mqctl command."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(node_command)
    try:
        app(args=argv, prog_name="python -m mqctl.nodes.node")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    return 0


def _held_port(config: Config, name: str) -> str:
    """Which of the node's ports is taken, and by whom (as far as this user can see)."""
    listens = config.listens_of(name)
    return held_port(listens) or f"{', '.join(listens) or name}: address already in use"


def _address_in_use(exc: BaseException) -> OSError | None:
    """The EADDRINUSE error in ``exc`` (trio wraps a listener's in exception groups), if any."""
    if isinstance(exc, OSError):
        return exc if exc.errno == errno.EADDRINUSE else None
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _address_in_use(inner)) is not None:
                return found
    return None


if __name__ == "__main__":
    raise SystemExit(main())
