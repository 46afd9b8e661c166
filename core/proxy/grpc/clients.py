"""RocketMQ 5 clients as the proxy knows them: their settings, their telemetry streams, and the
upstream connections the proxy holds for each of them.

A 5.x client has no connection a broker could call back on; the proxy keeps one per client and
broker (a :class:`ClientSession`, as for a 4.x client through the proxy), heartbeats a producer's
topics as its producer groups there, and turns the brokers' transaction check-backs into
``RecoverOrphanedTransactionCommand`` on the client's telemetry stream. POP consumers are not
registered with the brokers as consumers: a 4.x consumer of the same group would otherwise
hand them queues in its rebalance, and POP consumers do not pull.

A client id belongs to the account that first used it (with ACL on): another account's call
naming it is refused (FORBIDDEN) and changes nothing, so nobody can end another's session or
take its check-backs. The same account signing with a new secret key gets a fresh record. How
many clients the proxy serves, in all and per address, is bounded (each holds connections to
the brokers), and so are each client's telemetry streams.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import trio

from core.config import ProxySettings
from core.proxy.grpc.auth import Caller
from core.proxy.grpc.messages import Refused, duration, incoming
from core.proxy.session import ClientSession
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from formats.errors import FormatError
from formats.record import decode_record
from formats.rocketmq_v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

Push = Callable[[pb.TelemetryCommand], None]  # sends a command down one telemetry stream
CLIENT_SILENT_S = 120.0  # as brokers expire 4.x clients: no call for this long and it is gone
TRANSACTIONS_MAX = 100_000
TRANSACTION_KEEP_S = 3600.0
# RocketMQ's default retry delays for a consumer group (its 16 delay levels from 1 s, plus 2)
CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


@dataclass(slots=True)
class HalfMessage:
    """Where a transaction's half message is, for the EndTransaction that settles it."""

    group: str  # broker group
    tran_state_offset: int
    commit_log_offset: int
    offset_msg_id: str
    kept_at: float = field(default_factory=time.monotonic)


class TransactionBook:
    """(topic, transaction id) -> its half message, bounded in count and age."""

    def __init__(self) -> None:
        self._halves: OrderedDict[tuple[str, str], HalfMessage] = OrderedDict()

    def keep(self, topic: str, transaction_id: str, half: HalfMessage) -> None:
        self._halves[(topic, transaction_id)] = half
        self._halves.move_to_end((topic, transaction_id))
        now = time.monotonic()
        while self._halves and (len(self._halves) > TRANSACTIONS_MAX
                                or now - next(iter(self._halves.values())).kept_at > TRANSACTION_KEEP_S):
            self._halves.popitem(last=False)

    def take(self, topic: str, transaction_id: str) -> HalfMessage | None:
        return self._halves.pop((topic, transaction_id), None)


class GrpcClient:
    """One 5.x client (one client id)."""

    def __init__(self, caller: Caller, session: ClientSession) -> None:
        self.caller = caller
        self.session = session
        self.settings: pb.Settings | None = None
        self.streams: list[Push] = []
        self.last_seen = trio.current_time()

    @property
    def producer_topics(self) -> list[str]:
        if self.settings is None or not self.settings.HasField("publishing"):
            return []
        return sorted({r.name for r in self.settings.publishing.topics if r.name})

    def push(self, command: pb.TelemetryCommand) -> bool:
        """Send ``command`` down the client's newest telemetry stream; False with none open."""
        if not self.streams:
            return False
        self.streams[-1](command)
        return True


def _account(caller: Caller) -> str | None:
    """Who a caller is: the account it signed as (None: ACL off, or a white-listed address)."""
    return caller.credentials.access_key if caller.credentials is not None else None


class _CheckBackRelay:
    """The brokers' requests to one 5.x client, answered by the proxy on its behalf."""

    def __init__(self, clients: GrpcClients, client_id: str) -> None:
        self._clients = clients
        self._client_id = client_id

    def process(self, request: RemotingCommand, conn: Connection) -> Reply:
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._clients.check_back(self._client_id, request, conn.remote)
            return None
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED or request.is_oneway:
            return None
        return request.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                             f"request {request.code} is not relayed to RocketMQ 5 clients")


class GrpcClients:
    """Every 5.x client the proxy serves now."""

    def __init__(self, nursery: trio.Nursery, settings: ProxySettings, *, source_host: str | None = None) -> None:
        self._source_host = source_host  # the proxy's own local address, where upstream connections start
        self._nursery = nursery
        self._settings = settings
        self._clients: dict[str, GrpcClient] = {}
        self.transactions = TransactionBook()
        self.check_backs = 0

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, caller: Caller) -> GrpcClient:
        """The caller's client record, made on its first call. :class:`Refused` when the client
        id is another account's (FORBIDDEN), or when a new one would pass the bounds on clients
        (TOO_MANY_REQUESTS)."""
        client = self._clients.get(caller.client_id)
        if client is not None and client.caller.credentials != caller.credentials:
            if _account(client.caller) != _account(caller):
                raise Refused(pb.FORBIDDEN, f"client id {caller.client_id[:64]!r} is in use by another account")
            self.drop(caller.client_id)  # the same account, signing with a new key: sign upstream with it
            client = None
        if client is None:
            self._check_room(caller)
            relay = _CheckBackRelay(self, caller.client_id)
            client = self._clients[caller.client_id] = GrpcClient(
                caller, ClientSession(self._nursery, relay, caller.credentials, source_host=self._source_host))
        client.last_seen = trio.current_time()
        return client

    def _check_room(self, caller: Caller) -> None:
        if len(self._clients) >= self._settings.grpc_clients_max:
            raise Refused(pb.TOO_MANY_REQUESTS, f"the proxy serves {len(self._clients)} RocketMQ 5 clients, its "
                          "limit (proxy.grpc_clients_max)")
        same_host = sum(1 for c in self._clients.values() if c.caller.peer_host == caller.peer_host)
        if same_host >= self._settings.grpc_clients_per_host_max:
            raise Refused(pb.TOO_MANY_REQUESTS, f"the proxy serves {same_host} clients from {caller.peer_host}, its "
                          "limit per address (proxy.grpc_clients_per_host_max)")

    def attach(self, caller: Caller, push: Push) -> None:
        """A telemetry stream of the caller opened: commands for the client go down it."""
        client = self.get(caller)
        if len(client.streams) >= self._settings.grpc_streams_per_client_max:
            raise Refused(pb.TOO_MANY_REQUESTS, f"client {caller.client_id[:64]!r} has {len(client.streams)} telemetry "
                          "streams open, its limit (proxy.grpc_streams_per_client_max)")
        client.streams.append(push)

    def detach(self, client_id: str, push: Push) -> None:
        client = self._clients.get(client_id)
        if client is not None and push in client.streams:
            client.streams.remove(push)

    def find(self, client_id: str) -> GrpcClient | None:
        """The client with ``client_id`` now, if any."""
        return self._clients.get(client_id)

    def terminate(self, caller: Caller) -> None:
        """NotifyClientTermination: the caller's own record goes (another account's is refused)."""
        client = self._clients.get(caller.client_id)
        if client is not None and _account(client.caller) != _account(caller):
            raise Refused(pb.FORBIDDEN, f"client id {caller.client_id[:64]!r} is in use by another account")
        self.drop(caller.client_id)

    def drop(self, client_id: str) -> None:
        client = self._clients.pop(client_id, None)
        if client is not None:
            client.session.close()

    async def expire_silent(self) -> None:
        """Forget clients that stopped calling (a client killed without NotifyClientTermination)."""
        while True:
            await trio.sleep(CLIENT_SILENT_S / 4)
            now = trio.current_time()
            for client_id in [c for c, v in self._clients.items() if now - v.last_seen > CLIENT_SILENT_S and not v.streams]:
                log.info("5.x client %s silent for %.0f s: dropped", client_id, CLIENT_SILENT_S)
                self.drop(client_id)

    # ------------------------------------------------------------------ settings

    def settings_reply(self, client: GrpcClient, settings: pb.Settings, *, fifo: bool = False) -> pb.Settings:
        """The client's settings as the proxy applies them (RocketMQ's proxy values); ``fifo``:
        a consumer's group consumes in order."""
        client.settings = settings
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.metric.on = False
        if settings.HasField("publishing"):
            reply.backoff_policy.CopyFrom(pb.RetryPolicy(max_attempts=3, exponential_backoff=pb.ExponentialBackoff(
                initial=duration(10), max=duration(1000), multiplier=2.0)))
            reply.publishing.max_body_size = 4 * 1024 * 1024
            reply.publishing.validate_message_type = True
        elif settings.HasField("subscription"):
            reply.subscription.fifo = fifo
            reply.subscription.receive_batch_size = 32
            if not settings.subscription.HasField("long_polling_timeout"):
                reply.subscription.long_polling_timeout.CopyFrom(duration(20_000))
            reply.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=self._settings.max_delivery_attempts,
                customized_backoff=pb.CustomizedBackoff(next=[duration(s * 1000) for s in CONSUMER_BACKOFF_S])))
        return reply

    def producer_heartbeat(self, client: GrpcClient) -> RemotingCommand | None:
        """The 4.x heartbeat that makes the brokers send ``client``'s check-backs through the
        proxy: its topics as producer groups (RocketMQ's proxy uses the topic as the group)."""
        topics = client.producer_topics
        if not topics:
            return None
        body = orjson.dumps({"clientID": client.caller.client_id, "producerDataSet": [{"groupName": t} for t in topics],
                             "consumerDataSet": []})
        return RemotingCommand(code=RequestCode.HEART_BEAT, body=body, language="PYTHON")

    # ------------------------------------------------------------------ check-backs

    def check_back(self, client_id: str, request: RemotingCommand, broker_address: str) -> None:
        """A broker asks ``client_id`` how a transaction ended: ask the client on its telemetry
        stream (it answers with EndTransaction, source SOURCE_SERVER_CHECK)."""
        client = self._clients.get(client_id)
        ext = request.ext_fields
        try:
            half = decode_record(request.body or b"")
            tran_offset, log_offset = int(ext["tranStateTableOffset"]), int(ext["commitLogOffset"])
        except (FormatError, KeyError, ValueError) as exc:
            log.warning("a CHECK_TRANSACTION_STATE for %s does not parse: %s", client_id, exc)
            return
        transaction_id = ext.get("transactionId") or ext.get("msgId") or half.uniq_key or ""
        group = client.session.group_at(broker_address) if client is not None else None
        if client is None or not group:
            return
        self.transactions.keep(half.topic, transaction_id, HalfMessage(group, tran_offset, log_offset,
                                                                       ext.get("offsetMsgId", "")))
        message = incoming(half, half.topic)
        if client.push(pb.TelemetryCommand(recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id))):
            self.check_backs += 1
