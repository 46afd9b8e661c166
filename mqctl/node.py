"""Run one node of a config in the foreground: ``python -m mqctl.node --config C --node N``.

``mqctl start`` launches this in the background. SIGTERM or SIGINT stops the node gracefully
(a broker unregisters, saves offsets and closes its store).
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import logging
import signal
import sys
from pathlib import Path

import trio

from core.broker.server import serve_broker
from core.config import Config, load_config
from core.errors import CoreError
from core.namesrv.server import serve_nameserver
from core.remoting.client import connect_from, split_address
from core.remoting.signing import acl_credentials, use_credentials
from mqctl.port_holders import held_port
from plugins import plugin_host

log = logging.getLogger("mqctl.node")


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
        else:
            raise CoreError(f"no node named {name!r} in {config.source} (nodes: {', '.join(config.node_names())})")
        log.info("node %s serving on port %d", name, port)


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("signal %d: stopping", signum)
            scope.cancel()
            return


def loopback_host(config: Config, name: str) -> str | None:
    """The node's listen host when it is a loopback address of its own (127.0.0.12): its
    outgoing connections then start there too, so peers and drills can tell it apart. Other
    hosts are left to the system's routing."""
    node = config.nameserver(name) or config.broker_node(name)
    if node is None:
        return None
    host = split_address(node.listen)[0]
    try:
        own = ipaddress.ip_address(host)
    except ValueError:
        return None
    return host if own.is_loopback and host != "127.0.0.1" else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mqctl.node")
    parser.add_argument("-c", "--config", type=Path, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        use_credentials(acl_credentials(config))  # a slave's requests to its master are signed
        connect_from(loopback_host(config, args.node))
        trio.run(run_node, config, args.node)
    except CoreError as exc:
        log.error("%s", exc)
        return 2
    except (OSError, BaseExceptionGroup) as exc:
        if _address_in_use(exc) is None:
            raise
        log.error("node %s cannot listen: %s", args.node, _held_port(config, args.node))
        return 2
    log.info("node %s stopped", args.node)
    return 0


def _held_port(config: Config, name: str) -> str:
    """Which of the node's ports is taken, and by whom (as far as this user can see)."""
    node = config.nameserver(name) or config.broker_node(name)
    if node is None:
        return "address already in use"
    held = held_port(node.listen, broker=config.broker_node(name) is not None)
    return held or f"{node.listen}: address already in use"


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
