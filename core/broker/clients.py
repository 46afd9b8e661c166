"""Producers and consumers known to the broker, from heartbeats; forgotten when their
connection closes, they unregister, or they stay silent too long."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from core.broker.consume.consumer_filters import ConsumerFilterTable, FilterRefused
from core.filter.expression_types import TAG, is_tag_type
from core.topic_names import group_problem, topic_problem
from formats.tags import subscription_codes

log = logging.getLogger(__name__)
SUB_VERSION_MAX = (1 << 63) - 1  # a Java long


@dataclass(slots=True)
class Subscription:
    topic: str
    expression: str
    codes: set[int] | None  # TAG: the tagsCodes wanted; None: every tag (and SQL92)
    expression_type: str = TAG
    version: int = 0  # the client's subVersion (ms when it subscribed)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Subscription:
        kind = str(doc.get("expressionType") or TAG)
        expression = str(doc.get("subString", "*") or ("*" if is_tag_type(kind) else ""))
        codes = subscription_codes(expression) if is_tag_type(kind) else None
        try:
            version = min(max(int(doc.get("subVersion") or 0), 0), SUB_VERSION_MAX)
        except (TypeError, ValueError):
            version = 0
        return cls(str(doc.get("topic", "")), expression, codes, kind, version)


@dataclass(slots=True)
class ConsumerClient:
    client_id: str
    connection: object
    subscriptions: dict[str, Subscription]
    consume_type: str
    message_model: str
    consume_from_where: str
    last_seen_ms: int


@dataclass(slots=True)
class ConsumerGroup:
    clients: dict[str, ConsumerClient] = field(default_factory=dict)


_CONSUME_TYPES = MappingProxyType({0: "CONSUME_ACTIVELY", 1: "CONSUME_PASSIVELY"})
_MODELS = MappingProxyType({0: "BROADCASTING", 1: "CLUSTERING"})
_FROM_WHERE = MappingProxyType({0: "CONSUME_FROM_LAST_OFFSET", 4: "CONSUME_FROM_FIRST_OFFSET",
                                5: "CONSUME_FROM_TIMESTAMP"})


def enum_name(value: object, names: Mapping[int, str], default: str) -> str:
    """C++ sends enum numbers, Java sends names."""
    if isinstance(value, str) and not value.isdigit():
        return value
    try:
        return names.get(int(value), default)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default


def check_heartbeat(doc: object) -> dict[str, Any]:
    """``doc`` if it has HeartbeatData's shape (lists of objects where lists belong, scalars for
    names); raises ValueError naming the first thing that does not fit."""
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    _scalar(doc, "clientID")
    for kind in ("producerDataSet", "consumerDataSet"):
        for i, item in enumerate(_objects(doc, kind)):
            _scalar(item, "groupName", f"{kind}[{i}]")
            _name(item, "groupName", group_problem, f"{kind}[{i}]")
            for j, sub in enumerate(_objects(item, "subscriptionDataSet", f"{kind}[{i}]")):
                for key in ("topic", "subString", "expressionType", "subVersion"):
                    _scalar(sub, key, f"{kind}[{i}].subscriptionDataSet[{j}]")
                _name(sub, "topic", topic_problem, f"{kind}[{i}].subscriptionDataSet[{j}]")
    return doc


def _name(doc: dict[str, Any], key: str, problem_of: Callable[[str], str | None], where: str) -> None:
    """A topic or group name the body carries: refused as its header field would be."""
    value = doc.get(key)
    if value is not None and value != "" and (problem := problem_of(str(value))):
        raise ValueError(f"{where}.{key}: {problem}")


def _objects(doc: dict[str, Any], key: str, where: str = "") -> list[dict[str, Any]]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{where + '.' if where else ''}{key} must be a list of objects")
    return value


def _scalar(doc: dict[str, Any], key: str, where: str = "") -> None:
    if isinstance(doc.get(key), (list, dict)):
        raise ValueError(f"{where + '.' if where else ''}{key} must be a string")


class ClientRegistry:
    def __init__(self, filters: ConsumerFilterTable | None = None) -> None:
        self.filters = filters if filters is not None else ConsumerFilterTable(sql_enabled=False)
        self.consumers: dict[str, ConsumerGroup] = {}
        self.producers: dict[str, dict[str, object]] = {}  # group -> client id -> connection

    def heartbeat(self, doc: dict[str, Any], connection: object, now_ms: int) -> list[str]:
        """Record a HeartbeatData; returns the consumer groups whose membership changed."""
        client_id = str(doc.get("clientID", ""))
        changed = []
        for producer in doc.get("producerDataSet") or []:
            self.producers.setdefault(str(producer.get("groupName", "")), {})[client_id] = connection
        for consumer in doc.get("consumerDataSet") or []:
            group = str(consumer.get("groupName", ""))
            subs = {}
            for sub_doc in consumer.get("subscriptionDataSet") or []:
                sub = Subscription.from_json(sub_doc)
                subs[sub.topic] = sub
                self._parse_now(group, sub, client_id)
            members = self.consumers.setdefault(group, ConsumerGroup()).clients
            if client_id not in members:
                changed.append(group)
            members[client_id] = ConsumerClient(
                client_id, connection, subs,
                enum_name(consumer.get("consumeType"), _CONSUME_TYPES, "CONSUME_PASSIVELY"),
                enum_name(consumer.get("messageModel"), _MODELS, "CLUSTERING"),
                enum_name(consumer.get("consumeFromWhere"), _FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"),
                now_ms,
            )
        return changed

    def _parse_now(self, group: str, sub: Subscription, client_id: str) -> None:
        """Parse the subscription's filter as it arrives (kept for the pulls); a refused one is
        kept too, and answered to each pull of it (RocketMQ accepts such a heartbeat as well)."""
        try:
            self.filters.filter_for(group, sub.topic, sub.expression_type, sub.expression, sub.version)
        except FilterRefused as exc:
            log.warning("consumer %s of group %s: subscription to %s refused: %s", client_id, group, sub.topic,
                        exc.remark)

    def unregister(self, client_id: str, producer_group: str | None, consumer_group: str | None) -> list[str]:
        if producer_group:
            self.producers.get(producer_group, {}).pop(client_id, None)
        if consumer_group:
            group = self.consumers.get(consumer_group)
            if group is not None and group.clients.pop(client_id, None) is not None:
                return [consumer_group]
        return []

    def drop_connection(self, connection: object) -> list[str]:
        """Forget every client of ``connection``; returns consumer groups that changed."""
        changed = []
        for group, members in self.consumers.items():
            for cid in [c for c, info in members.clients.items() if info.connection is connection]:
                del members.clients[cid]
                changed.append(group)
        for clients in self.producers.values():
            for cid in [c for c, conn in clients.items() if conn is connection]:
                del clients[cid]
        return sorted(set(changed))

    def expire(self, now_ms: int, idle_ms: int) -> list[str]:
        changed = []
        for group, members in self.consumers.items():
            for cid in [c for c, info in members.clients.items() if now_ms - info.last_seen_ms > idle_ms]:
                del members.clients[cid]
                changed.append(group)
        return sorted(set(changed))

    def consumer_ids(self, group: str) -> list[str]:
        members = self.consumers.get(group)
        return sorted(members.clients) if members else []

    def subscription(self, group: str, topic: str) -> Subscription | None:
        members = self.consumers.get(group)
        if members is None:
            return None
        for client in members.clients.values():
            sub = client.subscriptions.get(topic)
            if sub is not None:
                return sub
        return None

    def members(self, group: str) -> list[ConsumerClient]:
        """The group's online consumers, by client id."""
        members = self.consumers.get(group)
        return [members.clients[c] for c in sorted(members.clients)] if members else []

    def member(self, group: str, client_id: str) -> ConsumerClient | None:
        members = self.consumers.get(group)
        return members.clients.get(client_id) if members else None

    def connections(self, group: str) -> list[object]:
        members = self.consumers.get(group)
        return [c.connection for c in members.clients.values()] if members else []
