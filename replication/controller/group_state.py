"""What the controller knows of each broker group, and the rules that change it (RocketMQ 5's
ReplicasInfoManager and DefaultElectPolicy), sans-IO.

State per group: its replicas (broker id -> address), the master and its epoch, the SyncStateSet
(the replicas that hold everything the master acknowledged) and its epoch. A request is judged
against the state by a rule (:func:`elect`, :func:`alter_sync_state_set`, :func:`register`), which
returns an event or raises :class:`Refused` with RocketMQ's response code; :func:`apply` makes an
event part of the state. The controller's raft group replicates events, not requests, so every
controller member applies the same events in the same order and holds the same state; a rule
reads only the state and what the request carries (the candidates' liveness and logs come from
the controller leader's heartbeat table, :class:`Candidate`).

```
 elect:  candidates = SyncStateSet (every replica when unclean election is on), alive
         a live master is kept (MASTER_STILL_EXIST) unless another live candidate is preferred
         first election of a group: the configured id 0 when alive, else the longest log
         later: highest epoch, then longest log, then lowest priority number, then lowest id
         new master: master epoch + 1, SyncStateSet epoch + 1, SyncStateSet = {new master}
 alter:  only from the master of the current master epoch and SyncStateSet epoch (fencing); the
         new set holds the master and live, known replicas; its epoch + 1
```

Where RocketMQ differs: its first election picks whichever broker asked first; here it is the
configured master (id 0), so turning controller mode on for a running group never elects a
lagging slave.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from core.remoting.codes import ResponseCode

FIRST_MASTER_ID = 0  # the configured master of a group: the first election prefers it


class Refused(Exception):
    """A controller request the state does not allow; ``code`` is RocketMQ's answer."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass
class GroupState:
    """One broker group as the controller holds it."""

    group: str
    replicas: dict[int, str] = field(default_factory=dict)  # broker id -> address
    master_id: int | None = None
    master_epoch: int = 0  # 0: no master was ever elected
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A replica as the controller leader last heard of it: whether it is alive (heartbeats,
    its connection), the last epoch and log end it reported, its election priority (lower
    wins, as RocketMQ's brokerElectionPriority)."""

    broker_id: int
    alive: bool
    epoch: int = 0
    max_offset: int = 0
    priority: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ReplicaRegistered:
    group: str
    broker_id: int
    address: str


@dataclass(frozen=True, slots=True)
class MasterElected:
    """A new master (or none: ``master_id`` None when no candidate could take over; the epochs
    then stay, so a returning master's writes stay fenced until an election)."""

    group: str
    master_id: int | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class SyncStateSetAltered:
    group: str
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicasCleaned:
    """Replicas an operator removed from the group (CLEAN_BROKER_DATA): gone for good."""

    group: str
    broker_ids: frozenset[int]


Event = ReplicaRegistered | MasterElected | SyncStateSetAltered | ReplicasCleaned


def register(state: GroupState, broker_id: int, address: str) -> ReplicaRegistered | None:
    """A broker of the group says where it is; None when the controller knows it there already."""
    if broker_id < 0:
        raise Refused(ResponseCode.CONTROLLER_BROKER_ID_INVALID, f"broker id {broker_id} is negative")
    if state.replicas.get(broker_id) == address:
        return None
    return ReplicaRegistered(state.group, broker_id, address)


def elect(state: GroupState, candidates: Mapping[int, Candidate], *, prefer: int | None = None,
          unclean: bool = False) -> MasterElected:
    """The master ``state``'s group should have now, as an event; raises :class:`Refused` with
    MASTER_STILL_EXIST when the live master stays, ELECT_MASTER_FAILED when ``prefer`` cannot be
    elected. No eligible candidate: an event without a master."""
    def alive(broker_id: int) -> bool:
        c = candidates.get(broker_id)
        return c is not None and c.alive and broker_id in state.replicas

    master = state.master_id
    if master is not None and alive(master) and prefer in (None, master):
        raise Refused(ResponseCode.CONTROLLER_MASTER_STILL_EXIST, f"broker {master} of {state.group} is master and alive")
    first = state.master_epoch == 0
    pool = state.replicas.keys() if first or unclean else state.sync_state_set
    eligible = sorted(b for b in pool if alive(b))
    if prefer is not None:
        if prefer not in eligible:
            raise Refused(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                          f"broker {prefer} of {state.group} is not a live in-sync replica")
        chosen: int | None = prefer
    elif not eligible:
        chosen = None
    elif first:
        chosen = FIRST_MASTER_ID if FIRST_MASTER_ID in eligible else max(
            eligible, key=lambda b: (candidates[b].max_offset, -candidates[b].priority, -b))
    else:
        chosen = max(eligible, key=lambda b: (candidates[b].epoch, candidates[b].max_offset,
                                              -candidates[b].priority, -b))
    if chosen is None:
        return MasterElected(state.group, None, state.master_epoch, state.sync_state_set, state.sync_state_set_epoch)
    return MasterElected(state.group, chosen, state.master_epoch + 1, frozenset({chosen}),
                         state.sync_state_set_epoch + 1)


def alter_sync_state_set(state: GroupState, master_id: int, master_epoch: int, new_set: frozenset[int],
                         sync_state_set_epoch: int, alive: frozenset[int]) -> SyncStateSetAltered:
    """The master's request to change its SyncStateSet, judged: fenced unless it comes from the
    current master with the current epochs; the set must hold the master and only live, known
    replicas."""
    if state.master_id is None or master_id != state.master_id:
        raise Refused(ResponseCode.CONTROLLER_INVALID_MASTER,
                      f"broker {master_id} is not the master of {state.group} (it is {state.master_id})")
    if master_epoch != state.master_epoch:
        raise Refused(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                      f"master epoch {master_epoch} is not {state.master_epoch}")
    if sync_state_set_epoch != state.sync_state_set_epoch:
        raise Refused(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                      f"SyncStateSet epoch {sync_state_set_epoch} is not {state.sync_state_set_epoch}")
    if master_id not in new_set:
        raise Refused(ResponseCode.CONTROLLER_INVALID_MASTER, "a SyncStateSet must hold its master")
    unknown = sorted(b for b in new_set if b not in state.replicas or (b != master_id and b not in alive))
    if unknown:
        raise Refused(ResponseCode.CONTROLLER_INVALID_REPLICAS, f"brokers {unknown} are unknown or not alive")
    return SyncStateSetAltered(state.group, frozenset(new_set), state.sync_state_set_epoch + 1)


def clean(state: GroupState, broker_ids: frozenset[int], alive: frozenset[int]) -> ReplicasCleaned:
    """An operator's request to forget replicas: never the master or a live broker, whose data
    would otherwise be orphaned while it still serves."""
    if not broker_ids:
        raise Refused(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, "name the broker ids to clean")
    unknown = sorted(broker_ids - state.replicas.keys())
    if unknown:
        raise Refused(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                      f"brokers {unknown} are not replicas of {state.group}")
    busy = sorted(b for b in broker_ids if b == state.master_id or b in alive)
    if busy:
        raise Refused(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                      f"brokers {busy} of {state.group} are the master or alive: stop them first")
    return ReplicasCleaned(state.group, frozenset(broker_ids))


def apply(groups: dict[str, GroupState], event: Event) -> None:
    """Make ``event`` part of the state (every controller member, in the raft log's order)."""
    state = groups.setdefault(event.group, GroupState(event.group))
    if isinstance(event, ReplicaRegistered):
        state.replicas[event.broker_id] = event.address
    elif isinstance(event, MasterElected):
        state.master_id = event.master_id
        state.master_epoch = event.master_epoch
        state.sync_state_set = event.sync_state_set
        state.sync_state_set_epoch = event.sync_state_set_epoch
    elif isinstance(event, SyncStateSetAltered):
        state.sync_state_set = event.sync_state_set
        state.sync_state_set_epoch = event.sync_state_set_epoch
    else:
        for broker_id in event.broker_ids:
            state.replicas.pop(broker_id, None)
        state.sync_state_set = state.sync_state_set - event.broker_ids
