"""The broker's topic table on disk: a change is one journal line, not a rewrite; the table is
rewritten now and then; a reload (a restart, a crash) gives the same topics."""

from __future__ import annotations

import orjson

from core.broker.tables import change_journal
from core.broker.tables.topics import TopicConfig, TopicTable


def _table(path):
    return TopicTable(path, auto_create=False, default_queue_nums=8)


def test_changes_are_journal_lines_and_a_reload_replays_them(tmp_path) -> None:
    path = tmp_path / "config" / "topics.json"
    table = _table(path)
    for i in range(5):
        assert table.put(TopicConfig(f"T{i}", 4, 4, 6))
    assert table.delete("T3")
    assert table.put(TopicConfig("T1", 8, 8, 6))
    assert not path.exists()  # nothing rewritten yet
    assert len(table.journal.journal_path.read_bytes().splitlines()) == 7
    again = _table(path)
    assert again.topics == table.topics and again.version == table.version
    assert set(again.topics) == {"T0", "T1", "T2", "T4"} and again.topics["T1"].write_queue_nums == 8
    # what the registration loop takes: every name changed since, deletions marked
    assert table.unregistered == {"T0": False, "T1": False, "T2": False, "T3": True, "T4": False}


def test_the_table_is_rewritten_once_the_journal_is_as_long_and_replay_over_it_is_harmless(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(change_journal, "JOURNAL_LINES_MIN", 4)
    path = tmp_path / "topics.json"
    table = _table(path)
    for i in range(4):
        table.put(TopicConfig(f"T{i}", 1, 1, 6))
    assert path.exists() and not table.journal.journal_path.exists()  # the 4th change rewrote the table
    assert set(orjson.loads(path.read_bytes())["topicConfigTable"]) == {"T0", "T1", "T2", "T3"}
    table.delete("T0")
    table.put(TopicConfig("T9", 1, 1, 6))
    journal = table.journal.journal_path.read_bytes()
    # a crash after a rewrite but before the journal went: the old lines replayed over the new table
    table.save()
    table.journal.journal_path.write_bytes(journal + b'{"put": {"topicName": "T5", "readQ')  # and a torn last line
    again = _table(path)
    assert set(again.topics) == {"T1", "T2", "T3", "T9"}
