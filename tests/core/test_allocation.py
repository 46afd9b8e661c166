"""How a consumer group shares queues: every member's share computed alone, together a
partition of the queues."""

from __future__ import annotations

import pytest

from core.client.allocation import ALLOCATORS, allocate_average, allocate_consistent_hash
from core.client.route import MessageQueue

QUEUES = [MessageQueue("T", b, i) for b in ("broker-a", "broker-b") for i in range(8)]


def shares(allocator, queues, members):  # type: ignore[no-untyped-def]
    return {m: allocator(queues, members, m) for m in members}


@pytest.mark.parametrize("name", sorted(ALLOCATORS))
@pytest.mark.parametrize("members", [1, 2, 3, 5, 16, 20])
def test_shares_partition_the_queues(name, members):
    ids = [f"10.0.0.{i}@{100 + i}" for i in range(members)]
    got = shares(ALLOCATORS[name], QUEUES, ids)
    flat = [q for share in got.values() for q in share]
    assert sorted(flat) == sorted(QUEUES)  # each queue exactly once
    assert allocate_average(QUEUES, ids, "not-a-member") == []


def test_average_gives_contiguous_blocks_the_first_ones_bigger():
    got = shares(allocate_average, QUEUES, ["a", "b", "c"])
    assert [len(got[m]) for m in "abc"] == [6, 5, 5]
    assert got["a"] == QUEUES[0:6] and got["b"] == QUEUES[6:11] and got["c"] == QUEUES[11:16]
    many = shares(allocate_average, QUEUES[:2], ["a", "b", "c"])  # more members than queues
    assert [len(many[m]) for m in "abc"] == [1, 1, 0]


def test_consistent_hash_moves_only_the_queues_a_new_member_takes():
    before = shares(allocate_consistent_hash, QUEUES, ["a", "b", "c"])
    after = shares(allocate_consistent_hash, QUEUES, ["a", "b", "c", "d"])
    assert after["d"], "the new member got nothing: the ring is not spreading queues"
    for m in "abc":
        assert set(after[m]) <= set(before[m])  # nobody took another old member's queue
    moved = sum(len(before[m]) - len(after[m]) for m in "abc")
    assert moved == len(after["d"]) < len(QUEUES)
    # average, by contrast, reshuffles blocks
    avg_before = shares(allocate_average, QUEUES, ["a", "b", "c"])
    avg_after = shares(allocate_average, QUEUES, ["a", "b", "c", "d"])
    assert any(not set(avg_after[m]) <= set(avg_before[m]) for m in "abc")


def test_consistent_hash_does_not_depend_on_call_or_member_order():
    # md5 of fixed strings (no per-process hash seed), members in any order: members computing apart agree
    assert allocate_consistent_hash(QUEUES, ["a", "b"], "a") == allocate_consistent_hash(list(QUEUES), ["a", "b"], "a")
    assert [q.queue_id for q in allocate_consistent_hash(QUEUES[:8], ["a", "b"], "a")] == \
        [q.queue_id for q in allocate_consistent_hash(QUEUES[:8], ["b", "a"], "a")]
