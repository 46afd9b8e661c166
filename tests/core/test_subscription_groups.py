"""Declared consumer groups: what the broker keeps, across a restart, and what it refuses."""

from __future__ import annotations

import pytest

from core.broker.subscription_groups import GroupConfigError, SubscriptionGroup, SubscriptionGroupTable


def test_groups_are_kept_across_a_restart_and_deleted(tmp_path) -> None:
    table = SubscriptionGroupTable(tmp_path / "subscriptionGroup.json")
    assert table.put(SubscriptionGroup.from_json({"groupName": "Orders", "consumeMessageOrderly": True}))
    assert not table.put(SubscriptionGroup("Orders", orderly=True))  # no change, no write
    again = SubscriptionGroupTable(tmp_path / "subscriptionGroup.json")
    assert again.groups == {"Orders": SubscriptionGroup("Orders", orderly=True)}
    assert again.wrapper()["subscriptionGroupTable"]["Orders"]["consumeMessageOrderly"] is True
    assert again.delete("Orders") and not again.delete("Orders")
    assert SubscriptionGroupTable(tmp_path / "subscriptionGroup.json").groups == {}


@pytest.mark.parametrize("doc", [
    [], {}, {"groupName": ""}, {"groupName": "a b"}, {"groupName": "G", "consumeMessageOrderly": "yes"},
    {"groupName": "G", "retryMaxTimes": -1}, {"groupName": "G", "retryQueueNums": True},
], ids=["not-object", "no-name", "blank", "space", "flag", "negative", "bool-number"])
def test_what_is_not_a_group_config_is_refused(doc) -> None:
    with pytest.raises(GroupConfigError):
        SubscriptionGroup.from_json(doc)
