"""Consumer groups an operator declares (``config/subscriptionGroup.json``, RocketMQ's
SubscriptionGroupManager); the requests that keep them are in core/broker/admin/admin.py.

| request | what |
|---|---|
| UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) | body: a SubscriptionGroupConfig (JSON); admin only |
| GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) | body: ``{"subscriptionGroupTable": {...}, "dataVersion": {...}}`` |
| DELETE_SUBSCRIPTIONGROUP (207) | header ``groupName``; admin only |

Kept per group: ``consumeMessageOrderly`` (read by the proxy's gRPC door: a RocketMQ 5 group
that consumes in order), ``consumeEnable``, ``retryMaxTimes`` and ``retryQueueNums`` (kept and
answered as given; the broker does not act on them yet: docs/broker.md). Groups need not be
declared to consume, as with RocketMQ's autoCreateSubscriptionGroup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.broker.tables.change_journal import ChangeJournal
from core.clock import now_ms
from core.json_files import load_json
from core.topic_names import group_problem

GROUPS_MAX = 100_000
BODY_BYTES_MAX = 64 * 1024


class GroupConfigError(ValueError):
    """A SubscriptionGroupConfig that is not one."""


@dataclass(frozen=True, slots=True)
class SubscriptionGroup:
    name: str
    orderly: bool = False
    consume_enable: bool = True
    retry_max_times: int = 16
    retry_queue_nums: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"groupName": self.name, "consumeMessageOrderly": self.orderly, "consumeEnable": self.consume_enable,
                "retryMaxTimes": self.retry_max_times, "retryQueueNums": self.retry_queue_nums,
                "consumeBroadcastEnable": True, "consumeFromMinEnable": True, "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}

    @classmethod
    def from_json(cls, doc: Any) -> SubscriptionGroup:
        if not isinstance(doc, dict):
            raise GroupConfigError("a subscription group config must be a JSON object")
        name = doc.get("groupName")
        if not isinstance(name, str) or (problem := group_problem(name)):
            raise GroupConfigError(f"groupName: {problem if isinstance(name, str) else 'missing'}")
        flags = {key: doc.get(key, default) for key, default in (("consumeMessageOrderly", False), ("consumeEnable", True))}
        numbers = {key: doc.get(key, default) for key, default in (("retryMaxTimes", 16), ("retryQueueNums", 1))}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise GroupConfigError("consumeMessageOrderly and consumeEnable must be true or false")
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1000 for v in numbers.values()):
            raise GroupConfigError("retryMaxTimes and retryQueueNums must be integers from 0 to 1000")
        return cls(name, flags["consumeMessageOrderly"], flags["consumeEnable"], numbers["retryMaxTimes"],
                   numbers["retryQueueNums"])


class SubscriptionGroupTable:
    """The declared groups of one broker: ``subscriptionGroup.json`` and its journal of
    changes (:mod:`core.broker.tables.change_journal`), so a change costs the same at 5,000 groups as
    at 5."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: dict[str, SubscriptionGroup] = {}
        self.version = 0
        self.journal = ChangeJournal(path)
        doc = load_json(path) or {}
        for doc_group in (doc.get("subscriptionGroupTable") or {}).values():
            try:
                group = SubscriptionGroup.from_json(doc_group)
            except GroupConfigError:
                continue  # one bad entry does not stop the broker
            self.groups[group.name] = group
        self.version = int((doc.get("dataVersion") or {}).get("counter", 0))
        self.journal.replay(self._apply)

    def put(self, group: SubscriptionGroup) -> bool:
        if self.groups.get(group.name) == group:
            return False
        if group.name not in self.groups and len(self.groups) >= GROUPS_MAX:
            raise GroupConfigError(f"the broker keeps {GROUPS_MAX} subscription groups at most")
        self.groups[group.name] = group
        self._changed({"put": group.to_json()})
        return True

    def delete(self, name: str) -> bool:
        if self.groups.pop(name, None) is None:
            return False
        self._changed({"delete": name})
        return True

    def wrapper(self) -> dict[str, Any]:
        return {"subscriptionGroupTable": {n: g.to_json() for n, g in sorted(self.groups.items())},
                "dataVersion": {"timestamp": now_ms(), "counter": self.version}}

    def _changed(self, line: dict[str, Any]) -> None:
        self.version += 1
        self.journal.record({**line, "counter": self.version}, len(self.groups), self.wrapper)

    def _apply(self, line: dict[str, Any]) -> None:
        """One journal line: a group set or removed (GroupConfigError, a ValueError, for a
        line that is not a group)."""
        if "put" in line:
            group = SubscriptionGroup.from_json(line["put"])
            self.groups[group.name] = group
        else:
            self.groups.pop(str(line["delete"]), None)
        self.version = int(line.get("counter", self.version))
