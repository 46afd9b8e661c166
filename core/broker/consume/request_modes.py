"""How each (topic, consumer group) asks for messages when the broker balances its queues
(``config/messageRequestMode.json``, RocketMQ's MessageRequestModeManager): PULL, or POP with
``popShareQueueNum`` clients after a client sharing its queues (0 or less: every client POPs every
queue). Set with SET_MESSAGE_REQUEST_MODE (401, ``mqctl group mode``); read by QUERY_ASSIGNMENT
(core/broker/consume/assignments.py).

The file, as RocketMQ writes it:

```
{"messageRequestModeMap": {TOPIC: {GROUP: {"topic": .., "consumerGroup": .., "mode": "POP",
                                           "popShareQueueNum": 0}}}}
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.json_files import load_json, save_json
from core.topic_names import RETRY_PREFIX, group_problem, topic_problem

MODES = ("PULL", "POP")
DEFAULT_MODE = "PULL"  # RocketMQ's defaultMessageRequestMode
DEFAULT_POP_SHARE = -1  # RocketMQ's defaultPopShareQueueNum
POP_SHARE_MAX = 1000
ENTRIES_MAX = 100_000
BODY_BYTES_MAX = 16 * 1024


class RequestModeError(ValueError):
    """A SetMessageRequestModeRequestBody that is not one."""


@dataclass(frozen=True, slots=True)
class RequestMode:
    topic: str
    group: str
    mode: str = DEFAULT_MODE
    pop_share: int = DEFAULT_POP_SHARE

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "consumerGroup": self.group, "mode": self.mode,
                "popShareQueueNum": self.pop_share}

    @classmethod
    def from_json(cls, doc: Any) -> RequestMode:
        if not isinstance(doc, dict):
            raise RequestModeError("a message request mode must be a JSON object")
        topic, group = doc.get("topic"), doc.get("consumerGroup")
        if not isinstance(topic, str) or (problem := topic_problem(topic)):
            raise RequestModeError(f"topic: {problem if isinstance(topic, str) else 'missing'}")
        if not isinstance(group, str) or (problem := group_problem(group)):
            raise RequestModeError(f"consumerGroup: {problem if isinstance(group, str) else 'missing'}")
        mode = doc.get("mode", DEFAULT_MODE)
        if mode not in MODES:
            raise RequestModeError(f"mode must be PULL or POP, not {str(mode)[:20]!r}")
        share = doc.get("popShareQueueNum", DEFAULT_POP_SHARE)
        if type(share) is not int or not -1 <= share <= POP_SHARE_MAX:
            raise RequestModeError(f"popShareQueueNum must be an integer from -1 to {POP_SHARE_MAX}")
        return cls(topic, group, mode, share)


def default_mode(topic: str, group: str) -> RequestMode:
    """What a pair nobody set uses: PULL (a retry topic is always PULL), as RocketMQ's defaults."""
    return RequestMode(topic, group)


class RequestModeTable:
    """The set modes of one broker, saved on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.modes: dict[tuple[str, str], RequestMode] = {}
        doc = load_json(path) or {}
        table = doc.get("messageRequestModeMap") if isinstance(doc, dict) else None
        for by_group in (table or {}).values():
            for entry in (by_group or {}).values() if isinstance(by_group, dict) else ():
                try:
                    mode = RequestMode.from_json(entry)
                except RequestModeError:
                    continue  # one bad entry does not stop the broker
                self.modes[mode.topic, mode.group] = mode

    def get(self, topic: str, group: str) -> RequestMode:
        return self.modes.get((topic, group)) or default_mode(topic, group)

    def put(self, mode: RequestMode) -> None:
        if mode.topic.startswith(RETRY_PREFIX):
            raise RequestModeError("retry topic is not allowed to set mode")  # RocketMQ's words
        key = (mode.topic, mode.group)
        if key not in self.modes and len(self.modes) >= ENTRIES_MAX:
            raise RequestModeError(f"the broker keeps {ENTRIES_MAX} message request modes at most")
        if self.modes.get(key) == mode:
            return
        self.modes[key] = mode
        table: dict[str, dict[str, Any]] = {}
        for (topic, group), each in sorted(self.modes.items()):
            table.setdefault(topic, {})[group] = each.to_json()
        save_json(self.path, {"messageRequestModeMap": table})
