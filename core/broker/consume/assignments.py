"""Queues balanced by the broker (RocketMQ's QueryAssignmentProcessor): QUERY_ASSIGNMENT (400)
tells one client of a consumer group which queues of a topic to read, and how (PULL or POP);
SET_MESSAGE_REQUEST_MODE (401) sets the how (core/broker/consume/request_modes.py). RocketMQ's Java
clients since 5.0 ask this when their rebalance runs on the broker (POP consumers).

Bodies (JSON), as RocketMQ's:

```
QUERY_ASSIGNMENT          {"topic", "consumerGroup", "clientId", "strategyName": "AVG" | "AVG_BY_CIRCLE",
                           "messageModel": "CLUSTERING" | "BROADCASTING"}
  answer                  {"messageQueueAssignments": [{"messageQueue": {"topic", "brokerName", "queueId"},
                                                        "mode": "PULL" | "POP"}, ...]}
SET_MESSAGE_REQUEST_MODE  {"topic", "consumerGroup", "mode": "PULL" | "POP", "popShareQueueNum"}
```

The queues are the topic's readable ones across the cluster, from the name servers
(core/broker/consume/topic_queues.py); the clients are those with a heartbeat for the group here. Clustering:
- PULL: the strategy's share of the sorted queues for this client among the sorted client ids;
- POP, ``popShareQueueNum`` <= 0, or at least the other clients' count: every client POPs every
  broker group whole (queue id -1);
- POP, N > 0: the client's own share and the shares of the N clients after it (so each queue is
  POPed by N + 1 clients); with more clients than queues, one queue each, round the list.
Broadcasting: every queue, to every client.

Where RocketMQ answers "no assignment" with an empty body that a client silently skips (an
unknown strategy, a client id that never sent a heartbeat here), this broker answers an error
naming why; an unknown topic stays an answer without assignments, as RocketMQ's.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import orjson

from core.broker.clients import ClientRegistry
from core.broker.consume.request_modes import BODY_BYTES_MAX, RequestMode, RequestModeError, RequestModeTable
from core.broker.consume.topic_queues import TopicQueues
from core.broker.tables.topics import TopicTable
from core.client.route import MessageQueue
from core.errors import RemotingError
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.request_headers import NoHeader
from core.topic_names import RETRY_PREFIX, group_problem, topic_problem

log = logging.getLogger(__name__)

STRATEGIES = ("AVG", "AVG_BY_CIRCLE")
MODELS = ("CLUSTERING", "BROADCASTING")
CLIENT_ID_MAX = 255


# ---------------------------------------------------------------------- allocation (pure)

class AssigningBroker(Protocol):
    """What QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE need from their broker (``Broker`` is
    one)."""

    clients: ClientRegistry
    request_modes: RequestModeTable
    topic_queues: TopicQueues
    topics: TopicTable


def allocate(strategy: str, client: str, queues: list[MessageQueue], clients: list[str]) -> list[MessageQueue]:
    """``client``'s share of sorted ``queues`` among sorted ``clients`` (RocketMQ's AVG: a run
    of neighbouring queues each; AVG_BY_CIRCLE: every len(clients)-th queue)."""
    if client not in clients or not queues:
        return []
    index, n = clients.index(client), len(clients)
    if strategy == "AVG_BY_CIRCLE":
        return queues[index::n]
    mod = len(queues) % n
    size = 1 if len(queues) <= n else len(queues) // n + (1 if mod and index < mod else 0)
    start = index * size if mod and index < mod else index * size + mod
    return [queues[(start + i) % len(queues)] for i in range(max(0, min(size, len(queues) - start)))]


def assign(mode: RequestMode, strategy: str, model: str, client: str, queues: list[MessageQueue],
           clients: list[str]) -> list[MessageQueue]:
    """The queues ``client`` reads (see the module's docstring)."""
    queues, clients = sorted(queues), sorted(clients)
    if model == "BROADCASTING":
        return queues
    if mode.mode != "POP":
        return allocate(strategy, client, queues, clients)
    if mode.pop_share <= 0 or mode.pop_share >= len(clients) - 1:  # each client would read every queue
        return sorted({MessageQueue(q.topic, q.broker_name, -1) for q in queues})
    if client not in clients:
        return []
    if len(clients) > len(queues):
        return [queues[clients.index(client) % len(queues)]]
    mine = list(allocate(strategy, client, queues, clients))
    index = clients.index(client)
    for step in range(1, mode.pop_share + 1):
        mine += allocate(strategy, clients[(index + step) % len(clients)], queues, clients)
    return sorted(set(mine))


# ---------------------------------------------------------------------- the requests

def _body(request: RemotingCommand) -> dict[str, Any]:
    if len(request.body) > BODY_BYTES_MAX:
        raise RequestModeError(f"a body of {len(request.body)} bytes (at most {BODY_BYTES_MAX})")
    try:
        doc = orjson.loads(request.body) if request.body else None
    except orjson.JSONDecodeError as exc:
        raise RequestModeError(f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RequestModeError("the body must be a JSON object")
    return doc


def set_message_request_mode(broker: AssigningBroker, header: NoHeader, request: RemotingCommand,
                             conn: Connection) -> RemotingCommand:
    try:
        mode = RequestMode.from_json(_body(request))
        if not mode.topic.startswith(RETRY_PREFIX) and broker.topics.get(mode.topic) is None:
            return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{mode.topic}] not exist")  # RocketMQ's words
        broker.request_modes.put(mode)
    except RequestModeError as exc:
        code = ResponseCode.NO_PERMISSION if "retry topic" in str(exc) else ResponseCode.SYSTEM_ERROR
        return request.reply(code, f"SET_MESSAGE_REQUEST_MODE: {exc}")
    log.info("message request mode of %s on %s: %s (popShareQueueNum %d)", mode.group, mode.topic, mode.mode,
             mode.pop_share)
    return request.reply(ResponseCode.SUCCESS)


def query_assignment(broker: AssigningBroker, header: NoHeader,
                     request: RemotingCommand, conn: Connection) -> Reply:
    try:
        doc = _body(request)
        topic, group, client = (doc.get(k) for k in ("topic", "consumerGroup", "clientId"))
        strategy, model = doc.get("strategyName", "AVG"), doc.get("messageModel", "CLUSTERING")
        if not isinstance(topic, str) or (problem := topic_problem(topic)):
            raise RequestModeError(f"topic: {problem if isinstance(topic, str) else 'missing'}")
        if not isinstance(group, str) or (problem := group_problem(group)):
            raise RequestModeError(f"consumerGroup: {problem if isinstance(group, str) else 'missing'}")
        if not isinstance(client, str) or not 0 < len(client) <= CLIENT_ID_MAX or not client.isprintable():
            raise RequestModeError(f"clientId must be 1 to {CLIENT_ID_MAX} printable characters")
        if strategy not in STRATEGIES:
            raise RequestModeError(f"strategyName {str(strategy)[:40]!r} is not one this broker has "
                                   f"({', '.join(STRATEGIES)})")
        if model not in MODELS:
            raise RequestModeError(f"messageModel must be {' or '.join(MODELS)}")
    except RequestModeError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"QUERY_ASSIGNMENT: {exc}")
    return _answer_assignment(broker, request, topic, group, client, strategy, model)


async def _answer_assignment(broker: AssigningBroker, request: RemotingCommand, topic: str, group: str, client: str,
                             strategy: str, model: str) -> RemotingCommand:
    mode = broker.request_modes.get(topic, group)
    if topic.startswith(RETRY_PREFIX):
        mode = RequestMode(topic, group)  # a retry topic is read by PULL, whatever was set
    try:
        queues = await broker.topic_queues.readable(topic)
    except RemotingError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"QUERY_ASSIGNMENT: {exc}")
    if queues is None:  # as RocketMQ: no assignment, and the client keeps what it had
        return request.reply(ResponseCode.SUCCESS, f"topic {topic} does not exist", body=b"{}")
    clients = broker.clients.consumer_ids(group)
    if model == "CLUSTERING" and client not in clients:
        return request.reply(ResponseCode.SYSTEM_ERROR, f"QUERY_ASSIGNMENT: client {client[:100]!r} has sent no "
                             f"heartbeat for group {group} to this broker")
    mine = assign(mode, strategy, model, client, queues, clients)
    body = {"messageQueueAssignments": [
        {"messageQueue": {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id}, "mode": mode.mode}
        for q in mine]}
    return request.reply(ResponseCode.SUCCESS, body=orjson.dumps(body))
