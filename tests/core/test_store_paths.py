"""The store's own check, whatever the caller: hostile names handed straight to the store never
make it open a path outside its folder, and records or folders with such names (written by an
older version, or by a hostile master) leave the store serving."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import UnsafePathError
from core.store.consume_queue import ConsumeQueue
from core.store.layout import CHECKPOINT_FILE
from core.store.message_store import opened_store
from core.store.paths import queue_dir
from formats.record import prepare_record
from tests.core.test_store import msg

HOSTILE = ["../../outside", "..", ".", "/tmp/outside", "a/../../outside", "Orders\n", "x\x00y", "", "%RETRY%../x",
           "x" * 300, "\u4e2d\u6587", "Or ders", "C:\\outside"]


def files_outside(tmp_path: Path, root: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if not p.is_relative_to(root) and not root.is_relative_to(p)]


@pytest.mark.parametrize("topic", HOSTILE)
def test_the_store_refuses_a_hostile_topic_and_writes_nothing(tmp_path, small_store_config, topic):
    root = tmp_path / "data" / "node"
    with opened_store(root, small_store_config) as store:
        end = store.commitlog.write_offset
        with pytest.raises(UnsafePathError):
            store.put(msg(1, topic=topic, queue=0))
        with pytest.raises(UnsafePathError):
            store.put_many([msg(i, topic=topic, queue=0) for i in range(3)])
        assert store.commitlog.write_offset == end  # refused before the append
        assert store.put(msg(2, topic="Orders", queue=0)).queue_offset == 0  # still serving
    assert files_outside(tmp_path, root) == []


@pytest.mark.parametrize("queue_id", [-1, -(2**31), 2**31, 2**63])
def test_the_store_refuses_a_queue_id_out_of_range(tmp_path, queue_id):
    with pytest.raises(UnsafePathError):
        queue_dir(tmp_path, "Orders", queue_id)


def test_a_symlink_planted_in_the_store_is_not_followed_out(tmp_path, small_store_config):
    root = tmp_path / "node"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "consumequeue").mkdir(parents=True)
    os.symlink(elsewhere, root / "consumequeue" / "Planted")
    with opened_store(root, small_store_config) as store:
        with pytest.raises(UnsafePathError, match="resolves outside"):
            store.put(msg(1, topic="Planted", queue=0))
    assert list(elsewhere.iterdir()) == []


def test_hostile_names_already_in_the_log_or_on_disk_are_skipped_and_the_store_opens(tmp_path, small_store_config):
    root = tmp_path / "data" / "node"
    with opened_store(root, small_store_config) as store:
        store.put(msg(0, topic="Orders", queue=0))
        # what an older version let through: written past the store's checks, straight to the log
        for i, topic in enumerate(["../../outside", "Orders\n"], start=1):
            rec = replace(msg(i, queue=0), topic=topic)
            store.commitlog.append(rec, prepare_record(rec), 0, 1_700_000_000_000)
        store.put(msg(3, topic="Orders", queue=0))
    (root / "consumequeue" / "Bad\n" / "0").mkdir(parents=True)  # a folder an older version made
    (root / CHECKPOINT_FILE).unlink()  # so recovery dispatches the whole log again
    with opened_store(root, small_store_config) as store:  # recovery re-dispatches the whole log
        assert store.max_queue_offset("Orders", 0) == 2
        assert ("../../outside", 0) in store.queues.refused and ("Orders\n", 0) in store.queues.refused
        assert store.put(msg(4, topic="Orders", queue=0)).queue_offset == 2
    assert files_outside(tmp_path, root) == []


def test_a_queue_offset_far_past_the_end_costs_at_most_one_file(tmp_path):
    # a queue offset read from a master's or a raft leader's log sizes the padding before it:
    # 10^12 entries would have been 300 files of padding made on the event loop
    cq = ConsumeQueue(tmp_path / "Orders" / "0", "Orders", 0, 64)
    assert cq.put_entry(0, 0, 100, 0)
    assert not cq.put_entry(10**12, 100, 100, 0)
    assert cq.put_entry(60, 200, 100, 0)  # a gap within a file's worth is padded, as before
    assert cq.max_offset == 61 and [i for i, _ in cq.entries(0, 100)] == [0, 60]
    assert len(cq.files.files) == 1
    fresh = ConsumeQueue(tmp_path / "Orders" / "1", "Orders", 1, 64)
    assert not fresh.put_entry(2**63 - 1, 0, 100, 0)  # its file's name would not fit 20 digits
    assert fresh.put_entry(10**9, 0, 100, 0) and len(fresh.files.files) == 1  # a replica starting mid-log
