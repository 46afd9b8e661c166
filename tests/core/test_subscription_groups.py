"""Declared consumer groups: what the broker keeps, across a restart, and what it refuses."""

from __future__ import annotations

import orjson
import pytest

from core.broker.tables import change_journal
from core.broker.tables.subscription_groups import GroupConfigError, SubscriptionGroup, SubscriptionGroupTable


def test_groups_are_kept_across_a_restart_and_deleted(tmp_path) -> None:
    table = SubscriptionGroupTable(tmp_path / "subscriptionGroup.json")
    assert table.put(SubscriptionGroup.from_json({"groupName": "Orders", "consumeMessageOrderly": True}))
    assert not table.put(SubscriptionGroup("Orders", orderly=True))  # no change, no write
    again = SubscriptionGroupTable(tmp_path / "subscriptionGroup.json")
    assert again.groups == {"Orders": SubscriptionGroup("Orders", orderly=True)}
    assert again.wrapper()["subscriptionGroupTable"]["Orders"]["consumeMessageOrderly"] is True
    assert again.delete("Orders") and not again.delete("Orders")
    assert SubscriptionGroupTable(tmp_path / "subscriptionGroup.json").groups == {}


def test_a_change_is_a_journal_line_and_the_table_is_rewritten_now_and_then(tmp_path, monkeypatch) -> None:
    # found: every create rewrote the whole subscriptionGroup.json, so a create cost grew with
    # the groups (5,000 groups: a 5,000-entry rewrite and fsync a create)
    monkeypatch.setattr(change_journal, "JOURNAL_LINES_MIN", 4)
    path = tmp_path / "config" / "subscriptionGroup.json"
    table = SubscriptionGroupTable(path)
    for i in range(3):
        table.put(SubscriptionGroup(f"G{i}"))
    assert not path.exists() and len(table.journal.journal_path.read_bytes().splitlines()) == 3
    assert set(SubscriptionGroupTable(path).groups) == {"G0", "G1", "G2"}
    table.put(SubscriptionGroup("G3", orderly=True))  # the 4th change rewrites the table
    assert not table.journal.journal_path.exists()
    assert set(orjson.loads(path.read_bytes())["subscriptionGroupTable"]) == {"G0", "G1", "G2", "G3"}
    table.delete("G0")
    table.journal.journal_path.write_bytes(table.journal.journal_path.read_bytes() + b'{"put": {"groupN')  # torn
    again = SubscriptionGroupTable(path)
    assert set(again.groups) == {"G1", "G2", "G3"} and again.groups["G3"].orderly and again.version == table.version


@pytest.mark.parametrize("doc", [
    [], {}, {"groupName": ""}, {"groupName": "a b"}, {"groupName": "G", "consumeMessageOrderly": "yes"},
    {"groupName": "G", "retryMaxTimes": -1}, {"groupName": "G", "retryQueueNums": True},
], ids=["not-object", "no-name", "blank", "space", "flag", "negative", "bool-number"])
def test_what_is_not_a_group_config_is_refused(doc) -> None:
    with pytest.raises(GroupConfigError):
        SubscriptionGroup.from_json(doc)
