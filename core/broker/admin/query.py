"""QUERY_MESSAGE: stored messages of a topic by key (KEYS or UNIQ_KEY) within a store-time range
(RocketMQ's QueryMessageProcessor.queryMessage over the key index).

Request ext fields: ``topic``, ``key``, ``maxNum``, ``beginTimestamp``, ``endTimestamp`` (ms),
and ``_UNIQUE_KEY_QUERY`` = "true" when a Java client looks a UNIQ_KEY up: like a 4.9.8 broker,
that query ignores ``maxNum`` and takes the store's default (32). ``maxNum`` is capped at 64
(``maxMsgsNumBatch``).

Response: SUCCESS, body = the matching records back to back in CommitLog order, as stored; or
QUERY_NOT_FOUND with a remark. Both carry ``indexLastUpdateTimestamp`` and
``indexLastUpdatePhyoffset``: where the key index ends.
"""

from __future__ import annotations

from typing import Protocol

from core.config import BrokerSettings
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.request_headers import QueryMessageHeader
from core.store.message_store import MessageStore

DEFAULT_QUERY_MAX_NUM = 32  # messageStoreConfig.defaultQueryMaxNum
QUERY_MAX_NUM_MAX = 64  # messageStoreConfig.maxMsgsNumBatch
# Room left in a frame for the response header: the body stops before the frame limit.
HEADER_ROOM_BYTES = 64 * 1024


class QueryingBroker(Protocol):
    """What QUERY_MESSAGE needs from its broker (``Broker`` is one)."""

    settings: BrokerSettings
    store: MessageStore


def handle_query_message(broker: QueryingBroker, header: QueryMessageHeader, request: RemotingCommand,
                         conn: Connection) -> RemotingCommand:
    max_num = DEFAULT_QUERY_MAX_NUM if header.unique_key_query else header.max_num
    if max_num < 1:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"field maxNum={max_num} must be at least 1")
    store = broker.store
    found = store.query_by_key(header.topic, header.key, min(max_num, QUERY_MAX_NUM_MAX), header.begin_timestamp,
                               header.end_timestamp)
    budget = broker.settings.frame_size_bytes_max - HEADER_ROOM_BYTES
    parts: list[bytes] = []
    size = 0
    for rec in sorted(found, key=lambda r: r.phys_offset):  # CommitLog order, as stock brokers answer
        if parts and size + rec.total_size > budget:
            break
        try:
            parts.append(store.commitlog.read(rec.phys_offset, rec.total_size))
        except KeyError:
            continue  # its segment was retired under us
        size += rec.total_size
    ext = _index_end(broker)
    if not parts:
        return request.reply(ResponseCode.QUERY_NOT_FOUND,
                             f"can not find message of topic {header.topic} by key {header.key}, "
                             "maybe time range not correct", ext_fields=ext)
    return request.reply(ResponseCode.SUCCESS, ext_fields=ext, body=b"".join(parts))


def _index_end(broker: QueryingBroker) -> dict[str, str]:
    """Store time and CommitLog offset of the newest key-index entry (0 and 0 when empty)."""
    files = broker.store.index.files
    newest = files[-1] if files and files[-1].index_count > 1 else None
    return {"indexLastUpdateTimestamp": str(newest.end_ts if newest else 0),
            "indexLastUpdatePhyoffset": str(newest.end_phy if newest else 0)}
