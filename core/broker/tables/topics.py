"""Topic configurations (``config/topics.json``), RocketMQ's TopicConfigManager rules, and
topic name validation."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.broker.tables.change_journal import ChangeJournal
from core.clock import now_ms
from core.json_files import load_json
from core.topic_names import (
    AUTO_CREATE_TOPIC,
    DLQ_PREFIX,
    QUEUE_NUMS_MAX,
    RETRY_PREFIX,
    queue_nums_problem,
    retry_topic,
    shown,
    topic_problem,
)

__all__ = ["AUTO_CREATE_TOPIC", "DLQ_PREFIX", "QUEUE_NUMS_MAX", "RETRY_PREFIX", "TopicConfig", "TopicTable",
           "queue_nums_problem", "retry_topic", "topic_problem"]

log = logging.getLogger(__name__)

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


def version_tag(data_version: dict[str, Any]) -> str:
    """A topic table's dataVersion as one string, as a slave names the table it holds."""
    return f"{data_version.get('counter', 0)}@{data_version.get('timestamp', 0)}"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicFilterType": "SINGLE_TAG", "topicName": self.name, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TopicConfig:
        """A stored or a master's TopicConfig; ValueError when its name or queue counts are not
        ones this broker would have made (they size loops and name folders)."""
        config = cls(str(doc["topicName"]), int(doc.get("readQueueNums", 4)), int(doc.get("writeQueueNums", 4)),
                     int(doc.get("perm", 6)), int(doc.get("topicSysFlag", 0)), bool(doc.get("order", False)))
        problem = topic_problem(config.name) or queue_nums_problem(config.read_queue_nums, config.write_queue_nums,
                                                                   config.perm)
        if problem:
            raise ValueError(problem)
        return config


def topic_configs(table: object, source: str) -> dict[str, TopicConfig]:
    """The valid entries of a ``topicConfigTable`` (from ``topics.json`` or a master); the
    others are logged and left out, so one bad entry does not stop the broker."""
    configs: dict[str, TopicConfig] = {}
    for name, doc in (table.items() if isinstance(table, dict) else ()):
        try:
            if not isinstance(doc, dict):
                raise ValueError("not an object")
            config = TopicConfig.from_json(doc)
            if config.name != name:
                raise ValueError(f"its topicName is {shown(config.name)}")
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            log.warning("%s: topic %s left out: %s", source, shown(str(name)), exc)
            continue
        configs[name] = config
    return configs


class TopicTable:
    """The broker's topics, with a data version bumped on every change.

    On disk: ``topics.json`` (RocketMQ's TopicConfigSerializeWrapper) and its journal of
    changes (:mod:`core.broker.tables.change_journal`), rewritten whole on :meth:`save`."""

    def __init__(self, path: Path, *, auto_create: bool, default_queue_nums: int) -> None:
        self.path = path
        self.journal = ChangeJournal(path)
        self.auto_create = auto_create
        self.default_queue_nums = default_queue_nums
        self.topics: dict[str, TopicConfig] = {}
        self.version = {"counter": 0, "timestamp": now_ms()}
        # what changed since the last registration: topic -> deleted (core/broker/registration.py)
        self.unregistered: dict[str, bool] = {}
        doc = load_json(path)
        if doc:
            self.topics = topic_configs(doc.get("topicConfigTable"), str(path))
            self.version = doc.get("dataVersion", self.version)
        self.journal.replay(self._apply)
        if auto_create:
            self.topics.setdefault(AUTO_CREATE_TOPIC, TopicConfig(
                AUTO_CREATE_TOPIC, default_queue_nums, default_queue_nums, PERM_INHERIT | PERM_READ | PERM_WRITE))
        else:
            self.topics.pop(AUTO_CREATE_TOPIC, None)

    def get(self, name: str) -> TopicConfig | None:
        return self.topics.get(name)

    def put(self, config: TopicConfig) -> bool:
        """Create or update; True when something changed."""
        if self.topics.get(config.name) == config:
            return False
        self.topics[config.name] = config
        self._changed(config.name, {"put": config.to_json()})
        return True

    def create_from_default(self, name: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """Auto-create ``name`` from an inheritable default topic (TBW102), or ``None``."""
        default = self.topics.get(default_topic)
        if default is None or not default.perm & PERM_INHERIT:
            return None
        nums = max(1, min(queue_nums, default.write_queue_nums))
        config = TopicConfig(name, nums, nums, default.perm & ~PERM_INHERIT)
        self.put(config)
        return config

    def for_send(self, name: str, default_topic: str, queue_nums: int) -> tuple[TopicConfig | None, bool]:
        """The topic a send to ``name`` writes to, and whether the table changed: a retry topic
        is created on first use, and with auto-create any topic inherits from ``default_topic``;
        ``None`` when the topic does not exist and may not be created."""
        existing = self.topics.get(name)
        if existing is not None:
            return existing, False
        if name.startswith(RETRY_PREFIX):
            return self.ensure(name, 1)
        if self.auto_create:
            created = self.create_from_default(name, default_topic, queue_nums)
            return created, created is not None
        return None, False

    def ensure(self, name: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE) -> tuple[TopicConfig, bool]:
        existing = self.topics.get(name)
        if existing is not None:
            return existing, False
        config = TopicConfig(name, queue_nums, queue_nums, perm)
        self.put(config)
        return config, True

    def replace_from(self, wrapper: dict[str, Any]) -> bool:
        """Take a master's whole table (a slave's periodic copy); True when it changed."""
        topics = topic_configs(wrapper.get("topicConfigTable"), "the master's topic table")
        self.version = wrapper.get("dataVersion") or self.version  # the slave holds this version now
        if topics == self.topics:
            return False
        self.topics = topics
        self.unregistered.update(dict.fromkeys(topics, True))  # a whole new table: register it whole
        self.save()
        return True

    def delete(self, name: str) -> bool:
        if self.topics.pop(name, None) is None:
            return False
        self._changed(name, {"delete": name})
        return True

    def _changed(self, name: str, line: dict[str, Any]) -> None:
        self.version = {"counter": int(self.version.get("counter", 0)) + 1, "timestamp": now_ms()}
        self.unregistered[name] = "delete" in line or self.unregistered.get(name, False)
        self.journal.record({**line, "dataVersion": self.version}, len(self.topics), self.wrapper)

    def _apply(self, line: dict[str, Any]) -> None:
        """One journal line: a topic set or removed."""
        if "put" in line:
            config = TopicConfig.from_json(line["put"])
            self.topics[config.name] = config
        else:
            self.topics.pop(str(line["delete"]), None)
        self.version = line.get("dataVersion") or self.version

    def save(self) -> None:
        """Rewrite ``topics.json`` whole; the journal is then empty."""
        self.journal.rewrite(self.wrapper())

    def wrapper(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """TopicConfigSerializeWrapper, as registered with the name servers (``names``: only those)."""
        chosen = sorted(self.topics.items()) if names is None else \
            sorted((n, self.topics[n]) for n in names if n in self.topics)
        return {"dataVersion": self.version, "topicConfigTable": {name: cfg.to_json() for name, cfg in chosen}}

    def version_tag(self) -> str:
        """The data version as one string (counter and time: equal tags, equal tables)."""
        return version_tag(self.version)

    def with_queues(self, config: TopicConfig, read: int, write: int, perm: int) -> TopicConfig:
        return replace(config, read_queue_nums=read, write_queue_nums=write, perm=perm)
