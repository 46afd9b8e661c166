"""RESET_CONSUMER_CLIENT_OFFSET's body, as a broker sends it to a consumer: the ``offsetTable``
of a ResetOffsetBody, either a list of ``{"topic", "brokerName", "queueId", "offset"}`` objects
(mqctl's brokers) or fastjson's map keyed by queue objects (stock brokers), which is not JSON:

```
{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:42, ...}}
```
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from core.client.route import MessageQueue

_FASTJSON_QUEUE_KEY = re.compile(rb"(\{[^{}]*\})\s*:\s*(-?\d+)")


def _queue_of(doc: dict[str, Any]) -> MessageQueue:
    return MessageQueue(str(doc["topic"]), str(doc["brokerName"]), int(doc["queueId"]))


def parse_offset_table(body: bytes) -> dict[MessageQueue, int]:
    """The ``offsetTable`` of a ResetOffsetBody; raises ValueError when there is none."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        # fastjson's map keyed by queue objects: each {queue}:offset pair
        pairs = _FASTJSON_QUEUE_KEY.findall(body)
        if not pairs:
            raise ValueError("the body holds no offset table") from None
        try:
            return {_queue_of(orjson.loads(key)): int(offset) for key, offset in pairs}
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"bad queue in the offset table: {exc}") from None
    try:
        return {_queue_of(row): int(row["offset"]) for row in doc["offsetTable"]}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"the body's offsetTable is not a list of queues with offsets: {exc!r}") from None
