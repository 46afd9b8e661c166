"""Offsets a broadcasting consumer keeps itself (RocketMQ's LocalFileOffsetStore): every member
reads every queue, so the broker's per-group offsets cannot say how far each one got. One JSON
file per group and client instance, written atomically when it changed."""

from __future__ import annotations

from pathlib import Path

from core.client.route import MessageQueue
from core.json_files import load_json, save_json


def default_offsets_path(instance: str, group: str) -> Path:
    """``~/.mqctl/offsets/<instance>/<group>/offsets.json`` (RocketMQ: ~/.rocketmq_offsets)."""
    return Path.home() / ".mqctl" / "offsets" / instance / group / "offsets.json"


class LocalOffsetStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets: dict[MessageQueue, int] = {}
        doc = load_json(path) or {}
        for row in doc.get("offsetTable", []):
            try:
                mq = MessageQueue(str(row["topic"]), str(row["brokerName"]), int(row["queueId"]))
                self.offsets[mq] = int(row["offset"])
            except (KeyError, TypeError, ValueError):
                continue  # a hand-edited row we cannot read: that queue starts afresh
        self._saved = dict(self.offsets)

    def get(self, mq: MessageQueue) -> int | None:
        return self.offsets.get(mq)

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.offsets[mq] = offset

    def save(self) -> None:
        if self.offsets == self._saved:
            return
        snapshot = dict(self.offsets)
        save_json(self.path, {"offsetTable": [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset}
            for mq, offset in sorted(snapshot.items())]})
        self._saved = snapshot
