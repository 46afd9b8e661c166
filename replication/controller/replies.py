"""What the controller answers, built from the state (sans-IO): the master fields most answers
carry, the SyncStateSet body, GET_SYNC_STATE_DATA's BrokerReplicasInfo and ELECT_MASTER's body,
in RocketMQ's field names (see :mod:`core.remoting.controller_headers`)."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from core.remoting.controller_headers import sync_state_set_body
from replication.controller.group_state import GroupState


def master_fields(state: GroupState) -> dict[str, str]:
    """masterBrokerId, masterAddress, masterEpoch, syncStateSetEpoch (no master: the id and
    address are left out, as RocketMQ leaves out its nulls)."""
    fields = {"masterEpoch": str(state.master_epoch), "syncStateSetEpoch": str(state.sync_state_set_epoch)}
    if state.master_id is not None:
        fields["masterBrokerId"] = str(state.master_id)
        fields["masterAddress"] = state.replicas.get(state.master_id, "")
    return fields


def sync_state_set(state: GroupState) -> bytes:
    return sync_state_set_body(state.sync_state_set, state.sync_state_set_epoch)


def member_group(cluster: str, state: GroupState) -> dict[str, object]:
    """BrokerMemberGroup (its ids as quoted keys: standard JSON, which fastjson reads too)."""
    return {"brokerAddrs": {str(b): a for b, a in sorted(state.replicas.items())}, "brokerName": state.group,
            "cluster": cluster}


def elect_body(cluster: str, state: GroupState) -> bytes:
    return orjson.dumps({"brokerMemberGroup": member_group(cluster, state),
                         "syncStateSet": sorted(state.sync_state_set)})


def replicas_info(states: list[GroupState], alive: Callable[[str, int], bool]) -> bytes:
    """BrokerReplicasInfo of ``states``: each group's master and its replicas in and out of the
    SyncStateSet, with whether the controller believes each alive."""
    table = {}
    for state in states:
        def identity(broker_id: int, state: GroupState = state) -> dict[str, object]:
            return {"alive": alive(state.group, broker_id), "brokerAddress": state.replicas.get(broker_id, ""),
                    "brokerId": broker_id, "brokerName": state.group}
        info: dict[str, object] = {
            "inSyncReplicas": [identity(b) for b in sorted(state.sync_state_set)],
            "masterEpoch": state.master_epoch,
            "notInSyncReplicas": [identity(b) for b in sorted(state.replicas) if b not in state.sync_state_set],
            "syncStateSetEpoch": state.sync_state_set_epoch,
        }
        if state.master_id is not None:
            info |= {"masterAddress": state.replicas.get(state.master_id, ""), "masterBrokerId": state.master_id}
        table[state.group] = info
    return orjson.dumps({"replicasInfoTable": table})
