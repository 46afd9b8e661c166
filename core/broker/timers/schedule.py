"""Delayed messages (RocketMQ's ScheduleMessageService).

A message sent with ``DELAY`` = L > 0 is stored in ``SCHEDULE_TOPIC_XXXX`` queue L - 1, with its
real topic and queue in ``REAL_TOPIC`` / ``REAL_QID``; its ConsumeQueue tagsCode is the time it
is due (the store computes it). This service moves each due message to its real topic and
queue, level by level in queue order, and keeps how far each level got in
``config/delayOffset.json`` (RocketMQ's file name and shape).

Timer messages (RocketMQ 5: ``TIMER_DELIVER_MS`` an absolute time, or ``TIMER_DELAY_SEC`` /
``TIMER_DELAY_MS`` from now) wait in the same topic, in the queue after the last level's, with
their due time in ``TIMER_OUT_MS`` (and as tagsCode). Their due times are in no order, so that
queue is read ahead into a heap (at most ``TIMER_HEAP_MAX`` entries) and delivered by due time;
its saved progress is the first entry not yet delivered. Times are kept to the millisecond (no
wheel ticks); a time in the past, or more than ``TIMER_MAX_DELAY_MS`` ahead, is refused by
:func:`timer_due_ms` as RocketMQ refuses it, or delivered at once.

A timer message can be recalled before it is due (RECALL_MESSAGE, core/broker/timers/recall.py): a
marker naming its UNIQ_KEY and due time goes into the queue after the timer queue, and the
message is dropped when it falls due. Markers are read into memory as they are written and
again from the whole queue after a restart (``RECALLS_MAX`` at once; a marker goes once its
time has passed).

Unlike RocketMQ, a crash between a delivery and the next save of the progress does not deliver
twice: after a restart, entries that were already due before the restart are first looked up
by UNIQ_KEY in their real topic, and skipped when a copy stored after them is there.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import trio

from core.broker.timers.real_destination import real_destination
from core.clock import now_ms
from core.errors import StoreError, UnsafePathError
from core.json_files import load_json, save_json
from core.store.message_store import MessageStore
from core.topic_names import SCHEDULE_TOPIC
from formats.errors import RecordError
from formats.properties import (
    DELAY,
    REAL_QID,
    REAL_TOPIC,
    TIMER_DEL_UNIQKEY,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    UNIQ_KEY,
)
from formats.record import MessageRecord
from formats.sysflag import TRANSACTION_COMMIT, TRANSACTION_NOT_TYPE, transaction_type

log = logging.getLogger(__name__)

OFFSETS_FILE = "delayOffset.json"
READ_BATCH = 64
IDLE_WAIT_S = 1.0  # re-check this often even without news (a clock step, a refused put)
PERSIST_INTERVAL_S = 1.0


TIMER_HEAP_MAX = 100_000
RECALLS_MAX = 100_000
RECALL_KEEP_MS = 60_000  # a marker outlives its due time this long (a delivery running late)
TIMER_MAX_DELAY_MS = 3 * 24 * 3600 * 1000  # RocketMQ's timerMaxDelaySec


class TimerRefused(ValueError):
    """A timer property that does not parse, or asks for more than the longest delay."""


def timer_due_ms(rec: MessageRecord, now_ms: int) -> int | None:
    """When the timer message ``rec`` is due, or ``None`` when it is not one (or a transaction
    half, which waits for END_TRANSACTION first); raises :class:`TimerRefused`."""
    props = rec.properties
    if transaction_type(rec.sysflag) not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT):
        return None
    for name, base, unit in ((TIMER_DELAY_SEC, now_ms, 1000), (TIMER_DELAY_MS, now_ms, 1), (TIMER_DELIVER_MS, 0, 1)):
        raw = props.get(name)
        if raw is None:
            continue
        try:
            due = base + int(raw) * unit
        except ValueError:
            raise TimerRefused(f"{name} is not a number: {raw[:40]!r}") from None
        if due - now_ms > TIMER_MAX_DELAY_MS:
            raise TimerRefused(f"{name} asks for more than {TIMER_MAX_DELAY_MS // 1000} s of delay")
        return due
    return None


def delay_level(rec: MessageRecord) -> int:
    """The record's DELAY level, 0 when it has none or it does not apply (transaction halves
    and rollbacks wait for END_TRANSACTION, not for a timer)."""
    raw = rec.properties.get(DELAY)
    if not raw or transaction_type(rec.sysflag) not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT):
        return 0
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


def to_schedule(rec: MessageRecord, level: int, levels: int) -> MessageRecord:
    """The record as stored while it waits: schedule topic, queue ``level - 1`` (levels above
    the last wait as long as the last), real topic and queue kept in properties."""
    level = min(level, levels)
    props = dict(rec.properties)
    props[DELAY] = str(level)
    props[REAL_TOPIC] = rec.topic
    props[REAL_QID] = str(rec.queue_id)
    return replace(rec, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=props, properties_text=None)


def to_timer(rec: MessageRecord, due_ms: int, queue_id: int) -> MessageRecord:
    """A timer message as stored while it waits (queue ``queue_id`` of the schedule topic)."""
    props = dict(rec.properties)
    props[TIMER_OUT_MS] = str(due_ms)
    props[REAL_TOPIC] = rec.topic
    props[REAL_QID] = str(rec.queue_id)
    return replace(rec, topic=SCHEDULE_TOPIC, queue_id=queue_id, properties=props, properties_text=None)


def from_schedule(rec: MessageRecord, store_host: tuple[str, int]) -> MessageRecord | None:
    """The message to deliver for a due schedule record, or ``None`` when it lacks a valid real
    topic and queue (not something this broker wrote: skipped and logged)."""
    where = real_destination(rec.properties)
    if where is None:
        return None
    topic, queue_id = where
    props = dict(rec.properties)
    props.pop(DELAY, None)
    props.pop(TIMER_OUT_MS, None)
    return MessageRecord(
        topic=topic, body=rec.body, properties=props, queue_id=queue_id, flag=rec.flag,
        sysflag=rec.sysflag, born_timestamp=rec.born_timestamp, born_host=rec.born_host,
        store_host=store_host, reconsume_times=rec.reconsume_times,
        prepared_tx_offset=rec.prepared_tx_offset,
    )


@dataclass
class ScheduleStatistics:
    delivered: int = 0
    skipped_as_delivered: int = 0
    skipped_malformed: int = 0
    recalled: int = 0


class ScheduleService:
    """Moves due delayed messages to their real queues. :meth:`deliver_due` is the whole
    logic, driven by the wall-clock time it is given; :meth:`run` calls it in a loop."""

    def __init__(self, store: MessageStore, config_dir: Path, store_host: tuple[str, int], *,
                 started_ms: int | None = None) -> None:
        self.store = store
        self.path = config_dir / OFFSETS_FILE
        self.store_host = store_host
        self.levels_ms = store.config.delay_levels_ms
        self.offsets: dict[int, int] = {}
        doc = load_json(self.path) or {}
        for level, offset in doc.get("offsetTable", {}).items():
            self.offsets[int(level)] = int(offset)
        self.stats = ScheduleStatistics()
        self.wake = trio.Event()
        self._saved = dict(self.offsets)
        self.timer_queue = len(self.levels_ms)  # the queue after the last level's
        self._timer_level = self.timer_queue + 1  # its key in the progress table
        self._timers: list[tuple[int, int, int]] = []  # (due, queue offset, phys offset), read ahead
        self._timers_read = 0  # the next timer queue offset to read into the heap
        self._timers_done: set[int] = set()  # delivered offsets past the saved progress
        self.recall_queue = self.timer_queue + 1  # recall markers
        self._recalled: dict[str, int] = {}  # UNIQ_KEY -> due ms, of recalled timer messages
        self._recalls_read = 0
        self._recalls_pruned_ms = 0
        # Entries due before this instant may have been delivered by a run that crashed before
        # saving its progress: check those against the real topic first.
        self._uncertain_before_ms = now_ms() if started_ms is None else started_ms

    def hold_if_delayed(self, rec: MessageRecord) -> MessageRecord:
        """What to store for ``rec``: itself, or, when it asks for a delay level, its schedule
        form (and this service looks at the new due time). Every put of the broker that may
        carry a delay (sends, send-backs) goes through here, as RocketMQ's putMessage does."""
        level = delay_level(rec)
        if not level:
            now = now_ms()
            due = timer_due_ms(rec, now)
            if due is None or due <= now:
                return rec  # due already: stored as it is, its timer property kept for the consumer
            self.wake.set()
            return to_timer(rec, due, self.timer_queue)
        self.wake.set()
        return to_schedule(rec, level, len(self.levels_ms))

    def recall(self, uniq_key: str, due_ms: int) -> MessageRecord | None:
        """The marker to store for recalling the timer message ``uniq_key`` due at ``due_ms``
        (it is dropped from now on); None when ``RECALLS_MAX`` recalls are waiting already."""
        if len(self._recalled) >= RECALLS_MAX and uniq_key not in self._recalled:
            return None
        self._recalled[uniq_key] = due_ms
        return MessageRecord(topic=SCHEDULE_TOPIC, body=b"recall", queue_id=self.recall_queue,
                             properties={TIMER_OUT_MS: str(due_ms), TIMER_DEL_UNIQKEY: uniq_key, UNIQ_KEY: uniq_key},
                             store_host=self.store_host)

    def _read_recalls(self, now_ms: int) -> None:
        """Markers written since the last read (all of them after a restart); spent ones go."""
        start = max(self._recalls_read, self.store.min_queue_offset(SCHEDULE_TOPIC, self.recall_queue))
        while entries := self.store.queue_entries(SCHEDULE_TOPIC, self.recall_queue, start, READ_BATCH):
            for queue_offset, entry in entries:
                start = queue_offset + 1
                if entry.is_padding or entry.tags_code + RECALL_KEEP_MS < now_ms or len(self._recalled) >= RECALLS_MAX:
                    continue
                try:
                    uniq = self.store.read_record(entry.phys_offset).properties.get(TIMER_DEL_UNIQKEY)
                except (KeyError, RecordError):
                    continue
                if uniq:
                    self._recalled[uniq] = entry.tags_code
        self._recalls_read = start
        if self._recalled and now_ms >= self._recalls_pruned_ms + RECALL_KEEP_MS:  # a walk a minute, not a round
            self._recalls_pruned_ms = now_ms
            for uniq in [u for u, due in self._recalled.items() if due + RECALL_KEEP_MS < now_ms]:
                del self._recalled[uniq]

    def deliver_due(self, now_ms: int) -> int | None:
        """Deliver every entry due at ``now_ms``; returns when the next one is due (``None``
        when no level has entries waiting). A refused put (full disk) stops the round; the
        entry is tried again on the next one."""
        next_due: int | None = None
        for level in range(1, len(self.levels_ms) + 1):
            due = self._deliver_level(level, now_ms)
            if due is not None and (next_due is None or due < next_due):
                next_due = due
        due = self._deliver_timers(now_ms)
        if due is not None and (next_due is None or due < next_due):
            next_due = due
        return next_due

    def _deliver_timers(self, now_ms: int) -> int | None:
        self._read_recalls(now_ms)
        queue_id = self.timer_queue
        saved = max(self.offsets.get(self._timer_level, 0), self.store.min_queue_offset(SCHEDULE_TOPIC, queue_id))
        if self._timers_read < saved:  # first round, or the queue's head was deleted
            self._timers, self._timers_read, self._timers_done = [], saved, set()
        while len(self._timers) < TIMER_HEAP_MAX:
            entries = self.store.queue_entries(SCHEDULE_TOPIC, queue_id, self._timers_read, READ_BATCH)
            if not entries:
                break
            for queue_offset, entry in entries:
                if entry.is_padding:
                    self._timers_done.add(queue_offset)
                else:
                    heapq.heappush(self._timers, (entry.tags_code, queue_offset, entry.phys_offset))
                self._timers_read = queue_offset + 1
        while self._timers and self._timers[0][0] <= now_ms:
            due, queue_offset, phys_offset = self._timers[0]
            self._deliver(phys_offset, due)  # a refused put raises: the entry stays for the next round
            heapq.heappop(self._timers)
            self._timers_done.add(queue_offset)
        while saved in self._timers_done:
            self._timers_done.remove(saved)
            saved += 1
        if saved or self._timer_level in self.offsets:  # a store that never held a timer saves no key for it
            self.offsets[self._timer_level] = saved
        return self._timers[0][0] if self._timers else None

    def _deliver_level(self, level: int, now_ms: int) -> int | None:
        queue_id = level - 1
        offset = max(self.offsets.get(level, 0), self.store.min_queue_offset(SCHEDULE_TOPIC, queue_id))
        try:
            while True:
                entries = self.store.queue_entries(SCHEDULE_TOPIC, queue_id, offset, READ_BATCH)
                if not entries:
                    return None
                for queue_offset, entry in entries:
                    if entry.is_padding:
                        offset = queue_offset + 1
                        continue
                    if entry.tags_code > now_ms:
                        return entry.tags_code
                    self._deliver(entry.phys_offset, entry.tags_code)
                    offset = queue_offset + 1
        finally:
            self.offsets[level] = offset

    def _deliver(self, phys_offset: int, due_ms: int) -> None:
        try:
            rec = self.store.read_record(phys_offset)
        except (KeyError, RecordError) as exc:
            log.warning("schedule: cannot read the record at %d (%s); skipped", phys_offset, exc)
            self.stats.skipped_malformed += 1
            return
        real = from_schedule(rec, self.store_host)
        if real is None:
            log.warning("schedule: the record at %d has no valid REAL_TOPIC/REAL_QID; skipped", phys_offset)
            self.stats.skipped_malformed += 1
            return
        uniq = real.properties.get(UNIQ_KEY)
        if uniq is not None and self._recalled.get(uniq) == due_ms:
            del self._recalled[uniq]
            self.stats.recalled += 1
            return
        if due_ms < self._uncertain_before_ms and self._already_delivered(real, rec.store_timestamp):
            self.stats.skipped_as_delivered += 1
            return
        try:
            self.store.put(real)  # other StoreErrors propagate: the offset stays here, tried again later
        except UnsafePathError as exc:  # it would never go in: skipped, not blocking its level for good
            log.warning("schedule: the record at %d cannot be delivered (%s); skipped", phys_offset, exc)
            self.stats.skipped_malformed += 1
            return
        self.stats.delivered += 1

    def _already_delivered(self, real: MessageRecord, scheduled_at_ms: int) -> bool:
        uniq = real.properties.get(UNIQ_KEY)
        if not uniq:
            return False
        return any(c.queue_id == real.queue_id for c in self.store.copies_since(real.topic, uniq, scheduled_at_ms))

    def follow_truncation(self) -> None:
        """The log was cut: no progress or read-ahead may lie past a schedule queue's new end
        (entries cut there are written again by whatever replicates them back)."""
        for level, offset in list(self.offsets.items()):
            self.offsets[level] = min(offset, self.store.max_queue_offset(SCHEDULE_TOPIC, level - 1))
        timers_end = self.store.max_queue_offset(SCHEDULE_TOPIC, self.timer_queue)
        self._timers = [t for t in self._timers if t[1] < timers_end]
        heapq.heapify(self._timers)
        self._timers_read = min(self._timers_read, timers_end)
        self._timers_done = {o for o in self._timers_done if o < timers_end}
        self._recalls_read = min(self._recalls_read, self.store.max_queue_offset(SCHEDULE_TOPIC, self.recall_queue))

    def save(self) -> None:
        """Write the progress of every level (only when it changed)."""
        if self.offsets != self._saved:
            snapshot = dict(self.offsets)
            save_json(self.path, {"offsetTable": {str(k): v for k, v in sorted(snapshot.items())}})
            self._saved = snapshot

    def backlog(self) -> dict[int, int]:
        """Entries waiting per level (for status and tests)."""
        return {level: self.store.max_queue_offset(SCHEDULE_TOPIC, level - 1) - self.offsets.get(level, 0)
                for level in range(1, len(self.levels_ms) + 1)}

    async def run(self) -> None:
        """Deliver as messages fall due; saves progress at most every second and on exit."""
        last_save = trio.current_time()
        try:
            while True:
                self.wake = trio.Event()
                try:
                    next_due = self.deliver_due(now_ms())
                except StoreError as exc:
                    log.warning("schedule: delivery refused by the store (%s); retrying", exc)
                    next_due = None
                if trio.current_time() - last_save >= PERSIST_INTERVAL_S:
                    await trio.to_thread.run_sync(self.save)
                    last_save = trio.current_time()
                wait_s = IDLE_WAIT_S
                if next_due is not None:
                    wait_s = min(wait_s, max(0.0, (next_due - now_ms()) / 1000))
                with trio.move_on_after(wait_s):
                    await self.wake.wait()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.save)
