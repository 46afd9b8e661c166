"""Which topics and consumer groups each request names, and the permission each needs: the one
table the brokers and the proxy's remoting door check (the gRPC door's RPCs are sent upstream
as these requests, signed with the caller's account, so the brokers check them again).

A rule names attributes of its code's declared header type
(:data:`core.remoting.request_headers.HEADER_TYPES`), read from the header as parsed for the
handler: what is checked is what the handler acts on. Names a handler finds only in the store
are checked by the handler, through the same policy (``Broker.acl_refusal``): the topic of a
message viewed or sent back by its CommitLog offset, the real topic of a transaction half.

Every request code a broker or the controller serves is in exactly one of :data:`RULES` (it names topics or
groups), :data:`ADMIN_CODES` (an admin account only) or :data:`NAMES_NOTHING` (with why);
``tests/core/test_acl_requests.py`` walks the broker's request table to hold that, and
docs/security.md shows :func:`rules_table`. As RocketMQ's ACL, a group is checked as the
resource ``%RETRY%<group>`` (``groupPerms``). Where RocketMQ checks less, we check more:

- BATCH_ACK_MESSAGE (RocketMQ checks nothing: its names are in the body): each entry's group
  and topic need SUB;
- LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (the same): the group and every queue's topic need SUB;
- the offset, stats and connection queries need SUB where RocketMQ 4.x checks nothing;
- an ack or a change of invisible time on a POP retry topic (``%RETRY%<group>_<topic>`` or
  ``+<topic>``) needs SUB on the topic it retries; RocketMQ reads the whole name as a group;
- END_TRANSACTION (RocketMQ 4.x checks only the signature) needs PUB on the half's real topic;
- CONSUMER_SEND_MSG_BACK needs SUB on the topic of the message it copies (RocketMQ checks what
  the request names, not that topic, so an account could read any topic through its own DLQ).

Producer groups carry no permission in ``plain_acl.yml`` (as in RocketMQ): attributes naming
one (``producerGroup``, a V2 send's ``a``) are not checked. A transaction is ended only with the
producer group its half message names (:mod:`core.broker.transactions.transaction_service`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from core.acl.permissions import PUB, RETRY_PREFIX, SUB, group_resource, perm_text
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.header_fields import HeaderFieldError
from core.remoting.request_headers import HEADER_TYPES, wire_name

Resource = tuple[str, int]  # (a topic, or %RETRY%<group>; the permission needed)
Names = Iterable[tuple[str, str, str | None]]  # (kind "topic"/"group", name, the group it is consumed as)

POP_RETRY_SEPARATORS = ("_", "+")  # RocketMQ's POP retry topics V1 and V2


@dataclass(frozen=True, slots=True)
class Rule:
    """Where one request code names topics and groups, and the permission a topic needs
    (a group always needs SUB)."""

    topics: tuple[str, ...] = ()  # attributes of the declared header naming a topic
    groups: tuple[str, ...] = ()  # attributes of the declared header naming a consumer group
    topic_perm: int = SUB
    body: Callable[[bytes], Names] | None = None  # names carried in the body
    body_names: str = ""  # what the body names, as docs/security.md says it

    def resources(self, header: object | None, body: bytes) -> list[Resource]:
        """What ``header`` (the declared type, parsed; ``None``: it did not parse, and names
        nothing) and ``body`` name."""
        named: list[tuple[str, str, str | None]] = []
        if header is not None:
            group = next((value for f in self.groups if (value := getattr(header, f))), None)
            named += [("topic", value, group) for f in self.topics if (value := getattr(header, f))]
            named += [("group", value, None) for f in self.groups if (value := getattr(header, f))]
        if self.body is not None:
            named += list(self.body(body or b""))
        return [resource(kind, name, of_group, self.topic_perm) for kind, name, of_group in named if name]


def resource(kind: str, name: str, of_group: str | None, topic_perm: int) -> Resource:
    """A name as the ACL checks it: a group (``kind`` "group") as ``%RETRY%<group>`` with SUB; a
    topic with ``topic_perm``, but a retry topic with SUB: a POP retry topic of ``of_group``
    (the group it is consumed as; ``%RETRY%<group>_<topic>`` or ``+<topic>``) as the topic it
    retries, any other ``%RETRY%<group>`` as that group."""
    if kind == "group":
        return group_resource(name), SUB
    if name.startswith(RETRY_PREFIX):
        if of_group:  # a POP retry topic of the request's own group: the topic it retries
            for separator in POP_RETRY_SEPARATORS:
                prefix = f"{RETRY_PREFIX}{of_group}{separator}"
                if name.startswith(prefix) and len(name) > len(prefix):
                    return name[len(prefix):], SUB
        return name, SUB  # a group's retry topic: the group's SUB (a send-back sends there)
    return name, topic_perm


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None  # the handler answers a bad body, and nothing named in it is used


def _heartbeat_names(body: bytes) -> Names:
    doc = _json(body)
    for consumer in (doc.get("consumerDataSet") or []) if isinstance(doc, dict) else []:
        if not isinstance(consumer, dict):
            continue
        group = str(consumer.get("groupName") or "")
        yield "group", group, None
        for sub in consumer.get("subscriptionDataSet") or []:
            if isinstance(sub, dict):
                yield "topic", str(sub.get("topic") or ""), group


def _lock_names(body: bytes) -> Names:
    doc = _json(body)
    if not isinstance(doc, dict):
        return
    group = str(doc.get("consumerGroup") or "")
    yield "group", group, None
    for queue in doc.get("mqSet") or []:
        if isinstance(queue, dict):
            yield "topic", str(queue.get("topic") or ""), group


def _batch_ack_names(body: bytes) -> Names:
    doc = _json(body)
    for entry in (doc.get("acks") or []) if isinstance(doc, dict) else []:
        if isinstance(entry, dict):
            group = str(entry.get("c") or "")
            yield "group", group, None
            yield "topic", str(entry.get("t") or ""), group


def _assignment_names(body: bytes) -> Names:
    doc = _json(body)
    if isinstance(doc, dict):
        group = str(doc.get("consumerGroup") or "")
        yield "group", group, None
        yield "topic", str(doc.get("topic") or ""), group


_CONSUMER = Rule(topics=("topic",), groups=("consumer_group",))
_POP = Rule(topics=("topic",), groups=("group",))  # the POP headers' attribute for consumerGroup
RULES: Mapping[int, Rule] = MappingProxyType({
    RequestCode.SEND_MESSAGE: Rule(topics=("topic",), topic_perm=PUB),
    RequestCode.SEND_MESSAGE_V2: Rule(topics=("topic",), topic_perm=PUB),
    RequestCode.SEND_BATCH_MESSAGE: Rule(topics=("topic",), topic_perm=PUB),
    RequestCode.RECALL_MESSAGE: Rule(topics=("topic",), topic_perm=PUB),
    RequestCode.CONSUMER_SEND_MSG_BACK: Rule(groups=("group",)),  # then the message's topic, by its handler
    RequestCode.PULL_MESSAGE: _CONSUMER,
    RequestCode.POP_MESSAGE: _POP,
    RequestCode.ACK_MESSAGE: _POP,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _POP,
    RequestCode.NOTIFICATION: _CONSUMER,
    RequestCode.BATCH_ACK_MESSAGE: Rule(body=_batch_ack_names, body_names="each entry's group `c` and topic `t`"),
    RequestCode.QUERY_CONSUMER_OFFSET: _CONSUMER,
    RequestCode.UPDATE_CONSUMER_OFFSET: _CONSUMER,
    RequestCode.GET_CONSUME_STATS: _CONSUMER,
    RequestCode.HEART_BEAT: Rule(body=_heartbeat_names,
                                 body_names="each consumer's group and its subscriptions' topics"),
    RequestCode.LOCK_BATCH_MQ: Rule(body=_lock_names, body_names="`consumerGroup` and each queue's topic"),
    RequestCode.UNLOCK_BATCH_MQ: Rule(body=_lock_names, body_names="`consumerGroup` and each queue's topic"),
    RequestCode.QUERY_ASSIGNMENT: Rule(body=_assignment_names, body_names="`consumerGroup` and `topic`"),
    RequestCode.UNREGISTER_CLIENT: Rule(groups=("consumer_group",)),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: Rule(groups=("consumer_group",)),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: Rule(groups=("consumer_group",)),
    RequestCode.GET_CONSUMER_RUNNING_INFO: Rule(groups=("consumer_group",)),
    RequestCode.QUERY_MESSAGE: Rule(topics=("topic",)),
    RequestCode.GET_MAX_OFFSET: Rule(topics=("topic",)),
    RequestCode.GET_MIN_OFFSET: Rule(topics=("topic",)),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: Rule(topics=("topic",)),
    RequestCode.GET_EARLIEST_MSG_STORETIME: Rule(topics=("topic",)),
})

# requests that change the broker or other clients' state: admin accounts only
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RequestCode.TRANSFER_LEADERSHIP,
    25,   # UPDATE_BROKER_CONFIG (not served; refused here first)
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.SET_MESSAGE_REQUEST_MODE,  # how every client of a group reads a topic
    215,  # DELETE_TOPIC_IN_BROKER (not served)
    # controller mode: what changes a group's master, SyncStateSet or replicas, or a broker's role
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_APPLY_BROKER_ID,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CONTROLLER_ELECT_MASTER, RequestCode.CLEAN_BROKER_DATA,
    RequestCode.UPDATE_CONTROLLER_CONFIG, RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
})

# requests served that name no topic and no group: a valid signature is all they need
NAMES_NOTHING: Mapping[int, str] = MappingProxyType({
    RequestCode.GET_BROKER_RUNTIME_INFO: "the broker's own counters",
    RequestCode.GET_ALL_TOPIC_CONFIG: "every topic's queue counts and permissions (a slave copies them)",
    RequestCode.GET_ALL_CONSUMER_OFFSET: "every group's offsets (a slave copies them)",
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "every declared group's settings (proxies read which consume in order)",
    RequestCode.VIEW_MESSAGE_BY_ID: "a commit log offset (the handler then needs SUB on the topic of the message found)",
    RequestCode.END_TRANSACTION: "a transaction half by its two offsets (the handler then needs PUB on the half's "
                                 "real topic, and the producer group the half names)",
    RequestCode.CHECK_CLIENT_CONFIG: "a filter expression to parse (its body's group and topic are not used)",
    RequestCode.CONTROLLER_GET_REPLICA_INFO: "a broker group's master and SyncStateSet (the controller)",
    RequestCode.CONTROLLER_GET_METADATA_INFO: "the controller group's leader and members",
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: "broker groups' replicas and whether each is alive (the controller)",
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: "the next unused broker id of a group (the controller)",
    RequestCode.GET_CONTROLLER_CONFIG: "the controller's settings",
    RequestCode.GET_BROKER_EPOCH_CACHE: "a broker's epochs and log end (a returning slave compares them)",
})


def request_resources(request: RemotingCommand, header: object | None = None) -> list[Resource]:
    """(resource, permission needed) for each topic or group the request names. ``header`` is
    its header parsed with the code's declared type; without it, it is parsed here, and one that
    does not parse names nothing (its handler is never run: the broker refuses it)."""
    rule = RULES.get(request.code)
    if rule is None:
        return []
    if header is None and (rule.topics or rule.groups):
        try:
            header = HEADER_TYPES[request.code].of(request)
        except HeaderFieldError:
            header = None
    return rule.resources(header, request.body)


def rules_table() -> str:
    """The table docs/security.md shows: each request code that names topics or groups, the
    header fields (as sent) or body names its handler reads them from, and the permission each
    needs."""
    rows = ["| request | topic (permission) | group (SUB) | in the body (SUB) |", "|---|---|---|---|"]
    for code, rule in sorted(RULES.items()):
        name = RequestCode(code).name
        topics = ", ".join(f"`{wire_name(code, f)}`" for f in rule.topics)
        groups = ", ".join(f"`{wire_name(code, f)}`" for f in rule.groups)
        rows.append(f"| {name} ({int(code)}) | {f'{topics} ({perm_text(rule.topic_perm)})' if topics else '-'} | "
                    f"{groups or '-'} | {rule.body_names or '-'} |")
    return "\n".join(rows)
