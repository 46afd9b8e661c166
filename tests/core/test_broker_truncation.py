"""A broker's state derived from the log follows the store when the log is cut
(MessageStore.truncate -> Broker.follow_truncation, the seam master-slave failover uses when a
returning master becomes a slave and cuts what its new master never had): committed offsets,
delay and timer progress, open transaction halves and the POP revive ledgers."""

from __future__ import annotations

import gc

from core.broker.broker import Broker
from core.broker.transactions.transactions import op_record, to_half
from core.topic_names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from formats.properties import PGROUP
from formats.record import MessageRecord
from tests.core.cluster_harness import start_cluster


async def test_a_cut_log_takes_offsets_progress_and_open_halves_with_it(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path)
    running = await cluster.start_broker()
    gc.collect()
    broker = next(b for b in gc.get_objects() if type(b) is Broker and b.address == running.address)
    store = broker.store

    kept = [store.put(MessageRecord("CutTopic", b"kept %d" % i, queue_id=0)) for i in range(5)]
    decided_half = store.put(to_half(MessageRecord("CutTopic", b"decided", properties={PGROUP: "TxGroup"})))
    end = store.log_end  # the cut: everything from here on goes
    store.put(op_record(decided_half.queue_offset, 0, broker.store_host))  # its decision, cut
    cut = [store.put(MessageRecord("CutTopic", b"cut %d" % i, queue_id=0)) for i in range(3)]
    half = to_half(MessageRecord("CutTopic", b"open", properties={PGROUP: "TxGroup"}))
    broker.transactions.opened(half, store.put(half))  # a half past the cut
    broker.transactions.table.decide(decided_half.queue_offset)  # decided by the op record above
    store.put(MessageRecord(SCHEDULE_TOPIC, b"delayed", queue_id=0))
    broker.schedule.offsets[1] = 1  # level 1 delivered its one entry
    broker.offsets.commit("Readers", "CutTopic", 0, cut[-1].queue_offset + 1)
    broker.offsets.commit("Slow", "CutTopic", 0, 2)
    broker.pop_ledgers[0] = object()  # type: ignore[assignment]  # a revive ledger in flight
    assert store.max_queue_offset("CutTopic", 0) == 8

    store.truncate(end)

    assert store.max_queue_offset("CutTopic", 0) == len(kept)
    assert store.max_queue_offset(SCHEDULE_TOPIC, 0) == 0
    assert broker.offsets.get("Readers", "CutTopic", 0) == len(kept)  # lowered to the queue's end
    assert broker.offsets.get("Slow", "CutTopic", 0) == 2  # behind the cut: untouched
    assert broker.schedule.offsets[1] == 0
    # the open half past the cut is gone; the half whose decision was cut is open again
    assert sorted(broker.transactions.table.open) == [decided_half.queue_offset]
    assert store.max_queue_offset(TRANS_HALF_TOPIC, 0) == decided_half.queue_offset + 1
    assert broker.pop_ledgers == {}
