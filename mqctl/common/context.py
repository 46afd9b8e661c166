"""What every command needs from the root options: the loaded config."""

from __future__ import annotations

from pathlib import Path

import typer

from core.addresses import split_address
from core.config import Config, load_config
from core.errors import ConfigError
from mqctl.common.errors import CliError
from mqctl.hosts import placement
from mqctl.hosts.lab import LabError


def config_path(ctx: typer.Context) -> Path:
    obj = ctx.find_root().obj or {}
    path: Path = obj.get("config", Path("conf.toml"))
    return path


def load(ctx: typer.Context) -> Config:
    """The config (its ``[acl]`` keys, ``config.acl.credentials()``, sign what commands send to
    brokers)."""
    try:
        config = load_config(config_path(ctx))
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    try:
        placement.run_on_client_host(config, make=ctx.command.name in ("start", "restart"))
    except LabError as exc:
        raise CliError(str(exc)) from None
    return config


def namesrv_addresses(config: Config, proxy: str | None = None) -> list[str]:
    """The name servers clients of this cluster ask (or, with ``proxy``, that proxy: a clients'
    name server too); a clear error when the file lists none."""
    if proxy is not None:
        node = config.proxy_node(proxy)
        if node is not None:
            return [node.address]
        try:
            host, _ = split_address(proxy)
        except ValueError:
            host = ""
        if not host:
            names = ", ".join(p.name for p in config.proxies) or "none"
            raise CliError(f"--proxy takes a proxy of {config.source} (proxies: {names}) or host:port, not {proxy!r}")
        return [proxy]
    if not config.nameservers:
        raise CliError(f"{config.source} lists no name servers")
    return config.namesrv_addresses
