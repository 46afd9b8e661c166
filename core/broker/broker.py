"""The broker's state; it answers a request with the handler its table (core/broker/wire/request_table.py,
handed in by the server) names for the code, handing it the request's header parsed once with
the code's declared type (core/remoting/request_headers.py): the type the ACL judged."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import trio

from core.acl.file import AclFile
from core.acl.policy import AclPolicy
from core.acl.requests import Resource, request_resources
from core.addresses import is_wildcard, split_address
from core.broker.clients import ClientRegistry
from core.broker.consume.consumer_filters import ConsumerFilterTable
from core.broker.consume.long_polling import PullHold
from core.broker.consume.offset_journal import JOURNAL_QUEUE, OFFSETS_TOPIC, OffsetJournal
from core.broker.consume.offsets import ConsumerOffsets
from core.broker.consume.queue_locks import QueueLocks
from core.broker.consume.request_modes import RequestModeTable
from core.broker.consume.topic_queues import TopicQueues
from core.broker.meters import BrokerMeters
from core.broker.pop.ledger import ReviveLedger
from core.broker.pop.order import OrderBook
from core.broker.produce.write_path import WritePath
from core.broker.replication import Replication
from core.broker.tables.subscription_groups import SubscriptionGroupTable
from core.broker.tables.topics import TopicConfig, TopicTable
from core.broker.timers.schedule import ScheduleService
from core.broker.transactions.transaction_service import TransactionService
from core.broker.wire.request_names import RequestNames
from core.clock import Clock, now_ms
from core.config import Config
from core.errors import RemotingError
from core.node_specs import MASTER_ID, BrokerNode
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.header_fields import HeaderFieldError, RequestHeader
from core.remoting.request_headers import HEADER_TYPES
from core.store.message_store import MessageStore

log = logging.getLogger(__name__)

# (broker, the request's header as its code's declared type, the request, its connection); the
# request is there for its body, opaque and reply(), never for its header fields
Handler = Callable[["Broker", Any, RemotingCommand, Connection], Reply]

SLAVE_READ_ID = 1  # RocketMQ's whichBrokerWhenConsumeSlowly
MEMORY_READ_RATIO = 0.40  # RocketMQ's accessMessageInMemoryMaxRatio


def default_cold_read_lag_bytes() -> int:
    """How far below the log's end a read leaves memory: 40% of physical RAM."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_READ_RATIO)
    except (ValueError, OSError):
        return 4 << 30


def _store_host(host: str, port: int) -> tuple[str, int]:
    return ("127.0.0.1" if is_wildcard(host) else host, port)


def _peer_ip(conn: Connection) -> str:
    return split_address(conn.remote)[0] if ":" in conn.remote else ""


class RebalanceNotices:
    """Tells a consumer group's members to rebalance at once (NOTIFY_CONSUMER_IDS_CHANGED), each
    from a task of its own under :meth:`run`, which the server starts with the node; while it
    does not run, nothing is sent."""

    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def send(self, connections: Iterable[object], group: str) -> None:
        if self._nursery is None:
            return
        for conn in connections:
            if isinstance(conn, Connection) and not conn.closed.is_set():
                self._nursery.start_soon(self._notify, conn, group)

    @staticmethod
    async def _notify(conn: Connection, group: str) -> None:
        try:
            await conn.oneway(RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                              ext_fields={"consumerGroup": group}, language="JAVA"))
        except RemotingError:
            pass


class Broker:
    """One broker node: everything a request handler needs. Each handler sees it through a
    Protocol of the members it uses (core/broker/wire/request_table.py).

    Everything here is handed in or made here. What the server learns once the node listens
    comes through :meth:`bind` (the port the listener picked: ``address``, ``store_host``, and
    the delay and transaction services' store host) and :meth:`ha_bound` (the HA listener's
    address); consumer notices go out once the server runs :attr:`notices`."""

    def __init__(self, node: BrokerNode, config: Config, store: MessageStore, hold: PullHold, root: Path,
                 replication: Replication, handlers: Mapping[int, Handler], topic_queues: TopicQueues, *,
                 clock: Clock = now_ms) -> None:
        self.node = node
        self.now_ms = clock  # liveness of clients, queue locks
        self.config = config
        self.settings = config.broker
        self.cluster = config.cluster.name
        self.replication_mode = config.replication.mode
        self.store = store
        self.replication = replication
        self.writes = WritePath(store, replication)
        self.master_addr: str | None = None  # the group's master, as the name servers last said
        self.slave_sync_wanted = trio.Event()
        self.cold_read_lag_bytes = self.settings.cold_read_lag_bytes or default_cold_read_lag_bytes()
        self.hold = hold
        self.pid = os.getpid()
        self.topics = TopicTable(root / "config" / "topics.json", auto_create=self.settings.auto_create_topic,
                                 default_queue_nums=self.settings.default_topic_queue_nums)
        self.offsets = ConsumerOffsets(root / "config" / "consumerOffsets.json")
        self.offset_journal = OffsetJournal(self, writable=lambda: self.replication.writable)
        self.groups = SubscriptionGroupTable(root / "config" / "subscriptionGroup.json")
        self.request_modes = RequestModeTable(root / "config" / "messageRequestMode.json")
        self.clients = ClientRegistry(ConsumerFilterTable(sql_enabled=self.settings.enable_property_filter))
        self.register_wanted = trio.Event()
        self.notices = RebalanceNotices()  # the server runs it
        self.topic_queues = topic_queues  # a topic's queues across the cluster, from the name servers
        host, port = split_address(node.listen)
        self.address = node.advertise or f"{host}:{port}"  # bind() sets them to the port picked
        self.store_host = _store_host(host, port)
        self.ha_address = f"{host}:{port + 1}"  # ha_bound() sets it to the HA listener's
        self.schedule = ScheduleService(store, root / "config", self.store_host)
        self.queue_locks = QueueLocks()
        self.names = RequestNames()  # topic and group names requests carry, checked before handlers
        self.pop_order = OrderBook()  # FIFO POPs' outstanding batches
        self.pop_revive_turns = itertools.count()  # spreads POP checkpoints over the revive queues
        self.pop_ready = trio.Event()  # set once a writable broker's POP offsets are recovered
        self.transactions = TransactionService(store, root / "config", self.settings, self.store_host,
                                               self.producer_connections, self.schedule.hold_if_delayed)
        self.acl = AclFile(config.acl_file) if config.acl.enabled else None
        self.meters = BrokerMeters(config.metrics.label_values_max, timed=config.metrics.enabled)
        self.pop_ledgers: dict[int, ReviveLedger] = {}  # the revive loop's, by revive queue (POP in flight)
        # a plain dict, looked up on every request: each code's declared header type and handler
        self._routes: dict[int, tuple[type[RequestHeader], Handler]] = {
            code: (HEADER_TYPES[code], handler) for code, handler in handlers.items()}
        store.on_truncate(self.follow_truncation)

    def follow_truncation(self, end: int) -> None:
        """The store cut its log at ``end`` (a replica that forked from its new master): what
        the broker derived from the log follows it there. Committed offsets (POP's and the
        revive progress among them) drop to their queue's new end, the delay and timer progress
        too, open transaction halves are found again from the store, and the POP revive ledgers
        are read again from their progress."""
        moved = self.offsets.clamp_to(self.store.max_queue_offset)
        self.offsets.journal_next = min(self.offsets.journal_next,
                                        self.store.max_queue_offset(OFFSETS_TOPIC, JOURNAL_QUEUE))
        self.schedule.follow_truncation()
        self.transactions.follow_truncation()
        self.pop_ledgers.clear()
        log.warning("log cut at %d: %d committed offsets lowered to their queue's end", end, moved)

    def bind(self, port: int) -> None:
        """The listener picked its port: set the address clients and records use (the delay and
        transaction services' records too) and the HA address to offer (the next port)."""
        host = split_address(self.node.listen)[0]
        self.address = self.node.advertise or f"{host}:{port}"
        self.store_host = self.schedule.store_host = self.transactions.store_host = _store_host(host, port)
        self.ha_address = f"{host}:{port + 1}"

    def ha_bound(self, address: str | None) -> None:
        """The HA listener's address as it bound (None or empty: the strategy serves none)."""
        self.ha_address = address or ""

    def process(self, request: RemotingCommand, conn: Connection) -> Reply:
        account = None
        if self.acl is not None:  # who signed (and an admin code's admin) before anything is read
            refused, account = self.acl.policy.admit(request, _peer_ip(conn))
            if refused is not None:
                return self._refused(request, conn, refused)
        route = self._routes.get(request.code)
        if route is None:
            return request.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                 f" request type {request.code} not supported")
        header_type, handler = route
        try:
            header = header_type.of(request)
        except HeaderFieldError as exc:
            return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
        if account is not None:  # the names the handler will act on, as parsed for it
            refused = AclPolicy.refusal(account, request_resources(request, header))
            if refused is not None:
                return self._refused(request, conn, refused)
        problem = self.names.problem(request)
        if problem is not None:
            return request.reply(ResponseCode.SYSTEM_ERROR, problem)
        return handler(self, header, request, conn)

    def acl_refusal(self, request: RemotingCommand, conn: Connection, resources: list[Resource]) -> str | None:
        """With ACL on: why the request's account may not use ``resources`` as well, which the
        handler found only once it read the store (the topic of a message viewed by offset, of
        a transaction half, of a message sent back); logged and counted as any refusal."""
        if self.acl is None:
            return None
        refused = self.acl.policy.checked_refusal(request, _peer_ip(conn), resources)
        if refused is not None:
            self._count_refusal(request, conn, refused)
        return refused

    def _refused(self, request: RemotingCommand, conn: Connection, why: str) -> RemotingCommand:
        self._count_refusal(request, conn, why)
        return request.reply(ResponseCode.NO_PERMISSION, why)

    def _count_refusal(self, request: RemotingCommand, conn: Connection, why: str) -> None:
        log.warning("refused request %d from %s: %s", request.code, conn.remote, why)
        self.meters.acl_refusals.row(request.code)[0] += 1

    # ------------------------------------------------------------------ events

    def role_changed(self) -> None:
        """The node stopped or started taking writes: POP waits for the next recovery. The old
        event is set so that POPs waiting on it look again (and find the role changed)."""
        ready, self.pop_ready = self.pop_ready, trio.Event()
        ready.set()

    def dispatched(self, topic: str, queue_id: int) -> trio.Event:
        """The event set when records next reach ``topic``/``queue_id``'s ConsumeQueue."""
        return self.hold.waiter(topic, queue_id)

    def topics_changed(self) -> None:
        """Register with the name servers now rather than at the next period."""
        self.register_wanted.set()

    def master_learned(self, master_addr: str | None, ha_addr: str | None) -> None:
        """A name server's answer to our registration named the group's master."""
        if master_addr and master_addr != self.master_addr and master_addr != self.address:
            self.master_addr = master_addr
            self.slave_sync_wanted.set()
        self.replication.master_learned(master_addr, ha_addr)

    def suggested_reader(self, lag_bytes: int) -> int:
        """The broker id a consumer should pull from next, having just read ``lag_bytes`` below
        the log's end (RocketMQ's suggestWhichBrokerId). With ``slave_read_enable``, reads that
        fell out of memory go to the slave (id 1) and the rest to the master; without it,
        always the master. A slave still serves pulls when its master is gone (consumers fail
        over to it), but sends consumers back as soon as the master is in their route again."""
        if self.settings.slave_read_enable and lag_bytes > self.cold_read_lag_bytes:
            return SLAVE_READ_ID
        return MASTER_ID

    def adopt_replicated_topic(self, topic: str) -> TopicConfig | None:
        """A replica asked about a topic its master's table (copied periodically) does not list
        yet, though replicated messages of it are here: serve it with the queues seen, and copy
        the master's table now."""
        queue_ids = [qid for (name, qid) in self.store.queues.queues if name == topic]
        if self.replication.writable or not queue_ids:
            return None
        self.slave_sync_wanted.set()
        return self._adopt(topic, queue_ids)

    def adopt_stored_topics(self) -> int:
        """A node that just became its group's master (a raft election) serves every topic its
        store holds queues of, though its copy of the old master's table may lag (copied every
        ``slave_sync_interval_ms``): else the routes it registers would drop those topics.
        Returns how many it added."""
        by_topic: dict[str, list[int]] = {}
        for name, qid in self.store.queues.queues:
            by_topic.setdefault(name, []).append(qid)
        added = [name for name, qids in by_topic.items()
                 if name not in self.topics.topics and name != OFFSETS_TOPIC and self._adopt(name, qids)]
        return len(added)

    def _adopt(self, topic: str, queue_ids: list[int]) -> TopicConfig:
        nums = max(max(queue_ids) + 1, self.settings.default_topic_queue_nums)
        return self.topics.ensure(topic, nums)[0]

    def consumer_group_changed(self, group: str) -> None:
        """Tell the group's members to rebalance at once (NOTIFY_CONSUMER_IDS_CHANGED)."""
        self.notices.send(self.clients.connections(group), group)

    def producer_connections(self, group: str) -> list[object]:
        """Live connections of the group's producers (whom transaction checks go to)."""
        return [c for c in self.clients.producers.get(group, {}).values()
                if isinstance(c, Connection) and not c.closed.is_set()]

    def connection_closed(self, conn: Connection) -> None:
        for group in self.clients.drop_connection(conn):
            self.consumer_group_changed(group)
