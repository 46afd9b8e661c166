"""Recovery after crashes: a real child killed with SIGKILL mid-write, torn tails, queues
rebuilt from the CommitLog, and damage that must stop the store from starting."""

import dataclasses
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from core.errors import StoreCorruptError
from core.store.checkpoint import read_checkpoint, write_checkpoint
from core.store.message_store import MessageStore, opened_store
from formats.record import MessageRecord, encode_record
from formats.segments import Damage, RecordAt, scan_log, segment_name
from tests.core.crash_writer import record as crash_record

WRITER = Path(__file__).with_name("crash_writer.py")


def msg(i: int) -> MessageRecord:
    return MessageRecord(topic="R", queue_id=i % 2, body=f"payload-{i}".encode() * 10,
                         properties={"KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"})


def fill(root: Path, config, count: int) -> list:
    with opened_store(root, config) as store:
        return [store.put(msg(i)) for i in range(count)]


def segment_path(root: Path, offset: int, size: int) -> Path:
    return root / "commitlog" / segment_name(offset - offset % size)


def mark_crashed(root: Path) -> None:
    (root / "abort").touch()


def fill_with_torn_tail(root: Path, config, count: int, torn_bytes: int) -> tuple[list, int]:
    """``count`` records, then the first ``torn_bytes`` of another (a write a crash cut short);
    the put results and where the torn record begins."""
    results = fill(root, config, count)
    end = results[-1].phys_offset + results[-1].size
    with open(segment_path(root, end, config.segment_size_bytes), "r+b") as fh:
        fh.seek(end % config.segment_size_bytes)
        fh.write(bytes(encode_record(msg(999)))[:torn_bytes])
    return results, end


def test_torn_tail_is_cut_at_the_last_valid_record(tmp_path, small_store_config):
    root = tmp_path / "n"
    _, end = fill_with_torn_tail(root, small_store_config, 100, 57)
    mark_crashed(root)
    store = MessageStore(root, small_store_config)
    report = store.open()
    try:
        assert not report.clean_shutdown
        assert report.log.end == end and 0 < report.log.cut_bytes <= 57
        assert store.max_queue_offset("R", 0) == 50
        again = store.put(msg(100))
        assert again.phys_offset == end and again.queue_offset == 50
    finally:
        trio.run(store.close)
    items = list(scan_log(root / "commitlog"))
    assert not [i for i in items if isinstance(i, Damage)] and len(items) == 101


def test_kill_between_creating_the_next_segment_and_its_blank_is_a_torn_tail(tmp_path, small_store_config):
    """A roll creates the next segment first, then closes the current one with a BLANK: a
    kill in between leaves an unterminated segment followed by an empty one."""
    root = tmp_path / "n"
    size = small_store_config.segment_size_bytes
    results = fill(root, small_store_config, 100)
    end = results[-1].phys_offset + results[-1].size
    assert end < size
    with open(root / "commitlog" / segment_name(size), "wb") as fh:
        fh.truncate(size)
    mark_crashed(root)
    with opened_store(root, small_store_config) as store:
        assert store.commitlog.write_offset == end
        assert [f.start for f in store.commitlog.files.files] == [0]
        more = [store.put(msg(i)) for i in range(100, 300)]
    assert more[0].phys_offset == end and more[-1].phys_offset >= size
    items = list(scan_log(root / "commitlog"))
    assert not [i for i in items if isinstance(i, Damage)] and len(items) == 300


def test_unterminated_segment_before_valid_records_refuses_to_start(tmp_path, small_store_config):
    root = tmp_path / "n"
    size = small_store_config.segment_size_bytes
    results = fill(root, small_store_config, 300)
    first_in_next = next(r for r in results if r.phys_offset >= size)
    last_in_first = max((r for r in results if r.phys_offset < size), key=lambda r: r.phys_offset)
    blank_at = last_in_first.phys_offset + last_in_first.size
    with open(root / "commitlog" / segment_name(0), "r+b") as fh:
        fh.seek(blank_at)
        fh.write(bytes(8))  # the BLANK is gone, the next segment's records are not
    (root / "checkpoint").unlink()
    mark_crashed(root)
    with pytest.raises(StoreCorruptError) as info:
        MessageStore(root, small_store_config).open()
    assert info.value.offset == blank_at and first_in_next.phys_offset == size


def test_queue_entries_past_the_recovered_end_are_dropped(tmp_path, small_store_config):
    """Async flush + power loss: queues were flushed, the CommitLog tail was not."""
    root = tmp_path / "n"
    results = fill(root, small_store_config, 60)
    cut = results[57].phys_offset
    seg = segment_path(root, cut, small_store_config.segment_size_bytes)
    with open(seg, "r+b") as fh:  # the last three records never reached the disk
        fh.seek(cut % small_store_config.segment_size_bytes)
        fh.write(bytes(sum(r.size for r in results[57:])))
    point = read_checkpoint(root / "checkpoint")
    write_checkpoint(root / "checkpoint", dataclasses.replace(point, commitlog_flushed_offset=results[50].phys_offset))
    mark_crashed(root)
    with opened_store(root, small_store_config) as store:
        assert store.commitlog.write_offset == cut
        assert store.max_queue_offset("R", 0) == 29 and store.max_queue_offset("R", 1) == 28
        assert store.query_by_key("R", "k58") == []
        assert store.put(msg(57)).queue_offset == 28


def test_consume_queues_and_index_are_rebuilt_from_the_commitlog(tmp_path, small_store_config):
    root = tmp_path / "n"
    results = fill(root, small_store_config, 300)
    with opened_store(root, small_store_config) as store:
        expected = {k: [(i, e) for i, e in store.queue_entries("R", k, 0, 1000)] for k in (0, 1)}
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    (root / "checkpoint").unlink()
    with opened_store(root, small_store_config) as store:
        for k in (0, 1):
            assert store.queue_entries("R", k, 0, 1000) == expected[k]
        assert len(store.query_by_key("R", "k123")) == 1
        assert store.put(msg(300)).queue_offset == 150
        assert results[-1].queue_offset == 149


def test_damage_followed_by_valid_records_refuses_to_start(tmp_path, small_store_config):
    root = tmp_path / "n"
    results = fill(root, small_store_config, 40)
    (root / "checkpoint").unlink()  # recovery scans the whole log
    victim = results[10]
    seg = segment_path(root, victim.phys_offset, small_store_config.segment_size_bytes)
    with open(seg, "r+b") as fh:
        fh.seek(victim.phys_offset % small_store_config.segment_size_bytes + 100)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(StoreCorruptError) as info:
        MessageStore(root, small_store_config).open()
    assert info.value.path == seg and info.value.offset == victim.phys_offset % small_store_config.segment_size_bytes
    assert "body crc mismatch" in str(info.value)
    lenient = dataclasses.replace(small_store_config, recover_cut_damage=True)
    with opened_store(root, lenient) as store:
        assert store.commitlog.write_offset == victim.phys_offset


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_sigkill_mid_write_loses_no_acknowledged_record(tmp_path, subprocess_env, flush):
    root = tmp_path / "crash"
    segment = 32 * 1024
    rng = random.Random(flush)
    acked: dict[int, tuple[int, int]] = {}
    for round_ in range(3):  # kill, recover, write more, kill again
        proc = subprocess.Popen([sys.executable, str(WRITER), str(root), flush, str(segment)],
                                stdout=subprocess.PIPE, env=subprocess_env, text=True)
        target = len(acked) + rng.randint(150, 400)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                _, i, phys, qoff = line.split()
                acked[int(i) + (round_ * 1_000_000)] = (int(phys), int(qoff))
                if len(acked) >= target:
                    proc.send_signal(signal.SIGKILL)
                    break
            rest = proc.communicate(timeout=30)[0]
        finally:
            proc.kill()
        for line in rest.splitlines():  # acks already written to the pipe when the kill landed
            _, i, phys, qoff = line.split()
            acked[int(i) + (round_ * 1_000_000)] = (int(phys), int(qoff))
        assert proc.returncode == -signal.SIGKILL
        assert (root / "abort").exists()
        config = dataclasses.replace(
            __import__("core.config", fromlist=["StoreConfig"]).StoreConfig(),
            segment_size_bytes=segment, cq_entries_per_file=100, index_slots=101, index_entries=500,
            flush=flush,
        )
        with opened_store(root, config) as store:
            for key, (phys, qoff) in acked.items():
                i = key % 1_000_000
                want = crash_record(i)
                got = store.read_record(phys)
                assert (got.body, got.properties["KEYS"], got.queue_offset) == (want.body, f"k{i}", qoff)
                ((index, entry),) = store.queue_entries("Crash", got.queue_id, qoff, 1)
                assert index == qoff and entry.phys_offset == phys
        items = list(scan_log(root / "commitlog"))
        assert not [d for d in items if isinstance(d, Damage)]
        assert len([r for r in items if isinstance(r, RecordAt)]) >= len(acked)


def test_a_flushed_offset_inside_a_record_whose_tail_never_came_is_cut_back_to_the_record(tmp_path, small_store_config):
    """A slave copies the master's log as bytes: killed mid-copy, its checkpoint's flushed
    offset can point inside a record whose tail never arrived, with unwritten space after it.
    Recovery must end at the record's start, not at the flushed offset (which once left the
    store unable to start: "record size 200 runs past the end of data")."""
    root = tmp_path / "n"
    results, end = fill_with_torn_tail(root, small_store_config, 100, 77)
    checkpoint = read_checkpoint(root / "checkpoint")
    assert checkpoint is not None
    write_checkpoint(root / "checkpoint", dataclasses.replace(
        checkpoint, commitlog_flushed_offset=end + 77, dispatched_offset=results[-3].phys_offset))
    mark_crashed(root)
    store = MessageStore(root, small_store_config)
    report = store.open()
    try:
        assert report.log.end == end and 0 < report.log.cut_bytes <= 77
        assert report.log.scanned_from == results[-3].phys_offset  # from the dispatched record, not the segment
        assert store.max_queue_offset("R", 0) == 50 and store.max_queue_offset("R", 1) == 50
        assert store.put(msg(100)).phys_offset == end
    finally:
        trio.run(store.close)
