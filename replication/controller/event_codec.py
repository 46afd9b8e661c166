"""The controller's events as the entries of its raft log: one JSON object per entry.

```
 {"event": "registered", "group": "broker-a", "brokerId": 1, "address": "127.0.0.1:10921"}
 {"event": "elected", "group": "broker-a", "masterId": 1 | null, "masterEpoch": 3,
  "syncStateSet": [1], "syncStateSetEpoch": 4}
 {"event": "altered", "group": "broker-a", "syncStateSet": [0, 1], "syncStateSetEpoch": 5}
 {"event": "cleaned", "group": "broker-a", "brokerIds": [2]}
```

Entries are checked field by field when read, as anything read from disk or the wire is: a
damaged one raises :class:`EventError` instead of corrupting the state.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.topic_names import group_problem
from replication.controller.group_state import (
    Event,
    MasterElected,
    ReplicaRegistered,
    ReplicasCleaned,
    SyncStateSetAltered,
)

ENTRY_BYTES_MAX = 64 * 1024
SET_SIZE_MAX = 1024
ADDRESS_CHARS_MAX = 255


class EventError(ValueError):
    """A raft entry that is not a controller event."""


def encode_event(event: Event) -> bytes:
    doc: dict[str, Any]
    if isinstance(event, ReplicaRegistered):
        doc = {"event": "registered", "group": event.group, "brokerId": event.broker_id, "address": event.address}
    elif isinstance(event, MasterElected):
        doc = {"event": "elected", "group": event.group, "masterId": event.master_id,
               "masterEpoch": event.master_epoch, "syncStateSet": sorted(event.sync_state_set),
               "syncStateSetEpoch": event.sync_state_set_epoch}
    elif isinstance(event, SyncStateSetAltered):
        doc = {"event": "altered", "group": event.group, "syncStateSet": sorted(event.sync_state_set),
               "syncStateSetEpoch": event.sync_state_set_epoch}
    else:
        doc = {"event": "cleaned", "group": event.group, "brokerIds": sorted(event.broker_ids)}
    return orjson.dumps(doc)


def decode_event(body: bytes) -> Event:
    if len(body) > ENTRY_BYTES_MAX:
        raise EventError(f"a controller entry of {len(body)} bytes")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise EventError("a controller entry is not JSON") from exc
    if not isinstance(doc, dict):
        raise EventError("a controller entry is not an object")
    group = doc.get("group")
    if not isinstance(group, str) or group_problem(group):
        raise EventError(f"bad broker group name {str(group)[:40]!r}")
    kind = doc.get("event")
    if kind == "registered":
        address = doc.get("address")
        if not isinstance(address, str) or not 0 < len(address) <= ADDRESS_CHARS_MAX:
            raise EventError("a registration without a valid address")
        return ReplicaRegistered(group, _count(doc, "brokerId"), address)
    if kind == "elected":
        master = doc.get("masterId")
        return MasterElected(group, None if master is None else _count(doc, "masterId"), _count(doc, "masterEpoch"),
                             _set(doc), _count(doc, "syncStateSetEpoch"))
    if kind == "altered":
        return SyncStateSetAltered(group, _set(doc), _count(doc, "syncStateSetEpoch"))
    if kind == "cleaned":
        return ReplicasCleaned(group, _set(doc, "brokerIds"))
    raise EventError(f"unknown controller event {str(kind)[:40]!r}")


def _count(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if type(value) is not int or not 0 <= value < 2**31:
        raise EventError(f"{key} must be a whole number from 0, not {str(value)[:40]!r}")
    return value


def _set(doc: dict[str, Any], key: str = "syncStateSet") -> frozenset[int]:
    members = doc.get(key)
    if not isinstance(members, list) or len(members) > SET_SIZE_MAX:
        raise EventError(f"{key} must be a list of broker ids")
    if any(type(m) is not int or not 0 <= m < 2**31 for m in members):
        raise EventError(f"{key} must hold broker ids")
    return frozenset(members)
