"""The drill's workload plan, the journals its client processes write, the receipt handles the
5.x worker reads, and the timeline drawn from a history (no processes: the drills themselves
are tests/mqctl/test_chaos_lab.py)."""

from __future__ import annotations

import json
import threading

import pytest

from mqctl.chaos.history import FaultSpan, SendAttempt
from mqctl.chaos.journal import JournalReader, JournalWriter, queue_label
from mqctl.chaos.rmq5_worker import place
from mqctl.chaos.timeline import timeline, write_report
from mqctl.chaos.workload import POP_GROUP, PUSH_GROUP, TOPIC, TOPIC5, Endpoints, plan_workload, worker_args

DOORS = Endpoints(["10.231.7.10:9876"], "10.231.7.20:8081", "10.231.7.20:8091")


def test_the_rate_is_split_among_every_client_kind_and_each_door_is_used():
    specs = plan_workload(2400, ("ours", "cpp", "rmq5"), DOORS)
    producers = [s for s in specs if s.role == "produce"]
    assert sum(s.rate for s in producers) == pytest.approx(2400)
    assert {s.client for s in specs} == {"ours", "cpp", "rmq5"}
    # FIFO streams enough to offer their rate while answers take tens of milliseconds
    assert all(s.streams * 1 / 0.06 >= s.rate for s in producers if s.fifo)
    doors = {s.name: worker_args(s, DOORS, "/j", 0.0) for s in specs}
    assert doors["cpp-p0"]["namesrv"] == ["10.231.7.20:8081"]  # the stock 4.x producer through the proxy
    assert doors["cpp-c0"]["namesrv"] == doors["ours-p0"]["namesrv"] == ["10.231.7.10:9876"]  # direct
    assert doors["rmq5-p0"]["endpoints"] == "10.231.7.20:8091"  # the 5.x client through the gRPC door
    assert {(s.topic, s.group) for s in specs if s.role == "consume"} == {(TOPIC, PUSH_GROUP), (TOPIC5, POP_GROUP)}
    only_ours = plan_workload(1000, ("ours",), DOORS)
    assert sum(s.rate for s in only_ours if s.role == "produce") == pytest.approx(1000)


def test_a_journal_is_read_as_it_grows_whole_lines_only(tmp_path):
    path = tmp_path / "w.jsonl"
    writer = JournalWriter(path, t0=0.0)
    reader = JournalReader(path)
    assert reader.read_new() == []
    writer.attempt("p.0.0", 1.0, 1.5, "ok", queue_label("T", "broker-a", 3), 7, producer="p")
    writer.flush()
    with open(path, "a") as f:
        f.write('["d","p.0.0"')  # a line being written is left for the next read
    assert reader.read_new() == [["a", "p.0.0", 1.0, 1.5, "ok", "T@broker-a/3", 7, "", "p"]]
    with open(path, "a") as f:
        f.write(',"T@broker-a/3",7,2.0,"c0",1]\n')
    assert reader.read_new() == [["d", "p.0.0", "T@broker-a/3", 7, 2.0, "c0", 1]]
    writer.delivery("x", "", -1, 3.0, "c1", False)
    writer.close()
    assert reader.read_new() == [["d", "x", "", -1, 3.0, "c1", 0]]


def test_a_receipt_handle_names_the_queue_and_offset_of_its_message():
    assert place("T", "15 1718000000000 30000 2 0 broker-a 1 17 40960") == ("T@broker-a/1", 17)
    assert place("T", "not a handle") == ("", -1)


def test_the_timeline_counts_each_second_and_its_latency(tmp_path):
    sends = [SendAttempt(f"k{i}", 0.495 + i * 0.01, 0.505 + i * 0.01, "ok") for i in range(100)]
    sends += [SendAttempt("slow", 1.0, 1.9, "ok"), SendAttempt("gone", 1.2, 4.2, "unknown")]
    rows = timeline(sends, 5)
    assert len(rows) == 6 and [r["acknowledged"] for r in rows] == [50, 51, 0, 0, 0, 0]
    assert rows[0]["p50_ms"] == pytest.approx(10, abs=0.01) and rows[1]["p99_ms"] == pytest.approx(900, abs=0.01)
    assert rows[4]["not_acknowledged"] == 1 and rows[2]["p99_ms"] == 0.0
    report = {"mode": "dledger", "seed": 1, "acknowledged": 101, "lost": {"count": 0}, "phantom": {"count": 0},
              "broken_promises": []}
    journal = tmp_path / "ours-p0.jsonl"
    journal.write_text("[]\n")
    write_report(tmp_path / "r", report, rows, [FaultSpan("kill", "broker-a-0", 1.0, 3.0, was_leader=True)],
                 [(0.2, "broker-a-0"), (2.0, "broker-a-1")], [journal])
    assert (tmp_path / "r" / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / "r" / "history.json").read_text())
    assert saved["faults"][0]["was_leader"] and saved["leaders"][1] == {"at": 2.0, "node": "broker-a-1"}
    assert (tmp_path / "r" / "journals" / "ours-p0.jsonl").read_text() == "[]\n"


def test_journals_collected_from_two_threads_at_once_record_each_row_once(tmp_path):
    # found in a drill: the thread stopping the workers and the drill's loop both collected, and
    # rows read twice showed as FIFO streams out of send order and as duplicates
    from mqctl.chaos.workload import Running, WorkerSpec, Workload

    path = tmp_path / "p.jsonl"
    writer = JournalWriter(path, t0=0.0)
    workload = Workload([], DOORS, tmp_path, 0.0)
    workload.running.append(Running(WorkerSpec("p", "ours", "produce", TOPIC, PUSH_GROUP), None, JournalReader(path),
                                    None))  # type: ignore[arg-type]
    done = threading.Event()

    def collect() -> None:
        while not done.is_set():
            workload.collect()

    threads = [threading.Thread(target=collect) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(3000):
        writer.attempt(f"p.0.{i}", i, i, "ok", "T@broker-a/0", i, producer="p")
        if i % 100 == 0:
            writer.flush()
    writer.close()
    done.set()
    for t in threads:
        t.join()
    workload.collect()
    assert [a.key for a in workload.attempts] == [f"p.0.{i}" for i in range(3000)]
