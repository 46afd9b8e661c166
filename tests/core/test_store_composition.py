"""The message store by composition: one class without bases, made of parts; replication
builds on its interfaces and never subclasses it; and the seams failover needs, on real files:
``truncate`` (the log and everything derived from it, then the listeners) and ``set_role``
(local writes on and off at run time, both ways)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

from core.config import StoreConfig
from core.errors import ReadOnlyStoreError, StoreError
from core.store.message_store import MessageStore, open_message_store
from core.store.store_types import StoreRole
from formats.record import MessageRecord
from tests.test_house_layout import ROOT, module_files

# What replication may import from core.store, and why. Everything else there (the message
# store, its parts, the CommitLog, queues and index) it reaches through these interfaces.
REPLICATION_MAY_IMPORT = {
    "core.store.interfaces": "the Protocols a store is assembled from (RecordLog, Recovery, Retention, "
                             "LogParts and what their makers are given) and ReplicatedStore, the store "
                             "as replication uses it",
    "core.store.store_types": "values a store hands back (RecoveryReport, LogRecovery, PutResult) and its "
                              "role (StoreRole)",
    "core.store.dispatch": "Appended and BatchAppended: the values a raft leader keeps of its proposals "
                           "until they commit",
    "core.store.mapped_file": "a raft log's data files are the CommitLog's mapped files (one primitive)",
    "core.store.checkpoint": "raft recovery and sealing write the store's checkpoint (one file layout)",
    "core.store.epoch_checkpoint": "a controller-mode broker's epoch file, one file of the store's root",
    "core.store.layout": "the names of a store's files (checkpoint, abort, dledger/, logfloor)",
}


def test_the_message_store_is_one_class_made_of_parts() -> None:
    assert MessageStore.__bases__ == (object,)
    assert MessageStore.__mro__ == (MessageStore, object)  # no mixins


def _replication_modules() -> dict[str, Path]:
    return {name: path for name, path in module_files().items() if name.split(".")[0] == "replication"}


def test_no_class_in_replication_subclasses_a_store_class() -> None:
    offenders = []
    for name in _replication_modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name:
                continue
            offenders += [f"{name}.{cls_name} <- {base.__module__}.{base.__qualname__}"
                          for base in cls.__mro__[1:] if base.__module__.startswith("core.store")]
    assert offenders == []


def store_imports(path: Path) -> set[str]:
    """The core.store modules ``path`` imports (anywhere in its text)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("core.store"):
            found |= {node.module} if node.module != "core.store" else {f"core.store.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("core.store")}
    return found


def test_replication_imports_from_core_store_only_what_the_allowlist_names() -> None:
    outside = {f"{path.relative_to(ROOT)} -> {module}" for path in _replication_modules().values()
               for module in store_imports(path) if module not in REPLICATION_MAY_IMPORT}
    assert outside == set()


def test_the_import_check_sees_an_import_of_the_message_store(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from core.store.message_store import MessageStore\nimport core.store.commitlog\n")
    assert store_imports(module) == {"core.store.message_store", "core.store.commitlog"}


# ---------------------------------------------------------------- truncate


def msg(i: int) -> MessageRecord:
    return MessageRecord(topic="Orders", body=b"m%05d" % i + b"." * 300, queue_id=i % 4,
                         properties={"KEYS": f"K{i}", "UNIQ_KEY": f"U{i:06d}"})


@pytest.fixture
def config(small_store_config: StoreConfig) -> StoreConfig:
    return dataclasses.replace(small_store_config, segment_size_bytes=16 * 1024)  # ~50 records a segment


def _queue_maxima(store: MessageStore) -> list[int]:
    return [store.max_queue_offset("Orders", q) for q in range(4)]


def _check_ends_at(store: MessageStore, end: int, kept: list, cut: list) -> None:
    assert store.log_end == end and store.reput_offset == end
    assert _queue_maxima(store) == [sum(1 for r in kept if r[0] % 4 == q) for q in range(4)]
    for q in range(4):  # every queue entry left points below the end
        entries = store.queue_entries("Orders", q, 0, 1000)
        assert entries and all(e.phys_offset + e.size <= end for _, e in entries)
    with pytest.raises(KeyError):
        store.read_record(end)
    assert store.index.files and all(ix.end_phy < end for ix in store.index.files)  # re-indexed from the end
    for i, res in kept[-3:]:
        assert store.read_record(res.phys_offset).body == msg(i).body
        assert [r.body for r in store.query_by_key("Orders", f"K{i}")] == [msg(i).body]
    for i, _res in cut[:3]:
        assert store.query_by_key("Orders", f"K{i}") == [] and store.query_by_key("Orders", f"U{i:06d}") == []


async def test_truncate_cuts_the_log_and_what_is_derived_from_it_and_tells_the_listeners(tmp_path, config):
    root = tmp_path / "node"
    async with open_message_store(root, config) as store:
        results = [(i, store.put(msg(i))) for i in range(200)]
        await store.checkpoint()  # the checkpoint on disk points past the cut too
        assert len(store.commitlog.files.files) >= 4
        middle = 97  # a record boundary in the middle of the set, several segments before the end
        end = results[middle][1].phys_offset
        kept, cut = results[:middle], results[middle:]
        heard: list[int] = []
        store.on_truncate(heard.append)
        assert store.truncate(end) > 0
        assert heard == [end]
        _check_ends_at(store, end, kept, cut)
    async with open_message_store(root, config) as store:  # and so it stays after a restart
        _check_ends_at(store, end, kept, cut)
        res = store.put(msg(1000))  # the log continues at the cut, queue offsets after the kept
        assert res.phys_offset == end and res.queue_offset == sum(1 for i, _ in kept if i % 4 == 0)
        assert [r.body for r in store.query_by_key("Orders", "K1000")] == [msg(1000).body]


# ---------------------------------------------------------------- roles


def _copy_log(source: MessageStore, replica: MessageStore, upto: int) -> None:
    """What the HA client does: ``source``'s bytes appended to ``replica``, then dispatched."""
    at = replica.log_end
    while at < upto:
        chunk = source.read_log(at, min(5000, upto - at))
        replica.append_replicated(at, chunk)
        at += len(chunk)
    replica.dispatch_replicated()


async def test_a_live_store_switches_between_writer_and_replica_both_ways(tmp_path, config):
    async with open_message_store(tmp_path / "a", config) as a, open_message_store(tmp_path / "b", config) as b:
        b.set_role(StoreRole.REPLICA, "b is a slave")
        put_a = [a.put(msg(i)) for i in range(40)]
        with pytest.raises(ReadOnlyStoreError, match="b is a slave"):
            b.put(msg(0))
        # b copies a's log up to the middle of record 30: that record waits for the rest
        inside = put_a[30].phys_offset + 100
        _copy_log(a, b, inside)
        assert b.log_end == inside and b.reput_offset == put_a[30].phys_offset
        assert _queue_maxima(b) == [8, 8, 7, 7]  # records 0..29

        # failover: b takes writes, a becomes its replica
        heard: list[int] = []
        b.on_truncate(heard.append)
        a.set_role(StoreRole.REPLICA, "a is a slave now")
        b.set_role(StoreRole.WRITER)
        assert heard == [put_a[30].phys_offset] and b.log_end == put_a[30].phys_offset  # the torn record is cut
        put_b = [b.put(msg(100 + i)) for i in range(4)]
        assert [r.queue_offset for r in put_b] == [8, 8, 7, 7]  # continuing the queues
        assert put_b[0].phys_offset == put_a[30].phys_offset
        with pytest.raises(ReadOnlyStoreError, match="a is a slave now"):
            a.put(msg(0))
        # a stops agreeing with b where b's own records begin: it cuts there and copies b's
        a.truncate(put_b[0].phys_offset)
        _copy_log(b, a, b.log_end)
        assert a.log_end == b.log_end and _queue_maxima(a) == _queue_maxima(b) == [9, 9, 8, 8]

        # and back: a writes again, b is its replica
        b.set_role(StoreRole.REPLICA, "b follows a again")
        a.set_role(StoreRole.WRITER)
        res = a.put(msg(200))
        assert (res.phys_offset, res.queue_offset) == (b.log_end, 9)
        with pytest.raises(ReadOnlyStoreError, match="b follows a again"):
            b.put(msg(0))
        _copy_log(a, b, a.log_end)
        assert [e.phys_offset for _, e in b.queue_entries("Orders", 0, 0, 100)] == \
            [e.phys_offset for _, e in a.queue_entries("Orders", 0, 0, 100)]


async def test_a_raft_log_refuses_a_truncation_by_the_store(tmp_path, small_store_config):
    from plugins.ha_dledger import raft_message_store

    store = raft_message_store(tmp_path / "r", small_store_config)
    async with open_message_store(store.root, small_store_config, store=store):
        with pytest.raises(StoreError, match="raft"):
            store.truncate(0)
