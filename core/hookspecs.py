"""Every hook of mqctl, with its contract. Hook names start with ``mq_``.

Plugins implement them with the :data:`core.plugin_markers.hookimpl` marker. Core code never calls
``pm.hook`` directly: it goes through :class:`core.plugin_manager.PluginHost`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.plugin_markers import hookspec

if TYPE_CHECKING:
    from core.broker.replication import Replication
    from core.client.fault import FaultSettings
    from core.client.selection import QueueSelector
    from core.config import Config, NameServerSettings
    from core.namesrv.controller import HostedController
    from core.namesrv.route_table import RouteTable
    from core.node_specs import BrokerNode, NameServerNode
    from core.remoting.command import RemotingCommand
    from core.remoting.connection import Connection
    from core.store.dispatch import DispatchBatch
    from core.store.message_store import MessageStore
    from core.store.store_types import StoreHooks



@hookspec
def mq_records_dispatched(store_dir: Path, requests: DispatchBatch) -> None:
    """Records became visible to consumers.

    Called by the store of ``store_dir`` on the event loop after ``requests`` were written to
    their ConsumeQueues and the key index, in CommitLog order: a sequence of DispatchRequest,
    built when read, with ``requests.queues`` the (topic, queue id) pairs that got records.
    Long polling and metrics listen here. Must be cheap and must not block: it runs on every append. Return value ignored.
    """


@hookspec
def mq_segment_retired(segment: Path, archive: Path | None) -> None:
    """A CommitLog segment left the store.

    Called by the store's retention task after ``segment`` was deleted because it outlived the
    retention time; ``archive`` is the ``.zst`` copy when archiving is on, else ``None``.
    Return value ignored.
    """


@hookspec
def mq_rpc_before_request(conn: Connection, request: RemotingCommand) -> None:
    """A request arrived and is about to be processed.

    Called on the event loop by every remoting connection (server and client side) before its
    processor sees ``request``. Raise :class:`core.errors.RpcRejected` to refuse it: the peer
    gets its code and remark and the processor never runs (ACL). Must be cheap. Return value
    ignored; skipped entirely when no plugin implements it.
    """


@hookspec
def mq_rpc_after_response(conn: Connection, request: RemotingCommand, response: RemotingCommand) -> None:
    """A response is about to be sent (server side) or has arrived (client side).

    Called on the event loop with the request it answers (metrics, auditing). Must be cheap.
    Return value ignored; skipped entirely when no plugin implements it.
    """


@hookspec(firstresult=True)
def mq_route_table(settings: NameServerSettings) -> RouteTable | None:
    """Make the route table a name server keeps (pick one: the first non-``None`` wins).

    Called once by each name server process at start with its ``[namesrv]`` settings. The
    built-in ``routing`` plugin returns RocketMQ's rules; ``None`` means "not mine". A name
    server with no route table refuses to start.
    """


@hookspec(firstresult=True)
def mq_controller(node: NameServerNode, config: Config, data_dir: Path) -> HostedController | None:
    """Make the controller member name server ``node`` hosts (pick one).

    Called once by each name server process at start when ``replication.controller`` is on;
    ``data_dir`` is the node's own folder (its raft log goes under it). The built-in
    ``ha_controller`` plugin returns RocketMQ 5's controller, replicated over every name server
    by the project's raft engine. A name server asked to host one that no plugin makes refuses
    to start.
    """


@hookspec(firstresult=True)
def mq_message_store(mode: str, node: BrokerNode, config: Config, root: Path,
                     plugins: StoreHooks) -> MessageStore | None:
    """Make the message store of a broker node whose group replicates in ``mode`` (pick one).

    Called once by each broker process at start, before the store is opened, with the node's
    store folder ``root``. A mode whose log is not the classic CommitLog (``dledger``: raft
    entries wrapping the records) returns its own :class:`MessageStore`; ``None`` means "the
    classic store".
    """


@hookspec(firstresult=True)
def mq_replication(mode: str, node: BrokerNode, config: Config, store: MessageStore) -> Replication | None:
    """Make a broker node's replication strategy for ``replication.mode`` = ``mode`` (pick one).

    Called once by each broker process at start, after its store is open. The built-in
    ``ha_async`` and ``ha_sync`` plugins answer "async" and "sync" (master-slave by broker id),
    ``ha_dledger`` answers "dledger" (raft);
    ``None`` means "not my mode". A broker whose mode no plugin answers refuses to start.
    """


@hookspec(firstresult=True)
def mq_queue_selector(settings: FaultSettings) -> QueueSelector | None:
    """Make the queue selection of a producer (pick one: the first non-``None`` wins).

    Called once per producer that ``mqctl`` (``send``, ``bench``) creates, with its latency
    fault tolerance settings. The built-in ``selection`` plugin returns the round robin with
    latency fault tolerance of :mod:`core.client.selection`. The selector is sans-IO: it is
    told the clock with every call and must not block. ``None`` means "not mine"; a library
    user who builds a ``Producer`` without a selector gets the same default.
    """
