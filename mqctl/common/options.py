"""Option aliases and value parsers shared by the CLI's commands."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer
from rich.markup import escape

from mqctl.common.errors import CliError


def help_text(text: str) -> str:
    """Help as written: rich, which draws typer's help, would read ``[proxies]`` in a TOML table
    name ``[[proxies]]`` as markup and drop it."""
    return escape(text)


JsonOutput = Annotated[bool, typer.Option("--json", help="Print JSON (one object per line).")]
ViaProxy = Annotated[str | None, typer.Option(
    "--proxy", help=help_text("Go through this proxy (a [[proxies]] name of the config, or host:port) instead "
                              "of the name servers."))]
LatencyFault = Annotated[bool, typer.Option("--latency-fault/--no-latency-fault",
                                            help="Leave slow or failing brokers out for a while "
                                                 "(RocketMQ's sendLatencyFaultEnable).")]


def parse_time(text: str, option: str) -> int:
    """Epoch milliseconds from ``text``: an integer (ms) or an ISO-8601 date-time (local time
    unless it names a zone)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"{option} takes epoch milliseconds or an ISO-8601 date-time like 2024-05-01T12:30:00, "
                       f"not {text!r}") from None
    return int(moment.timestamp() * 1000)  # timestamp() takes a naive time as local
