"""Asking running nodes questions over the protocol (synchronous wrappers for the CLI).

Questions to brokers take the ``credentials`` of the cluster's ``[acl]`` keys
(``config.acl.credentials()``), which sign them for an ACL-enabled broker; name servers and
the probe of :func:`serves` need none."""

from __future__ import annotations

from typing import Any

import orjson
import trio

from core.errors import RemotingError
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import Credentials
from mqctl.common.errors import CliError

PROBE_CODE = 0  # no node handles code 0: any answer proves the node serves


async def serves(address: str, timeout_s: float = 1.0) -> bool:
    try:
        async with open_remoting_client(connect_timeout_s=timeout_s) as client:
            await client.invoke(address, RemotingCommand(code=PROBE_CODE), timeout_s)
        return True
    except (RemotingError, OSError):
        return False


async def call(address: str, cmd: RemotingCommand, timeout_s: float = 3.0, *,
               credentials: Credentials | None = None) -> RemotingCommand:
    async with open_remoting_client(connect_timeout_s=timeout_s, credentials=credentials) as client:
        return await client.invoke(address, cmd, timeout_s)


async def ask_namesrv(namesrv: list[str], cmd: RemotingCommand) -> RemotingCommand:
    """``cmd``'s answer from the first name server that gives one."""
    errors = []
    for addr in namesrv:
        try:
            return await call(addr, RemotingCommand(code=cmd.code, ext_fields=dict(cmd.ext_fields)))
        except RemotingError as exc:
            errors.append(f"{addr}: {exc}")
    raise CliError("no name server answered: " + "; ".join(errors))


async def cluster_info(namesrv: list[str]) -> dict[str, Any] | None:
    for address in namesrv:
        try:
            resp = await call(address, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO))
        except RemotingError:
            continue
        if resp.code == ResponseCode.SUCCESS and resp.body:
            doc: dict[str, Any] = orjson.loads(resp.body)
            return doc
    return None


async def runtime_infos(addresses: dict[str, str], *,
                        credentials: Credentials | None = None) -> dict[str, dict[str, str] | None]:
    """Each named node's runtime table (None: not answering), asked all at once."""
    out: dict[str, dict[str, str] | None] = {}

    async def one(name: str, address: str) -> None:
        out[name] = await runtime_info(address, credentials=credentials)

    async with trio.open_nursery() as nursery:
        for name, address in addresses.items():
            nursery.start_soon(one, name, address)
    return out


async def runtime_info(address: str, *, credentials: Credentials | None = None) -> dict[str, str] | None:
    try:
        resp = await call(address, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO), 2.0,
                          credentials=credentials)
    except RemotingError:
        return None
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    table: dict[str, str] = orjson.loads(resp.body).get("table", {})
    return table
