"""Committed consumer offsets (``config/consumerOffsets.json``, RocketMQ's
``{"offsetTable": {"topic@group": {"queueId": offset}}}``, and ours: ``journalNext``, the next
record of the offsets' journal in the log that the table does not hold yet; see
:mod:`core.broker.consume.offset_journal`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core.json_files import load_json, save_json


class ConsumerOffsets:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False
        self.journaling = False  # a master's: changes are kept for the journal
        self.journal_next = 0
        self._changes: dict[tuple[str, int], int] = {}  # (key, queue id) -> offset, since the last record
        doc = load_json(path)
        if doc:
            self.table = {key: {int(q): int(o) for q, o in queues.items()}
                          for key, queues in doc.get("offsetTable", {}).items()}
            self.journal_next = int(doc.get("journalNext", 0))

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = self.key(topic, group)
        queues = self.table.setdefault(key, {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True
            if self.journaling:
                self._changes[(key, queue_id)] = offset

    @property
    def has_changes(self) -> bool:
        return bool(self._changes)

    def take_changes(self) -> dict[tuple[str, int], int]:
        """The changes since the last take (for the journal's next record)."""
        changes, self._changes = self._changes, {}
        return changes

    def keep_changes(self, changes: dict[tuple[str, int], int]) -> None:
        """Changes taken and not written: kept, unless a newer change of the same entry came."""
        for entry, offset in changes.items():
            self._changes.setdefault(entry, offset)

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic)

    def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` committed offsets for (RocketMQ's whichTopicByConsumer)."""
        return sorted(topic for topic, _, g in (k.partition("@") for k in self.table) if g == group)

    def for_group(self, group: str) -> dict[str, dict[int, int]]:
        out = {}
        for key, queues in self.table.items():
            topic, _, g = key.partition("@")
            if g == group:
                out[topic] = dict(queues)
        return out

    def to_json(self) -> dict[str, dict[str, dict[str, int]]]:
        return {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}}

    def merge_from(self, doc: dict[str, dict[str, dict[str, int]]]) -> None:
        """Take a master's offsets (a slave's periodic copy): its entries win, others stay."""
        for key, queues in (doc.get("offsetTable") or {}).items():
            for queue, offset in queues.items():
                topic, _, group = key.partition("@")
                self.commit(group, topic, int(queue), int(offset))

    def clamp_to(self, max_offset: Callable[[str, int], int]) -> int:
        """Lower every offset past its queue's end (``max_offset(topic, queue_id)``) to that end,
        after the log was cut; returns how many moved (RocketMQ corrects such an offset at the
        next pull; here it is corrected before anyone reads it)."""
        moved = 0
        for key, queues in self.table.items():
            topic = key.partition("@")[0]
            for queue_id, offset in queues.items():
                end = max_offset(topic, queue_id)
                if offset > end:
                    queues[queue_id] = end
                    moved += 1
        self.dirty = self.dirty or moved > 0
        return moved

    def save(self) -> None:
        if not self.dirty:
            return
        save_json(self.path, self.to_json() | {"journalNext": self.journal_next})  # type: ignore[dict-item]
        self.dirty = False
