"""`mqctl dump` run as a real process against real store files."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.store.message_store import opened_store
from formats.consume_queue import CQ_ENTRY_SIZE
from formats.record import MessageRecord
from formats.segments import segment_name

WRITER = Path(__file__).resolve().parents[1] / "core" / "crash_writer.py"


def mqctl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mqctl", *args], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.fixture
def store_dir(tmp_path, small_store_config):
    root = tmp_path / "data" / "node-a"
    with opened_store(root, small_store_config) as store:
        for i in range(120):
            store.put(MessageRecord(
                topic="Audit" if i % 3 == 0 else "Orders", queue_id=i % 2, body=f"body {i}".encode() * 40,
                store_host=("127.0.0.1", 10911), properties={"KEYS": f"k{i}", "TAGS": "t"},
            ))
    return root


def test_dump_prints_a_table_and_json(store_dir, subprocess_env):
    out = mqctl("dump", str(store_dir / "commitlog"), "--limit", "3", env=subprocess_env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["OFFSET", "SIZE", "TOPIC"] and len(lines) == 4
    out = mqctl("dump", str(store_dir), "--json", "--topic", "Audit", "--body", env=subprocess_env)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 40 and {r["topic"] for r in rows} == {"Audit"}
    assert rows[1]["keys"] == ["k3"] and rows[1]["body"] == "body 3" * 40
    assert rows[0]["msg_id"].startswith("7F00000100002A9F")


def test_dump_from_an_offset(store_dir, subprocess_env):
    rows = [json.loads(x) for x in mqctl("dump", str(store_dir), "--json", env=subprocess_env).stdout.splitlines()]
    start = rows[50]["offset"]
    later = [json.loads(x) for x in mqctl("dump", str(store_dir), "--json", "--from", str(start),
                                          env=subprocess_env).stdout.splitlines()]
    assert [r["offset"] for r in later] == [r["offset"] for r in rows[50:]]


def test_dump_a_single_segment_and_an_archive(store_dir, subprocess_env):
    from formats.archive import archive_segment

    first = store_dir / "commitlog" / segment_name(0)
    out = mqctl("dump", str(first), "--json", env=subprocess_env)
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert rows and all(r["offset"] < 64 * 1024 for r in rows)
    archive = archive_segment(first, store_dir.parent / "archive" / store_dir.name)
    out = mqctl("dump", str(archive), "--json", env=subprocess_env)
    assert [json.loads(x) for x in out.stdout.splitlines()] == rows
    first.unlink()  # now the directory dump must find it in the archive
    out = mqctl("dump", str(store_dir), "--verify", env=subprocess_env)
    assert out.returncode == 0 and "verified 120 records: OK" in out.stdout


def test_dump_a_consume_queue_file_and_verify_it_against_the_log(store_dir, subprocess_env):
    cq = store_dir / "consumequeue" / "Orders" / "1" / segment_name(0)
    out = mqctl("dump", str(cq), "--json", env=subprocess_env)
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert [r["queue_offset"] for r in rows] == list(range(len(rows))) and len(rows) == 40
    assert mqctl("dump", str(cq), "--verify", env=subprocess_env).returncode == 0
    raw = bytearray(cq.read_bytes())
    raw[5 * CQ_ENTRY_SIZE + 7] ^= 0x01  # entry 5 now points one byte off
    cq.write_bytes(bytes(raw))
    out = mqctl("dump", str(cq), "--verify", env=subprocess_env)
    assert out.returncode == 1 and "offset 5" in out.stderr


def test_verify_reports_a_flipped_bit_with_its_offset(store_dir, subprocess_env):
    rows = [json.loads(x) for x in mqctl("dump", str(store_dir), "--json", env=subprocess_env).stdout.splitlines()]
    victim = rows[7]
    seg = store_dir / "commitlog" / segment_name(0)
    raw = bytearray(seg.read_bytes())
    raw[victim["offset"] + victim["size"] - 60] ^= 0x04  # a body bit
    seg.write_bytes(bytes(raw))
    out = mqctl("dump", str(store_dir / "commitlog"), "--verify", env=subprocess_env)
    assert out.returncode == 1
    assert f"DAMAGE at offset {victim['offset']}: body crc mismatch" in out.stderr
    assert "verified 119 records: 1 damaged range(s)" in out.stdout
    out = mqctl("dump", str(store_dir), "--verify", "--json", env=subprocess_env)
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["ok"] is False and summary["first_damage"]["offset"] == victim["offset"]


def test_errors_are_one_clear_line(tmp_path, subprocess_env):
    out = mqctl("dump", str(tmp_path / "missing"), env=subprocess_env)
    assert out.returncode == 2 and out.stderr.strip() == f"mqctl: {tmp_path / 'missing'}: no such file or directory"


def test_dump_reads_a_live_store_without_disturbing_it(tmp_path, subprocess_env):
    root = tmp_path / "live"
    writer = subprocess.Popen([sys.executable, str(WRITER), str(root), "async", str(64 * 1024)],
                              stdout=subprocess.PIPE, env=subprocess_env, text=True)
    try:
        assert writer.stdout is not None
        for _ in range(300):
            writer.stdout.readline()
        counts = []
        for _ in range(3):
            out = mqctl("dump", str(root), "--json", env=subprocess_env)
            assert out.returncode == 0, out.stderr
            rows = [json.loads(x) for x in out.stdout.splitlines()]
            assert all("damage" not in r or r["at_tail"] for r in rows)
            counts.append(sum("damage" not in r for r in rows))
        assert counts[0] >= 300 and counts == sorted(counts)
        assert writer.poll() is None, "the writer must keep running"
        before = writer.stdout.readline()
        assert before.startswith("ack ")
    finally:
        writer.send_signal(signal.SIGTERM)
        writer.wait(timeout=30)


def _in_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``args`` with a pseudo-terminal as stdout and stderr: (exit status, what it drew)."""
    import os
    import pty

    parent, child = pty.openpty()
    proc = subprocess.Popen(args, stdout=child, stderr=child, stdin=subprocess.DEVNULL,
                            env=dict(env, COLUMNS="120", TERM="xterm"))
    os.close(child)
    drawn = b""
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(parent)
    return proc.wait(timeout=60), drawn.decode(errors="replace")


def test_verify_draws_a_progress_bar_in_a_terminal_and_none_in_a_pipe(store_dir, subprocess_env):
    status, drawn = _in_a_terminal([sys.executable, "-m", "mqctl", "dump", str(store_dir / "commitlog"), "--verify"],
                                   subprocess_env)
    assert status == 0, drawn
    assert "verifying commitlog" in drawn and "━" in drawn  # rich's bar, then erased
    assert "verified 120 records: OK" in drawn
    piped = mqctl("dump", str(store_dir / "commitlog"), "--verify", env=subprocess_env)
    assert piped.returncode == 0 and "\x1b" not in piped.stdout + piped.stderr
    assert piped.stdout.strip() == "verified 120 records: OK"
