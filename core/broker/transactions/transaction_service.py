"""Transactional messages, the broker's side (RocketMQ's TransactionalMessageService and
TransactionalMessageCheckService): opening halves at send time, applying decisions, asking
producers about halves left open, and rebuilding the open table after a restart.

Checks: a half open for ``broker.transaction_timeout_ms`` (or its own
``CHECK_IMMUNITY_TIME_IN_SECONDS``, when longer) is sent to one online producer of its group as
CHECK_TRANSACTION_STATE (oneway, the half in the body with its real topic), again every
``transaction_check_interval_ms``, at most ``transaction_check_max`` times; after that it is
copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` and closed. Differences from RocketMQ, on purpose:
ages are measured from the broker's store time, not the producer's born time (clocks differ);
a round where the group has no producer online does not count as a check, so a producer that is
down for a while loses nothing; check counts live in memory (a restart grants the full count
again). A restart rebuilds the open table from ``config/transaction.json`` (the lowest open
half) and the op topic; a commit whose op record was lost in a crash is recognised by the
committed copy (same UNIQ_KEY, PREPARED TRANSACTION OFFSET = the half) and not stored twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import trio

from core.broker.timers.real_destination import real_destination
from core.broker.transactions.transactions import (
    HALF_QUEUE_ID,
    HalfTable,
    OpenHalf,
    committed,
    gave_up,
    op_half_offset,
    op_record,
    to_half,
)
from core.clock import now_ms as wall_clock_ms
from core.config import BrokerSettings
from core.errors import RemotingError, StoreError
from core.json_files import load_json, save_json
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.store.message_store import MessageStore
from core.store.store_types import PutResult
from core.topic_names import TRANS_HALF_TOPIC, TRANS_OP_TOPIC
from formats.consume_queue import CQEntry
from formats.errors import RecordError
from formats.msgid import encode_offset_msg_id
from formats.properties import UNIQ_KEY
from formats.record import MessageRecord, encode_record
from formats.sysflag import TRANSACTION_COMMIT, transaction_type

log = logging.getLogger(__name__)

PROGRESS_FILE = "transaction.json"
READ_BATCH = 256
CHECK_TICK_S = 1.0  # how often the check loop looks at the table (checks themselves are spaced by the settings)

ProducerConnections = Callable[[str], list[object]]


class TransactionDecisionError(Exception):
    """END_TRANSACTION names no open half (or the wrong group); the message says which."""


@dataclass
class TransactionStatistics:
    opened: int = 0
    committed: int = 0
    rolled_back: int = 0
    checks_sent: int = 0
    given_up: int = 0
    recovered_commits: int = 0


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """One CHECK_TRANSACTION_STATE to send."""

    connection: object
    command: RemotingCommand


class TransactionService:
    def __init__(self, store: MessageStore, config_dir: Path, settings: BrokerSettings, store_host: tuple[str, int],
                 producers: ProducerConnections, schedule_hold: Callable[[MessageRecord], MessageRecord]) -> None:
        self.store = store
        self.path = config_dir / PROGRESS_FILE
        self.settings = settings
        self.store_host = store_host
        self.producers = producers
        self.schedule_hold = schedule_hold  # a committed message may still ask for a delay level
        self.table = HalfTable()
        self.stats = TransactionStatistics()
        self._saved_low: int | None = None
        self._rebuild()

    # ------------------------------------------------------------------ opening and deciding

    def half_of(self, rec: MessageRecord) -> MessageRecord:
        """What to store for a half sent as ``rec``."""
        return to_half(rec)

    def opened(self, half: MessageRecord, result: PutResult) -> None:
        """A half was stored: it waits for its decision from now."""
        self.table.add(half, result.queue_offset, result.phys_offset, result.store_timestamp,
                       self.settings.transaction_timeout_ms)
        self.stats.opened += 1

    def open_half(self, queue_offset: int, phys_offset: int) -> tuple[OpenHalf, MessageRecord]:
        """The open half END_TRANSACTION names, and its record (the caller checks who may decide
        it, by its real topic, before :meth:`apply`). Raises :class:`TransactionDecisionError`
        when no such half is open, or it cannot be read."""
        entry = self.table.find(queue_offset, phys_offset)
        if entry is None:
            raise TransactionDecisionError(
                f"no open transaction half at tranStateTableOffset {queue_offset}, commitLogOffset {phys_offset} "
                "(decided already, or not a half)")
        half = self._read(entry)
        if half is None:
            raise TransactionDecisionError(f"the half at commitLogOffset {phys_offset} cannot be read")
        return entry, half

    def apply(self, entry: OpenHalf, half: MessageRecord, group: str, commit: bool) -> PutResult | None:
        """Apply producer group ``group``'s decision on a half :meth:`open_half` found (no await
        in between: it is still open); returns where a committed message went (``None`` for a
        rollback). Raises :class:`TransactionDecisionError` when ``group`` is not the half's,
        and StoreError when the store refuses (the half then stays open)."""
        if group != entry.group:  # always: a 5.x client's group is its topic, known to anyone
            raise TransactionDecisionError(f"The producer group wrong: the half belongs to {entry.group}, not {group}")
        result = None
        if commit and not (entry.recovered and self._commit_stored(entry, half)):
            final = committed(half, self.store_host)
            if final is None:
                raise TransactionDecisionError(f"the half at commitLogOffset {entry.phys_offset} lacks a valid "
                                               "REAL_TOPIC/REAL_QID")
            result = self.store.put(self.schedule_hold(final))
            entry.recovered = True  # should the op record fail now, a retry must not store it twice
        self._close(entry)
        if commit:
            self.stats.committed += 1
        else:
            self.stats.rolled_back += 1
        return result

    def decide(self, queue_offset: int, phys_offset: int, group: str, commit: bool) -> PutResult | None:
        """:meth:`open_half`, then :meth:`apply` (with nobody's permissions to check)."""
        return self.apply(*self.open_half(queue_offset, phys_offset), group, commit)

    def _close(self, entry: OpenHalf) -> None:
        self.store.put(op_record(entry.queue_offset, wall_clock_ms(), self.store_host))
        self.table.decide(entry.queue_offset)

    def _read(self, entry: OpenHalf) -> MessageRecord | None:
        try:
            return self.store.read_record(entry.phys_offset)
        except (KeyError, RecordError) as exc:
            log.warning("transactions: cannot read the half at %d (%s)", entry.phys_offset, exc)
            return None

    def _commit_stored(self, entry: OpenHalf, half: MessageRecord) -> bool:
        """Whether the commit of ``half`` is in its real topic already (a crash lost its op)."""
        where, uniq = real_destination(half.properties), half.properties.get(UNIQ_KEY)
        if where is None or not uniq:
            return False
        return any(c.prepared_tx_offset == entry.phys_offset and transaction_type(c.sysflag) == TRANSACTION_COMMIT
                   for c in self.store.copies_since(where[0], uniq, entry.stored_ms))

    # ------------------------------------------------------------------ checks

    def due_checks(self, now_ms: int) -> list[CheckRequest]:
        """The checks to send at ``now_ms``; closes halves that used up their checks (and
        recovered ones whose commit turns out to be stored). StoreError propagates."""
        out = []
        interval = self.settings.transaction_check_interval_ms
        for entry in self.table.due(now_ms):
            half = self._read(entry)
            if half is None:  # its segment is gone (retention): nothing left to decide
                self.table.decide(entry.queue_offset)
                continue
            if entry.recovered:
                if self._commit_stored(entry, half):
                    self._close(entry)
                    self.stats.recovered_commits += 1
                    continue
                entry.recovered = False
            if entry.checks >= self.settings.transaction_check_max:
                log.warning("transactions: half %s of group %s undecided after %d checks; moved to the check-max topic",
                            half.uniq_key, entry.group, entry.checks)
                self.store.put(gave_up(half, self.store_host))
                self._close(entry)
                self.stats.given_up += 1
                continue
            connections = self.producers(entry.group)
            if not connections:
                entry.next_check_ms = now_ms + interval  # not counted: nobody could be asked
                continue
            connection = connections[entry.checks % len(connections)]
            self.table.checked(entry, now_ms, interval)
            out.append(CheckRequest(connection, self._check_command(entry, half)))
        return out

    def _check_command(self, entry: OpenHalf, half: MessageRecord) -> RemotingCommand:
        where = real_destination(half.properties) or (half.topic, half.queue_id)
        shown = replace(half, topic=where[0], queue_id=where[1], properties_text=None)
        uniq = half.properties.get(UNIQ_KEY, "")
        host, port = half.store_host
        return RemotingCommand(code=RequestCode.CHECK_TRANSACTION_STATE, language="JAVA", ext_fields={
            "tranStateTableOffset": str(entry.queue_offset), "commitLogOffset": str(entry.phys_offset),
            "msgId": uniq, "transactionId": uniq, "offsetMsgId": encode_offset_msg_id(host, port, entry.phys_offset),
        }, body=bytes(encode_record(shown)))

    async def run(self) -> None:
        """Send checks as halves fall due; saves the rebuild point now and then and on exit."""
        try:
            while True:
                try:
                    requests = self.due_checks(wall_clock_ms())
                except StoreError as exc:
                    log.warning("transactions: the store refused a write during checks (%s); retrying", exc)
                    requests = []
                for request in requests:
                    await self._send_check(request)
                self.save()
                await trio.sleep(min(CHECK_TICK_S, self.settings.transaction_check_interval_ms / 1000))
        finally:
            self.save()

    async def _send_check(self, request: CheckRequest) -> None:
        conn = request.connection
        if not isinstance(conn, Connection) or conn.closed.is_set():
            return
        try:
            with trio.move_on_after(3):
                await conn.oneway(request.command)
                self.stats.checks_sent += 1
        except RemotingError as exc:
            log.debug("transactions: check to %s failed: %s", conn.remote, exc)

    # ------------------------------------------------------------------ restart

    def save(self) -> None:
        """Write the lowest open half's offset (only when it moved)."""
        low = self.table.low_water(self.store.max_queue_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID))
        if low != self._saved_low:
            save_json(self.path, {"halfOffset": low})
            self._saved_low = low

    def follow_truncation(self) -> None:
        """The log was cut: halves and decisions past the cut are gone, so the open halves are
        found again from the store, as a restart finds them. From the first half kept: a cut
        decision reopens its half wherever that half lies (a rare event; the scan is bounded by
        retention)."""
        self.table.open.clear()
        self._rebuild(0)

    def _rebuild(self, low: int | None = None) -> None:
        if low is None:
            low = int((load_json(self.path) or {}).get("halfOffset", 0))
        low = max(low, self.store.min_queue_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID))
        decided = set()
        for _, entry in self._entries(TRANS_OP_TOPIC):
            try:
                half_offset = op_half_offset(self.store.read_record(entry.phys_offset))
            except (KeyError, RecordError):
                continue
            if half_offset is not None and half_offset >= low:
                decided.add(half_offset)
        for queue_offset, entry in self._entries(TRANS_HALF_TOPIC, low):
            if queue_offset in decided:
                continue
            try:
                half = self.store.read_record(entry.phys_offset)
            except (KeyError, RecordError):
                continue
            self.table.add(half, queue_offset, entry.phys_offset, half.store_timestamp,
                           self.settings.transaction_timeout_ms, recovered=True)
        self._saved_low = low
        if self.table.open:
            log.info("transactions: %d halves still open after the restart", len(self.table.open))

    def _entries(self, topic: str, start: int = 0) -> Iterator[tuple[int, CQEntry]]:
        offset = max(start, self.store.min_queue_offset(topic, HALF_QUEUE_ID))
        while True:
            entries = self.store.queue_entries(topic, HALF_QUEUE_ID, offset, READ_BATCH)
            if not entries:
                return
            for queue_offset, entry in entries:
                if not entry.is_padding:
                    yield queue_offset, entry
                offset = queue_offset + 1

