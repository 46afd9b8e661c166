"""A store on a real, tiny filesystem that fills up: writes are refused cleanly at allocation,
nothing already stored is touched, and writing resumes once space is freed."""

import contextlib
import dataclasses
import subprocess

import pytest

from core.errors import DiskFullError
from core.store.message_store import opened_store
from formats.record import MessageRecord
from formats.segments import Damage, scan_log


@pytest.fixture
def tiny_fs(tmp_path):
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=640k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("needs permission to mount a tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def msg(i: int) -> MessageRecord:
    return MessageRecord(topic="Full", queue_id=i % 2, body=bytes([i % 251]) * 1500,
                         properties={"KEYS": f"k{i}"})


def test_enospc_refuses_writes_and_keeps_the_store_intact(tiny_fs, small_store_config):
    config = dataclasses.replace(small_store_config, disk_max_used_ratio=1.0)
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\1" * 128 * 1024)
    root = tiny_fs / "node"
    stored = []
    with opened_store(root, config) as store:
        with pytest.raises(DiskFullError):
            for i in range(10_000):
                stored.append(store.put(msg(i)))
        assert len(stored) > 100
        before = store.commitlog.write_offset
        with pytest.raises(DiskFullError):
            store.put(msg(len(stored)))
        assert store.commitlog.write_offset == before
        for i, r in enumerate(stored):
            assert store.read_record(r.phys_offset).properties["KEYS"] == f"k{i}"
        filler.unlink()  # space comes back: writing resumes where it stopped
        again = store.put(msg(len(stored)))
        assert again.phys_offset >= before
    items = list(scan_log(root / "commitlog"))
    assert not [d for d in items if isinstance(d, Damage)]
    assert len(items) == len(stored) + 1
    with contextlib.suppress(FileNotFoundError):
        assert not list((root / "commitlog").glob("*.tmp"))
