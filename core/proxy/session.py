"""One client connection through the proxy, mirrored upstream: a connection of its own to each
broker it reaches, so the brokers see one connection per client as if it were direct.

The broker's own requests to the client (transaction check-backs, consumer-ids-changed
notices, running-info and reset-offset calls) arrive on those connections and are relayed down
the client's connection; a client that leaves closes its upstream connections, and the brokers
clean up after it as they would after a direct client. The last heartbeat the client sent to a
group is replayed first on every new connection to a member of that group, so a new master or
leader knows the client's groups and subscriptions before its first forwarded request.
"""

from __future__ import annotations

import logging

import trio

from core.remoting.client import RemotingClient
from core.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Processor, Reply
from core.remoting.signing import Credentials, sign

log = logging.getLogger(__name__)

RELAY_TIMEOUT_S = 10.0
HEARTBEAT_REPLAY_TIMEOUT_S = 3.0


def copy_request(request: RemotingCommand) -> RemotingCommand:
    """``request`` as sent on another connection: same fields and body (a signature over them
    still holds), a fresh opaque, oneway if it was."""
    return RemotingCommand(code=request.code, ext_fields=dict(request.ext_fields), body=request.body,
                           flag=request.flag & FLAG_ONEWAY, remark=request.remark, language=request.language,
                           version=request.version, serialize_type=request.serialize_type)


def copy_response(request: RemotingCommand, response: RemotingCommand) -> RemotingCommand:
    """``response`` (from upstream) as the answer to ``request`` (from downstream)."""
    return request.reply(response.code, response.remark, dict(response.ext_fields), response.body)


class RelayDown:
    """Requests a broker sends on an upstream connection, relayed to the client."""

    def __init__(self, downstream: Connection) -> None:
        self._downstream = downstream

    def process(self, request: RemotingCommand, conn: Connection) -> Reply:
        return self._relay(request)

    async def _relay(self, request: RemotingCommand) -> RemotingCommand | None:
        copy = copy_request(request)
        try:
            if request.is_oneway:
                await self._downstream.oneway(copy)
                return None
            return copy_response(request, await self._downstream.request(copy, RELAY_TIMEOUT_S))
        except Exception as exc:  # the client left or did not answer: the broker hears why
            return None if request.is_oneway else request.reply(ResponseCode.SYSTEM_ERROR, f"client: {exc}")


class ClientSession:
    """The upstream side of one client connection."""

    def __init__(self, nursery: trio.Nursery, relay: Processor, credentials: Credentials | None = None, *,
                 passes_frames: bool = False, source_host: str | None = None) -> None:
        """``relay`` answers the brokers' requests to the client; ``credentials`` sign what is
        sent upstream (None: requests go as they came, a 4.x client's own signature kept);
        ``passes_frames``: answers keep their frames, to go down as they came (a 4.x client's);
        ``source_host``: the proxy's own local address, where upstream connections start."""
        self._client = RemotingClient(nursery, relay, credentials=credentials, source_host=source_host)
        self._client.keep_frames = self.passes_frames = passes_frames and credentials is None
        self._credentials = credentials
        self._upstreams: dict[str, Connection] = {}
        self._heartbeats: dict[str, RemotingCommand] = {}  # group -> the client's last heartbeat
        self._group_of: dict[str, str] = {}  # upstream address -> its group
        self.closed = False  # the client left: its requests in flight fail, not the brokers

    def outgoing(self, request: RemotingCommand) -> RemotingCommand:
        """``request`` as this session sends it upstream: a copy, signed with the session's
        credentials when it has them (a 5.x client's account), else with its own signature."""
        copy = copy_request(request)
        if self._credentials is not None:
            sign(copy, self._credentials)
        return copy

    def remember_heartbeat(self, group: str, request: RemotingCommand) -> None:
        self._heartbeats[group] = request

    async def upstream(self, group: str, address: str) -> Connection:
        """The session's connection to ``address`` (a member of ``group``), opened on first use."""
        conn = await self._client.connection(address)
        if self._upstreams.get(address) is not conn:
            self._upstreams[address] = conn
            self._group_of[address] = group
            heartbeat = self._heartbeats.get(group)
            if heartbeat is not None and heartbeat.code == RequestCode.HEART_BEAT:
                try:
                    await conn.request(self.outgoing(heartbeat), HEARTBEAT_REPLAY_TIMEOUT_S)
                except Exception as exc:  # the request that follows meets the same trouble
                    log.debug("replaying a heartbeat to %s: %s", address, exc)
        return conn

    def connected(self, address: str) -> Connection | None:
        """The session's open connection to ``address``, if it has one (its heartbeat replayed)."""
        conn = self._upstreams.get(address)
        return conn if conn is not None and not conn.closed.is_set() else None

    def group_at(self, address: str) -> str | None:
        """The group of the member at ``address`` (one this session has a connection to)."""
        return self._group_of.get(address)

    def drop(self, address: str) -> None:
        self._upstreams.pop(address, None)
        self._client.drop(address)

    def close(self) -> None:
        self.closed = True
        self._client.close()
        self._upstreams.clear()
