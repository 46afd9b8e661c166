"""The raft log on disk in DLedger's layout: the RaftLog contract (shared with MemoryLog),
record offsets, segment padding, truncation, recovery of a torn tail, and the state files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from formats import dledger
from formats.record import MessageRecord, decode_record, encode_record
from formats.segments import Damage, RecordAt, scan_log
from replication.dledger.disk_log import DiskRaftLog
from replication.dledger.proposals import record_at
from replication.dledger.raft_log import BodyRun, Entry, MemoryLog, PackedEntries
from replication.dledger.raft_node import HardState
from replication.dledger.state_files import (
    load_commit_checkpoint,
    load_hard_state,
    save_commit_checkpoint,
    save_hard_state,
)

SEGMENT = 4096


def record(i: int, size: int = 200) -> bytes:
    return bytes(encode_record(MessageRecord(topic="Orders", body=bytes([65 + i % 26]) * size, queue_id=i % 2,
                                             queue_offset=i // 2, properties={"UNIQ_KEY": f"K{i:08d}"})))


def entries(start: int, count: int, term: int) -> list[Entry]:
    return [Entry(i, term, record(i)) for i in range(start, start + count)]


@pytest.fixture(params=["memory", "disk"])
def any_log(request, tmp_path):
    if request.param == "memory":
        yield MemoryLog()
        return
    log = DiskRaftLog(tmp_path, SEGMENT, place_body=record_at)
    log.open()
    yield log
    log.close()


def test_the_raft_log_contract(any_log):
    log = any_log
    assert (log.first_index, log.last_index, log.last_term) == (0, -1, -1) and log.term_at(0) is None
    log.append(entries(0, 5, 1))
    log.append([Entry(5, 2, b"", dledger.MAGIC_NOOP)])
    assert (log.first_index, log.last_index, log.last_term) == (0, 5, 2)
    assert [log.term_at(i) for i in range(6)] == [1, 1, 1, 1, 1, 2]
    assert log.entry(5).is_noop and log.entry(6) is None
    assert [e.index for e in log.entries(1, 3, 10**6)] == [1, 2, 3]
    assert [e.index for e in log.entries(1, 10, 1)] == [1]  # always one, then up to the byte limit
    with pytest.raises(ValueError, match="does not continue"):
        log.append([Entry(9, 2, b"x")])
    assert log.truncate_after(2) == 3 and log.last_index == 2 and log.last_term == 1
    log.append(entries(3, 2, 3))
    assert [log.term_at(i) for i in range(5)] == [1, 1, 1, 3, 3]


def test_a_reset_log_continues_at_the_leaders_first_entry(any_log):
    log = any_log
    log.append(entries(0, 5, 1))
    log.reset(40, 3, install_end=60)
    assert (log.first_index, log.last_index, log.last_term, log.install_end) == (40, 39, 3, 60)
    assert log.term_at(39) == 3 and log.term_at(38) is None and log.term_at(4) is None and log.entry(2) is None
    with pytest.raises(ValueError, match="does not continue"):
        log.append(entries(0, 1, 1))
    log.append(entries(40, 3, 4))
    assert [e.index for e in log.entries(40, 10, 10**6)] == [40, 41, 42] and log.entries(39, 10, 10**6) == []
    with pytest.raises(ValueError):
        log.truncate_after(30)
    assert log.truncate_after(39) == 3 and (log.last_index, log.last_term) == (39, 3)


def test_records_carry_their_own_offset_and_segments_end_in_padding(tmp_path):
    log = DiskRaftLog(tmp_path, SEGMENT, place_body=record_at)
    log.open()
    batch = entries(0, 40, 1)  # ~290 bytes an entry: several segments, each padded at its end
    predicted = log.record_offsets([len(e.body) for e in batch])
    log.append(batch)
    log.sync()
    files = sorted((tmp_path / "commitlog").iterdir())
    assert len(files) > 2 and all(f.stat().st_size == SEGMENT for f in files)
    found = list(scan_log(tmp_path / "commitlog"))
    assert not [d for d in found if isinstance(d, Damage)]
    recs = [r for r in found if isinstance(r, RecordAt)]
    assert [r.entry.raft_index for r in recs] == list(range(40))
    assert [r.offset for r in recs] == predicted  # what a leader encodes its records with
    for r in recs:
        assert r.record.phys_offset == r.offset == r.entry.pos + dledger.HEADER_SIZE
        assert log.entry(r.entry.raft_index).body == bytes(encode_record(r.record))
    body = log.entry(7).body
    assert decode_record(body).phys_offset != 0 and body != record(7)  # patched, otherwise the same
    log.close()


def test_a_proposed_run_of_bodies_writes_the_files_entries_one_by_one_write(tmp_path):
    # the leader's path (BodyRun: headers packed straight from the bodies) against the entry
    # path, across segment ends, some records placed already and some patched
    written = {}
    for way in ("entries", "bodies"):
        log = DiskRaftLog(tmp_path / way, SEGMENT, place_body=record_at)
        log.open()
        log.append(entries(0, 3, 1))
        bodies = [record(i) for i in range(3, 43)]
        placed = log.record_offsets([len(b) for b in bodies])
        bodies[:20] = [bytes(encode_record(dataclasses.replace(decode_record(b), phys_offset=phys)))
                       for b, phys in zip(bodies[:20], placed)]
        log.append([Entry(3 + i, 2, b) for i, b in enumerate(bodies)] if way == "entries" else BodyRun(3, 2, bodies))
        assert (log.last_index, log.last_term) == (42, 2) and log.write_pos > 3 * SEGMENT
        log.sync()
        log.close()
        written[way] = {f"{p.parent.name}/{p.name}": p.read_bytes()
                        for p in sorted((tmp_path / way).rglob("*")) if p.is_file() and p.parent.name != "dledger"}
    assert len(written["bodies"]) > 3 and written["bodies"] == written["entries"]
    run = BodyRun(7, 3, [b"a", b"b", b"c"])
    assert list(run[1:]) == [Entry(8, 3, b"b"), Entry(9, 3, b"c")] and run[-1] == Entry(9, 3, b"c")
    memory = MemoryLog()
    memory.append(entries(0, 7, 1))
    memory.append(run)
    assert memory.entry(9) == Entry(9, 3, b"c")


def test_reopen_keeps_the_log_and_a_truncation(tmp_path):
    log = DiskRaftLog(tmp_path, SEGMENT, place_body=record_at)
    log.open()
    log.append(entries(0, 30, 1))
    log.truncate_after(11)
    log.append(entries(12, 3, 2))
    log.sync()
    before = [log.entry(i) for i in range(15)]
    log.close()
    again = DiskRaftLog(tmp_path, SEGMENT, place_body=record_at)
    again.open()
    assert again.last_index == 14 and [again.entry(i) for i in range(15)] == before
    recs = [r for r in scan_log(tmp_path / "commitlog") if isinstance(r, RecordAt)]
    assert [r.entry.raft_index for r in recs] == list(range(15))  # nothing of the cut entries left
    again.close()


def test_a_torn_tail_is_cut_at_the_last_entry_whose_data_agrees(tmp_path):
    log = DiskRaftLog(tmp_path, SEGMENT, place_body=record_at)
    log.open()
    log.append(entries(0, 10, 1))
    log.sync()
    pos = log._index_entry(8).pos  # the data of entry 8 never reached the disk
    mf = log.data.find(pos)
    mf.write(pos - mf.start, bytes(dledger.HEADER_SIZE))
    log.sync()
    log.close()
    again = DiskRaftLog(tmp_path, SEGMENT, place_body=record_at)
    again.open()
    assert again.last_index == 7 and again.term_at(8) is None
    again.append(entries(8, 1, 2))
    assert again.entry(8).term == 2
    again.close()


def test_state_files_round_trip(tmp_path: Path):
    assert load_hard_state(tmp_path / "currterm") == HardState(0, None)
    assert load_commit_checkpoint(tmp_path / "checkpoint") == -1
    save_hard_state(tmp_path / "currterm", HardState(7, "n2"))
    save_commit_checkpoint(tmp_path / "checkpoint", 41, 44)
    assert load_hard_state(tmp_path / "currterm") == HardState(7, "n2")
    assert (tmp_path / "currterm").read_text() == "currTerm=7\nvoteLeader=n2\n"
    assert load_commit_checkpoint(tmp_path / "checkpoint") == 41


def _file_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_run_read_in_one_piece_lands_byte_for_byte_on_a_log_of_the_same_layout(tmp_path):
    leader = DiskRaftLog(tmp_path / "a", SEGMENT, place_body=record_at)
    follower = DiskRaftLog(tmp_path / "b", SEGMENT, place_body=record_at)
    leader.open()
    follower.open()
    leader.append(entries(0, 40, 1))  # several segments, each ending in padding
    runs = 0
    while follower.last_index < leader.last_index:
        run = leader.entries(follower.last_index + 1, 16, 10**6)
        assert isinstance(run, PackedEntries) and run.contiguous and run.first_index == follower.last_index + 1
        # a run never crosses into the next data file, and arrives through the wire codec intact
        assert run.first_pos // SEGMENT == (run.first_pos + len(run.raw) - 1) // SEGMENT
        follower.append(PackedEntries.parse(bytes(run.raw)))
        runs += 1
    assert runs > 3 and follower.last_index == 39 and follower.write_pos == leader.write_pos
    leader.sync()
    follower.sync()
    assert _file_bytes(tmp_path / "b" / "commitlog") == _file_bytes(tmp_path / "a" / "commitlog")
    assert _file_bytes(tmp_path / "b" / "dledger" / "index") == _file_bytes(tmp_path / "a" / "dledger" / "index")
    assert [e.index for e in leader.entries(3, 5, 10**6)] == [3, 4, 5, 6, 7]  # all in the first file
    assert list(leader.entries(3, 5, 1)) == [leader.entry(3)]  # always one, then up to the byte limit
    leader.close()
    follower.close()


def test_a_run_placed_elsewhere_is_written_entry_by_entry_with_its_own_offsets(tmp_path):
    leader = DiskRaftLog(tmp_path / "a", SEGMENT, place_body=record_at)
    follower = DiskRaftLog(tmp_path / "b", SEGMENT, base=SEGMENT, place_body=record_at)
    leader.open()
    follower.open()  # its raft data begins one segment later: every position differs
    leader.append(entries(0, 6, 1))
    follower.append(PackedEntries.parse(bytes(leader.entries(0, 6, 10**6).raw)))
    assert follower.last_index == 5 and follower.last_term == 1
    for i in range(6):
        ours = follower.entry(i)
        assert ours.term == 1 and decode_record(ours.body).body == decode_record(leader.entry(i).body).body
        assert decode_record(ours.body).phys_offset == follower._index_entry(i).pos + dledger.HEADER_SIZE >= SEGMENT
    leader.close()
    follower.close()


def test_packed_entries_parse_slice_and_refuse_what_is_not_a_run():
    raw = b"".join(dledger.encode_entry(i, 2, 100 + 250 * (i - 4), b"x" * 202) for i in range(4, 8))
    run = PackedEntries.parse(raw)
    assert (len(run), run.first_index, run.last_index, run.contiguous, run.first_pos) == (4, 4, 7, True, 100)
    assert run.body_bytes == 4 * 202 and run[1] == Entry(5, 2, b"x" * 202) and run[-1].index == 7
    tail = run[2:]
    assert isinstance(tail, PackedEntries) and tail.first_index == 6 and list(tail) == list(run)[2:]
    assert run == [Entry(i, 2, b"x" * 202) for i in range(4, 8)]
    with pytest.raises(ValueError, match="past the end"):
        PackedEntries.parse(raw[:-1])
    with pytest.raises(ValueError, match="does not follow"):
        PackedEntries.parse(raw[:250] + raw[500:])
    scattered = PackedEntries.parse(dledger.encode_entry(0, 1, 0, b"a") + dledger.encode_entry(1, 1, 0, b"b"))
    assert not scattered.contiguous  # pos 0 for both: entries sent from memory, placed by the receiver
