"""The controller's rules for a broker group (replication/controller/group_state.py): who is
elected master, when the SyncStateSet may change, and that applying the events they return
gives every controller member the same state."""

from __future__ import annotations

import pytest

from core.remoting.codes import ResponseCode
from replication.controller.group_state import (
    Candidate,
    GroupState,
    MasterElected,
    Refused,
    alter_sync_state_set,
    apply,
    elect,
    register,
)


def group_with(*ids: int) -> dict[str, GroupState]:
    groups: dict[str, GroupState] = {}
    for broker_id in ids:
        event = register(groups.get("g", GroupState("g")), broker_id, f"127.0.0.1:{10911 + 10 * broker_id}")
        assert event is not None
        apply(groups, event)
    return groups


def live(**offsets: int) -> dict[int, Candidate]:
    """Candidates b0=..., b1=...: alive, at those log ends, epoch 1."""
    return {int(k[1:]): Candidate(int(k[1:]), True, 1, v) for k, v in offsets.items()}


def test_the_first_election_takes_the_configured_master_not_the_longest_log_or_the_first_to_ask():
    groups = group_with(1, 2, 0)  # slaves registered first
    event = elect(groups["g"], live(b0=100, b1=500, b2=50))
    assert (event.master_id, event.master_epoch, event.sync_state_set, event.sync_state_set_epoch) == (0, 1, {0}, 1)


def test_without_id_0_the_first_election_takes_the_longest_log():
    groups = group_with(1, 2)
    assert elect(groups["g"], live(b1=100, b2=300)).master_id == 2


def test_a_live_master_stays():
    groups = group_with(0, 1)
    apply(groups, elect(groups["g"], live(b0=1, b1=1)))
    with pytest.raises(Refused) as refused:
        elect(groups["g"], live(b0=1, b1=1))
    assert refused.value.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST


def test_a_dead_master_is_replaced_from_the_sync_state_set_only_by_epoch_then_log_then_priority():
    groups = group_with(0, 1, 2, 3)
    apply(groups, elect(groups["g"], live(b0=1, b1=1, b2=1, b3=1)))
    state = groups["g"]
    apply(groups, alter_sync_state_set(state, 0, 1, frozenset({0, 1, 2}), 1, frozenset({1, 2, 3})))
    candidates = {0: Candidate(0, False, 1, 900),
                  1: Candidate(1, True, 1, 700, priority=5),
                  2: Candidate(2, True, 1, 700, priority=1),
                  3: Candidate(3, True, 1, 990)}  # longest log, but out of the set
    event = elect(state, candidates)
    assert (event.master_id, event.master_epoch, event.sync_state_set_epoch) == (2, 2, 3)
    assert elect(state, {**candidates, 1: Candidate(1, True, 1, 800, priority=5)}).master_id == 1
    assert elect(state, {**candidates, 1: Candidate(1, True, 2, 10)}).master_id == 1  # a later epoch wins
    assert elect(state, candidates, unclean=True).master_id == 3


def test_no_live_in_sync_replica_leaves_the_group_without_a_master_and_its_epochs_as_they_were():
    groups = group_with(0, 1)
    apply(groups, elect(groups["g"], live(b0=1, b1=1)))
    event = elect(groups["g"], {0: Candidate(0, False), 1: Candidate(1, True, 1, 5)})
    assert event == MasterElected("g", None, 1, frozenset({0}), 1)


def test_a_preferred_broker_must_be_a_live_in_sync_replica():
    groups = group_with(0, 1)
    apply(groups, elect(groups["g"], live(b0=1, b1=1)))
    with pytest.raises(Refused) as refused:
        elect(groups["g"], live(b0=1, b1=1), prefer=1)
    assert refused.value.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    apply(groups, alter_sync_state_set(groups["g"], 0, 1, frozenset({0, 1}), 1, frozenset({1})))
    assert elect(groups["g"], live(b0=1, b1=1), prefer=1).master_id == 1  # a planned switchover


@pytest.mark.parametrize(("master", "epoch", "set_epoch", "members", "code"), [
    (1, 1, 1, {0, 1}, ResponseCode.CONTROLLER_INVALID_MASTER),
    (0, 0, 1, {0, 1}, ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH),
    (0, 1, 0, {0, 1}, ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
    (0, 1, 1, {1}, ResponseCode.CONTROLLER_INVALID_MASTER),
    (0, 1, 1, {0, 7}, ResponseCode.CONTROLLER_INVALID_REPLICAS),
    (0, 1, 1, {0, 2}, ResponseCode.CONTROLLER_INVALID_REPLICAS),  # known, not alive
])
def test_alter_sync_state_set_is_fenced(master, epoch, set_epoch, members, code):
    groups = group_with(0, 1, 2)
    apply(groups, elect(groups["g"], live(b0=1, b1=1, b2=1)))
    with pytest.raises(Refused) as refused:
        alter_sync_state_set(groups["g"], master, epoch, frozenset(members), set_epoch, frozenset({1}))
    assert refused.value.code == code


def test_members_applying_the_same_events_hold_the_same_state():
    events = []
    leader: dict[str, GroupState] = {}
    for broker_id in (0, 1, 2):
        event = register(leader.get("g", GroupState("g")), broker_id, f"h:{broker_id}")
        assert event is not None
        events.append(event)
        apply(leader, event)
    assert register(leader["g"], 1, "h:1") is None  # known there already: nothing to replicate
    for event in (elect(leader["g"], live(b0=1, b1=1, b2=1)),):
        events.append(event)
        apply(leader, event)
    event = alter_sync_state_set(leader["g"], 0, 1, frozenset({0, 1, 2}), 1, frozenset({1, 2}))
    events.append(event)
    apply(leader, event)
    follower: dict[str, GroupState] = {}
    for event in events:
        apply(follower, event)
    assert follower == leader
    assert (leader["g"].master_id, leader["g"].sync_state_set, leader["g"].sync_state_set_epoch) == (0, {0, 1, 2}, 2)
