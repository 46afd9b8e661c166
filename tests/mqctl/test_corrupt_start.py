"""A broker whose CommitLog is damaged where recovery reads it refuses to start, naming the file
and the offset, and `mqctl dump --verify` reports the same offset."""

from __future__ import annotations

import json

from formats.segments import segment_name
from tests.conftest import running_cluster


def test_a_damaged_record_with_valid_ones_after_it_stops_the_node_at_start(tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env) as cluster:
        sent = cluster.mqctl("send", "Kept", "a body long enough to damage", "--count", "20")
        assert sent.returncode == 0, sent.stderr
        assert cluster.mqctl("stop").returncode == 0
        store = tmp_path / "data" / "broker-a-0"
        rows = [json.loads(x) for x in cluster.mqctl("dump", str(store), "--json").stdout.splitlines()]
        victim = [r for r in rows if r["topic"] == "Kept"][10]
        segment = store / "commitlog" / segment_name(0)
        raw = bytearray(segment.read_bytes())
        raw[victim["offset"] + 88 + 2] ^= 0x20  # a body bit (the body follows the 88-byte head): its CRC fails
        segment.write_bytes(bytes(raw))
        (store / "checkpoint").unlink()  # as after a crash before the first checkpoint: all is scanned

        started = cluster.mqctl("start")
        assert started.returncode != 0
        said = started.stdout + started.stderr
        assert str(segment) in said and f"log offset {victim['offset']}" in said, said[-2000:]
        assert "body crc mismatch" in said and "mqctl dump --verify" in said

        verify = cluster.mqctl("dump", str(store / "commitlog"), "--verify")
        assert verify.returncode == 1
        assert f"DAMAGE at offset {victim['offset']}: body crc mismatch" in verify.stderr
        assert str(segment) in verify.stderr
        # nothing was cut: the damaged record and those after it are all still there
        assert segment.read_bytes() == bytes(raw)
