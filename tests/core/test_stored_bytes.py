"""Stored bytes do not change with the write path: the same sends, with the store's clock
held still, give the same CommitLog, ConsumeQueue and key-index bytes on a master and on a
slave that copied its log, as they did before the batch path and the slave's run dispatch
were written (the digests below are the same writer's on the code before them)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
import trio

from core.broker.produce.batch_send import batch_records, record_batch
from core.config import StoreConfig
from core.plugin_manager import PluginHost
from core.plugin_markers import hookimpl
from core.store.dispatch import DispatchRequest
from core.store.key_index import KeyIndex
from core.store.message_store import MessageStore, open_message_store, opened_store
from core.store.store_types import StoreRole
from core.topic_names import SCHEDULE_TOPIC
from formats.batch import BatchItem, encode_batch
from formats.record import MessageRecord, decode_record, encode_record
from formats.record_batch import BatchFields
from formats.sysflag import BORNHOST_V6, STOREHOST_V6, TRANSACTION_PREPARED
from plugins.ha_dledger import raft_message_store, raft_parts
from replication.dledger.raft_log import BodyRun

STORE_NOW_MS = 1_795_000_000_123
CONFIG = StoreConfig(segment_size_bytes=64 * 1024, cq_entries_per_file=64, index_slots=97, index_entries=200)
LONG_TOPIC = "T" * 127  # the longest topic a broker takes


def _items(rng: random.Random, count: int, kind: str) -> list[BatchItem]:
    out = []
    for i in range(count):
        body = rng.randbytes(rng.choice((1, 100, 1024, 3000)))
        uniq = f"7F00000100{rng.getrandbits(64):016X}{i:06X}"
        props = {"UNIQ_KEY": uniq}
        if kind == "tagged":
            props = {"TAGS": f"tag{i % 3}", "KEYS": f"order-{i} user-{i % 5}", **props}
        elif kind == "mixed":
            props = [{}, {"KEYS": "clé\u3000ключ"}, {"WAIT": "true", **props}, {"DELAY": "0", **props},
                     {"TAGS": "", "a": "b", **props}][i % 5]
        out.append(BatchItem(body, props, flag=i % 4))
    return out


def _write(store: MessageStore, batch_path: bool) -> int:
    """The sends; how many batches the batch path took (items with WAIT or DELAY take the
    per-record path)."""
    rng = random.Random(36)
    sends = [("Orders", 40, "plain", ("127.0.0.1", 40001)), ("Orders", 20, "tagged", ("::1", 40002)),
             ("Mixed", 10, "mixed", ("10.0.0.7", 40003)), (LONG_TOPIC, 5, "plain", ("127.0.0.1", 40004)),
             ("Orders", 30, "plain", ("127.0.0.1", 40001))]
    took = 0
    for n, (topic, count, kind, born) in enumerate(sends):
        fields = BatchFields(topic, n % 2, 0, 1_795_000_000_000 + n, born, ("192.168.7.1", 10911), n % 3)
        body = encode_batch(_items(rng, count, kind))
        batch = record_batch(fields, "C1", body) if batch_path else None
        if batch is not None:
            store.put_batch(batch)
            took += 1
        else:
            records = batch_records(fields, "C1", body)
            assert not isinstance(records, str)
            store.put_many(records)
        store.put(MessageRecord(topic, rng.randbytes(700), {"UNIQ_KEY": f"S{n}", "TAGS": "single"}, n % 2,
                                born_timestamp=1, born_host=born, store_host=("192.168.7.1", 10911)))
    # records a slave dispatches one by one: a delayed one, a transaction half, an IPv6 store host
    store.put(MessageRecord(SCHEDULE_TOPIC, b"later", {"DELAY": "3", "REAL_TOPIC": "Orders", "UNIQ_KEY": "D1"}, 2))
    store.put(MessageRecord("Orders", b"half", {"TRAN_MSG": "true", "UNIQ_KEY": "H1"}, 0, sysflag=TRANSACTION_PREPARED))
    store.put(MessageRecord("Orders", b"v6", {"UNIQ_KEY": "V1", "KEYS": "k6"}, 0, store_host=("fe80::1", 10911)))
    store.dispatch_pending()
    return took


def _digest(root: Path) -> dict[str, str]:
    """sha256 of each part's files in order (index files by content: their names are times)."""
    out = {}
    for part in ("commitlog", "consumequeue", "index"):
        h = hashlib.sha256()
        for path in sorted(p for p in (root / part).rglob("*") if p.is_file()):
            if part != "index":
                h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        out[part] = h.hexdigest()[:16]
    return out


# the same writer run on the code before the batch path and run dispatch (ff22e98) gave these
GOLDEN = {"commitlog": "7823bc4910e7a16b", "consumequeue": "2c40c978aaf6a23c", "index": "d28b946d239d3772"}


def frozen_clock() -> int:
    """Every store here stamps records with this one time: the digests depend on it."""
    return STORE_NOW_MS


@pytest.mark.parametrize("batch_path", [False, True], ids=["per-record", "batch"])
def test_master_and_slave_store_the_same_bytes_as_before(tmp_path, batch_path):
    with opened_store(tmp_path / "master", CONFIG, clock=frozen_clock) as master:
        assert _write(master, batch_path) == (4 if batch_path else 0)
        chunks = _log_chunks(master)
    stored = _raw_records(tmp_path / "master")
    assert len(stored) == 105 + 5 + 3  # every item and single put, each as the reference encoder writes it
    assert [bytes(encode_record(decode_record(raw))) for raw in stored] == stored
    with opened_store(tmp_path / "slave", CONFIG, clock=frozen_clock) as slave:
        slave.set_role(StoreRole.REPLICA, "a slave")
        for offset, chunk in chunks:
            if chunk:
                slave.append_replicated(offset, chunk)
            slave.dispatch_replicated()
    master_digest = _digest(tmp_path / "master")
    assert _digest(tmp_path / "slave") == master_digest
    assert master_digest == GOLDEN


def _log_chunks(master: MessageStore) -> list[tuple[int, bytes]]:
    """The master's log as a slave gets it: chunks of 10,000 bytes, ending inside records too."""
    chunks = []
    at = 0
    while at < master.log_end:
        chunk = master.read_log(at, 10_000)
        chunks.append((at, chunk))
        at += len(chunk) or (CONFIG.segment_size_bytes - at % CONFIG.segment_size_bytes)
    return chunks


def _raw_records(root: Path) -> list[bytes]:
    out = []
    for seg in sorted((root / "commitlog").iterdir()):
        data = seg.read_bytes()
        at = 0
        while at + 8 <= len(data):
            size = int.from_bytes(data[at:at + 4], "big", signed=True)
            if data[at + 4:at + 8] == b"\xcb\xd4\x31\x94" or size <= 0:
                break
            out.append(data[at:at + size])
            at += size
    return out


@pytest.mark.parametrize("slots", [7, 5003], ids=["slots-shared", "slots-apart"])
def test_an_index_run_writes_what_entry_by_entry_writes(tmp_path, slots):
    """KeyIndex.put_run (one packing, one slot gather) against put_many, over runs that start
    a file, fill one and spill into the next, with and without keys sharing a slot."""
    rng = random.Random(slots)
    runs = [[rng.getrandbits(31) for _ in range(n)] for n in (1, 40, 128, 3, 90, 128)]
    indexes = {}
    for how in ("many", "run"):
        index = KeyIndex(tmp_path / how, slots, 200)
        index.recover(0)
        phys = 0
        for n, hashes in enumerate(runs):
            offsets = [phys + 100 * i for i in range(len(hashes))]
            phys = offsets[-1] + 100
            index.reserve(len(hashes))
            stamp = 1_795_000_000_000 + 1500 * n
            if how == "run":
                index.put_run(hashes, offsets, [stamp + 700 * i for i in range(len(hashes))])
            else:
                index.put_many(list(zip(hashes, offsets, [stamp + 700 * i for i in range(len(hashes))])))
        for ix in index.files:
            ix.write_header()
        indexes[how] = [bytes(ix.mf.view) for ix in index.files]
        found = [phys_ for ix in index.files for phys_ in ix.lookup(runs[-1][0], 0, 2**62, 50)]
        assert offsets[0] in found  # the last run's first key leads to its record
        index.close()
    assert len(indexes["run"]) == 3
    assert indexes["run"] == indexes["many"]


@pytest.mark.parametrize("batch_path", [False, True], ids=["per-record", "batch"])
async def test_a_raft_leader_and_follower_store_the_same_bytes_as_before(tmp_path, batch_path):
    """The same sends through a raft leader's store (its proposals appended to its raft log
    as the raft node does), and a follower given the leader's entries: the data files, queues
    and key index are the ones the code before the batch path wrote."""
    seen: dict[str, list[DispatchRequest]] = {"leader": [], "follower": []}
    leader = raft_message_store(tmp_path / "leader", CONFIG, _recording_host(seen["leader"]), clock=frozen_clock)
    raft = raft_parts(leader)

    def propose(bodies: list[bytes]) -> range:
        first = raft.raft_log.last_index + 1
        raft.raft_log.append(BodyRun(first, 1, bodies))
        return range(first, first + len(bodies))

    async with open_message_store(leader.root, CONFIG, store=leader):
        raft.attach_proposer(propose)
        leader.set_role(StoreRole.WRITER)
        assert _write(leader, batch_path) == (4 if batch_path else 0)
        last = raft.raft_log.last_index
        # committed into the first batch's entries (0..39): a batch put waits to be dispatched
        # whole, a record put goes at once
        early = raft.dispatch_committed(5)
        assert early == (0 if batch_path else 6) and raft.dispatch_committed(last) == 113 - early
        entries = [raft.raft_log.entry(i) for i in range(last + 1)]
    follower = raft_message_store(tmp_path / "follower", CONFIG, _recording_host(seen["follower"]),
                                   clock=frozen_clock)
    async with open_message_store(follower.root, CONFIG, store=follower):
        for entry in entries:
            assert entry is not None
            raft_parts(follower).raft_log.append([entry])
        assert raft_parts(follower).dispatch_committed(last) == 113
    leader_digest = _digest(tmp_path / "leader")
    assert _digest(tmp_path / "follower") == leader_digest
    assert leader_digest == RAFT_GOLDEN
    assert len(seen["leader"]) == 113 and seen["follower"] == seen["leader"]  # what listeners read


RAFT_GOLDEN = {"commitlog": "944cb9098206c2bc", "consumequeue": "647ac566fdf915a1", "index": "c1e8d728c098f4b5"}  # ff22e98 gave these


def _recording_host(seen: list[DispatchRequest], queues: set | None = None) -> PluginHost:
    """Plugins with a listener that reads every dispatched request into ``seen`` (and the
    queues named into ``queues``)."""

    class Listener:
        @hookimpl
        def mq_records_dispatched(self, store_dir, requests):
            if queues is not None:
                queues.update(requests.queues)
            # a put's sysflag is the producer's; read back, it has the stored host bits too
            seen.extend(r._replace(sysflag=r.sysflag & ~(BORNHOST_V6 | STOREHOST_V6)) for r in requests)
            assert len(requests) == len(list(requests))

    host = PluginHost(load_entry_points=False)
    host.register(Listener())
    return host


def test_listeners_see_the_same_records_from_a_batch_put_and_from_a_slave_run(tmp_path):
    """mq_records_dispatched is given a batch put and a slave's runs without a request built
    per record; read, they are the requests the per-record path gave."""
    seen: dict[str, list[DispatchRequest]] = {"master": [], "slave": []}
    queues: dict[str, set] = {"master": set(), "slave": set()}
    hosts = {name: _recording_host(seen[name], queues[name]) for name in seen}
    master = MessageStore(tmp_path / "master", CONFIG, hosts["master"], clock=frozen_clock)
    master.open()
    _write(master, batch_path=True)
    chunks = _log_chunks(master)
    trio.run(master.close)
    slave = MessageStore(tmp_path / "slave", CONFIG, hosts["slave"], clock=frozen_clock)
    slave.open()
    slave.set_role(StoreRole.REPLICA, "a slave")
    for offset, chunk in chunks:
        slave.append_replicated(offset, chunk)
    assert slave.dispatch_replicated() == len(seen["master"]) == 113
    trio.run(slave.close)
    assert seen["slave"] == seen["master"]
    assert queues["master"] == queues["slave"] >= {("Orders", 0), ("Orders", 1), ("Mixed", 0)}
    assert {r.sysflag for r in seen["master"]} == {0, TRANSACTION_PREPARED}
    assert any(r[8] == ("order-3", "user-3") for r in seen["master"])  # KEYS of the tagged batch
