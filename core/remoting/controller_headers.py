"""The headers and bodies of RocketMQ 5's controller requests (1001-1013, and 904 from a broker
to its controller), read where they enter the controller or a broker and built where they are
sent: one definition for both sides. Field names are RocketMQ's (``isLeader`` keeps its prefix);
every number is bounded to its Java type, every name checked.

```
 904  BROKER_HEARTBEAT       clusterName brokerAddr brokerName brokerId epoch maxOffset
                             confirmOffset heartbeatTimeoutMills electionPriority
                             (+ ours: haLinkDown "true" when a slave's HA link to its master is down)
 1001 ALTER_SYNC_STATE_SET   brokerName masterBrokerId masterEpoch     body SyncStateSet
                             -> newSyncStateSetEpoch                   body SyncStateSet
 1002 ELECT_MASTER           clusterName brokerName brokerId designateElect
                             -> masterBrokerId masterAddress masterEpoch syncStateSetEpoch
                                body {"brokerMemberGroup": {...}, "syncStateSet": [ids]}
 1003 REGISTER_BROKER        clusterName brokerName brokerId brokerAddress
                             -> masterBrokerId masterAddress masterEpoch syncStateSetEpoch
                                body SyncStateSet
 1004 GET_REPLICA_INFO       brokerName -> masterBrokerId masterAddress masterEpoch, SyncStateSet
 1005 GET_METADATA_INFO      -> group controllerLeaderId controllerLeaderAddress isLeader peers
 1006 GET_SYNC_STATE_DATA    body ["broker-a", ...] -> body BrokerReplicasInfo
 1008 NOTIFY_BROKER_ROLE_CHANGED  masterAddress masterEpoch syncStateSetEpoch masterBrokerId
                             body SyncStateSet                         (controller -> broker)
 1011 CLEAN_BROKER_DATA      brokerName brokerControllerIdsToClean ("1;2") isCleanLivingBroker
 1012 GET_NEXT_BROKER_ID     clusterName brokerName -> nextBrokerId
 1013 APPLY_BROKER_ID        clusterName brokerName appliedBrokerId registerCheckCode ("addr;ms")

 SyncStateSet body: {"syncStateSet": [0, 1], "syncStateSetEpoch": 3}
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from core.remoting.header_fields import HeaderFieldError, RequestHeader, boolean, number, text
from core.topic_names import group_problem

SET_SIZE_MAX = 1024  # replicas in one group's SyncStateSet, far more than any group has
BODY_BYTES_MAX = 64 * 1024
INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupHeader(RequestHeader):
    """Requests naming only a broker group (GET_REPLICA_INFO)."""

    broker_name: str = text("brokerName")


@dataclass(frozen=True, slots=True)
class HeartbeatHeader(RequestHeader):
    """BrokerHeartbeatRequestHeader, as a broker sends it to its controller."""

    cluster_name: str = text("clusterName")
    broker_addr: str = text("brokerAddr")
    broker_name: str = text("brokerName")
    broker_id: int = number("brokerId")
    epoch: int = number("epoch", -1, bits=32)
    max_offset: int = number("maxOffset", -1)
    confirm_offset: int = number("confirmOffset", -1)
    election_priority: int = number("electionPriority", INT_MAX, bits=32)
    ha_link_down: bool = boolean("haLinkDown")


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetHeader(RequestHeader):
    """AlterSyncStateSetRequestHeader (the set and its current epoch are in the body)."""

    broker_name: str = text("brokerName")
    master_broker_id: int = number("masterBrokerId")
    master_epoch: int = number("masterEpoch", bits=32)


@dataclass(frozen=True, slots=True)
class ElectMasterHeader(RequestHeader):
    """ElectMasterRequestHeader: ``designate_elect`` makes ``broker_id`` the one to elect (an
    operator's switchover); else ``broker_id`` is the asker (-1: none)."""

    cluster_name: str = text("clusterName", "")
    broker_name: str = text("brokerName")
    broker_id: int = number("brokerId", -1)
    designate_elect: bool = boolean("designateElect")


@dataclass(frozen=True, slots=True)
class RegisterHeader(RequestHeader):
    """RegisterBrokerToControllerRequestHeader."""

    cluster_name: str = text("clusterName", "")
    broker_name: str = text("brokerName")
    broker_id: int = number("brokerId")
    broker_address: str = text("brokerAddress")


@dataclass(frozen=True, slots=True)
class CleanBrokerDataHeader(RequestHeader):
    """CleanControllerBrokerDataRequestHeader."""

    broker_name: str = text("brokerName")
    broker_controller_ids_to_clean: str = text("brokerControllerIdsToClean", "")
    is_clean_living_broker: bool = boolean("isCleanLivingBroker")


@dataclass(frozen=True, slots=True)
class NextBrokerIdHeader(RequestHeader):
    """GetNextBrokerIdRequestHeader."""

    cluster_name: str = text("clusterName", "")
    broker_name: str = text("brokerName")


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdHeader(RequestHeader):
    """ApplyBrokerIdRequestHeader: the check code starts with the broker's address."""

    cluster_name: str = text("clusterName", "")
    broker_name: str = text("brokerName")
    applied_broker_id: int = number("appliedBrokerId")
    register_check_code: str = text("registerCheckCode")


@dataclass(frozen=True, slots=True)
class RoleNotice(RequestHeader):
    """NotifyBrokerRoleChangedRequestHeader (controller -> broker); the SyncStateSet is the body.
    ``master_broker_id`` -1: the group has no master now."""

    master_address: str = text("masterAddress", "")
    master_epoch: int = number("masterEpoch", bits=32)
    sync_state_set_epoch: int = number("syncStateSetEpoch", bits=32)
    master_broker_id: int = number("masterBrokerId", -1)


def broker_id_problem(broker_id: int) -> str | None:
    return None if 0 <= broker_id <= INT_MAX else f"broker id {broker_id} is out of range"


def checked_group(name: str) -> str:
    """A broker group name from the wire, or HeaderFieldError."""
    problem = group_problem(name)
    if problem:
        raise HeaderFieldError(f"brokerName: {problem}")
    return name


def sync_state_set_body(members: frozenset[int] | set[int], epoch: int) -> bytes:
    return orjson.dumps({"syncStateSet": sorted(members), "syncStateSetEpoch": epoch})


def parse_sync_state_set(body: bytes) -> tuple[frozenset[int], int]:
    """A SyncStateSet body: (members, epoch); HeaderFieldError when it is not one."""
    doc = _json(body)
    members, epoch = doc.get("syncStateSet"), doc.get("syncStateSetEpoch")
    if not isinstance(members, list) or len(members) > SET_SIZE_MAX:
        raise HeaderFieldError(f"syncStateSet must be a list of at most {SET_SIZE_MAX} broker ids")
    if any(type(m) is not int or broker_id_problem(m) for m in members):
        raise HeaderFieldError("syncStateSet must hold broker ids")
    if type(epoch) is not int or not 0 <= epoch <= INT_MAX:
        raise HeaderFieldError("syncStateSetEpoch must be a whole number")
    return frozenset(members), epoch


def parse_group_names(body: bytes) -> list[str]:
    """GET_SYNC_STATE_DATA's body: a JSON list of broker group names."""
    doc = _json(body, list)
    if len(doc) > SET_SIZE_MAX or not all(isinstance(n, str) for n in doc):
        raise HeaderFieldError("the body must be a list of broker group names")
    return [checked_group(n) for n in doc]


def parse_ids(text_ids: str) -> frozenset[int]:
    """CLEAN_BROKER_DATA's ``1;2``."""
    try:
        ids = frozenset(int(part) for part in text_ids.split(";") if part.strip())
    except ValueError:
        raise HeaderFieldError(f"brokerControllerIdsToClean {text_ids[:40]!r} is not ids separated by ';'") from None
    if len(ids) > SET_SIZE_MAX or any(broker_id_problem(i) for i in ids):
        raise HeaderFieldError("brokerControllerIdsToClean holds an id out of range")
    return ids


def _json(body: bytes, kind: type = dict) -> Any:
    if len(body) > BODY_BYTES_MAX:
        raise HeaderFieldError(f"a body of {len(body)} bytes (at most {BODY_BYTES_MAX})")
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        raise HeaderFieldError("the body is not JSON") from None
    if not isinstance(doc, kind):
        raise HeaderFieldError(f"the body must be a JSON {'object' if kind is dict else 'list'}")
    return doc
