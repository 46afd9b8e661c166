"""A replica copies its master's metadata (RocketMQ's SlaveSynchronize): the topic table and
the committed consumer offsets, every ``slave_sync_interval_ms`` and at once when asked, so
consumers that fail over to it keep their places and its routes match the master's."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import orjson
import trio

from core.broker.consume.offsets import ConsumerOffsets
from core.broker.tables.topics import TopicTable
from core.config import BrokerSettings
from core.errors import RemotingError
from core.remoting.client import RemotingClient
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.request_headers import KNOWN_DATA_VERSION, UNCHANGED

log = logging.getLogger(__name__)

SYNC_TIMEOUT_S = 3.0


class SyncingBroker(Protocol):
    """What copying the master's metadata needs from the broker (``Broker`` is one)."""

    master_addr: str | None
    offsets: ConsumerOffsets
    settings: BrokerSettings
    slave_sync_wanted: trio.Event
    topics: TopicTable

    def topics_changed(self) -> None: ...


async def _fetch(client: RemotingClient, master: str, code: int,
                 fields: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The master's answer to ``code``, or None (also when it says nothing changed)."""
    resp = await client.invoke(master, RemotingCommand(code=code, ext_fields=fields or {}), SYNC_TIMEOUT_S)
    if resp.code == ResponseCode.SUCCESS and resp.ext_fields.get(UNCHANGED) == "true":
        return None
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        log.warning("master %s answered %d to request %d: %s", master, resp.code, code, resp.remark)
        return None
    doc: dict[str, Any] = orjson.loads(resp.body)
    return doc


async def sync_from_master(broker: SyncingBroker, client: RemotingClient, master: str) -> None:
    """Copy the master's topics and consumer offsets once."""
    topics = await _fetch(client, master, RequestCode.GET_ALL_TOPIC_CONFIG,
                          {KNOWN_DATA_VERSION: broker.topics.version_tag()})
    if topics is not None and broker.topics.replace_from(topics):
        broker.topics_changed()
    offsets = await _fetch(client, master, RequestCode.GET_ALL_CONSUMER_OFFSET)
    if offsets is not None:
        broker.offsets.merge_from(offsets)


async def slave_sync_loop(broker: SyncingBroker, client: RemotingClient) -> None:
    interval = broker.settings.slave_sync_interval_ms / 1000
    while True:
        master = broker.master_addr
        if master:
            try:
                await sync_from_master(broker, client, master)
            except (RemotingError, orjson.JSONDecodeError) as exc:
                log.debug("copying metadata from master %s failed: %s", master, exc)
        with trio.move_on_after(interval):
            await broker.slave_sync_wanted.wait()
        broker.slave_sync_wanted = trio.Event()
