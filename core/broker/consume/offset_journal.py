"""Committed consumer offsets travel with the log: the master writes every change, a few
milliseconds after it is made, as a record of the system topic ``rmq_sys_CONSUMER_OFFSETS``
(queue 0), so it reaches slaves and raft followers with the replication stream, and a broker
restarted after a crash finds the changes its last save missed in its own log. RocketMQ copies
the whole offset table from master to slave every 10 s and saves it every 5 s: after a master
dies, consumers of the new one start from up to 10 s back and receive again what they had
consumed.

```
 master     ConsumerOffsets.commit -> changes -> every JOURNAL_INTERVAL_S, one record (or more,
            ENTRIES_PER_RECORD_MAX each):  {"offsets": [["<topic>@<group>", queue, offset], ...]}
 replica    each record dispatched to the journal queue is applied in queue order
 any start  records past the queue offset saved with the table (``journalNext``) are applied
```

A replica that starts with an empty log copies the whole table from its master first
(:mod:`core.broker.slave_sync`); the journal keeps it current from there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson
import trio

from core.broker.consume.offsets import ConsumerOffsets
from core.errors import StoreError
from core.store.message_store import MessageStore
from formats.record import MessageRecord

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "rmq_sys_CONSUMER_OFFSETS"
JOURNAL_QUEUE = 0
JOURNAL_INTERVAL_S = 0.02
ENTRIES_PER_RECORD_MAX = 1000
READ_BATCH = 64
BODY_BYTES_MAX = 256 * 1024  # a record past this is not ours: skipped


class JournalBroker(Protocol):
    """What the journal needs from the broker (``Broker`` is one)."""

    offsets: ConsumerOffsets
    store: MessageStore
    store_host: tuple[str, int]

    def dispatched(self, topic: str, queue_id: int) -> trio.Event: ...


class OffsetJournal:
    """The consumer offsets' journal in one broker's log."""

    def __init__(self, broker: JournalBroker, *, writable: Callable[[], bool]) -> None:
        self.broker = broker
        self._writable = writable
        self.written = 0  # records this broker wrote
        self.applied = 0  # records this broker applied

    def catch_up(self) -> int:
        """Apply the journal's records past the table's saved cursor; how many."""
        offsets, store = self.broker.offsets, self.broker.store
        end = store.max_queue_offset(OFFSETS_TOPIC, JOURNAL_QUEUE)
        cursor = max(offsets.journal_next, store.min_queue_offset(OFFSETS_TOPIC, JOURNAL_QUEUE))
        applied = 0
        while cursor < end:
            entries = store.queue_entries(OFFSETS_TOPIC, JOURNAL_QUEUE, cursor, min(READ_BATCH, end - cursor))
            if not entries:
                break
            for index, entry in entries:
                try:
                    record = store.read_record(entry.phys_offset)
                except (StoreError, KeyError) as exc:  # not readable yet (a raft member's tail): later
                    log.debug("consumer offset journal record %d not readable yet: %s", index, exc)
                    end = cursor
                    break
                try:
                    self._apply(record.body)
                except (ValueError, TypeError, orjson.JSONDecodeError) as exc:
                    log.warning("consumer offset journal record %d unreadable, skipped: %s", index, exc)
                cursor = index + 1
                applied += 1
        offsets.journal_next = max(offsets.journal_next, cursor)
        self.applied += applied
        return applied

    def _apply(self, body: bytes) -> None:
        if len(body) > BODY_BYTES_MAX:
            raise ValueError(f"a journal record of {len(body)} bytes")
        doc: Any = orjson.loads(body)
        commit = self.broker.offsets.commit
        for key, queue_id, offset in doc["offsets"]:
            topic, sep, group = str(key).partition("@")
            if not sep or type(queue_id) is not int or type(offset) is not int or offset < 0:
                raise ValueError(f"bad journal entry {str(key)[:80]!r}")
            commit(group, topic, queue_id, offset)

    async def follow(self) -> None:
        """A replica's task: apply each journal record as it is dispatched."""
        offsets = self.broker.offsets
        offsets.journaling = False
        while True:
            waiter = self.broker.dispatched(OFFSETS_TOPIC, JOURNAL_QUEUE)
            self.catch_up()
            await waiter.wait()

    async def write(self) -> None:
        """A master's task: write what changed since the last record, every JOURNAL_INTERVAL_S."""
        offsets = self.broker.offsets
        self.catch_up()  # what a previous master wrote and this one has not applied yet
        offsets.take_changes()  # what it applied as a replica is in the log already
        offsets.journaling = True
        try:
            while True:
                await trio.sleep(JOURNAL_INTERVAL_S)
                if offsets.has_changes and self._writable():
                    self.write_changes()
        finally:
            offsets.journaling = False

    def write_changes(self) -> None:
        """One record per ENTRIES_PER_RECORD_MAX changes; a refused put keeps them for later."""
        offsets = self.broker.offsets
        rows = list(offsets.take_changes().items())
        for start in range(0, len(rows), ENTRIES_PER_RECORD_MAX):
            chunk = rows[start:start + ENTRIES_PER_RECORD_MAX]
            body = orjson.dumps({"offsets": [[key, queue_id, offset] for (key, queue_id), offset in chunk]})
            try:
                put = self.broker.store.put(MessageRecord(OFFSETS_TOPIC, body, queue_id=JOURNAL_QUEUE,
                                                          store_host=self.broker.store_host))
            except StoreError as exc:  # read-only now, a full disk: the changes wait
                offsets.keep_changes(dict(rows[start:]))
                log.debug("consumer offset journal record not written: %s", exc)
                return
            offsets.journal_next = put.queue_offset + 1
            self.written += 1
