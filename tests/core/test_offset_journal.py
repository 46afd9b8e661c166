"""Consumer offsets travel with the log (core/broker/consume/offset_journal.py): a commit on the
master reaches its slave within a fraction of a second, not at the next whole-table copy, and a
broker whose table lost its last changes (a crash after its last save) finds them in its log."""

from __future__ import annotations

import gc
import time

import trio

from core.broker.broker import Broker
from core.broker.consume.offset_journal import OFFSETS_TOPIC
from core.config import BrokerSettings
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from tests.core.cluster_harness import start_cluster


def broker_at(address: str) -> Broker:
    gc.collect()
    return next(b for b in gc.get_objects() if type(b) is Broker and b.address == address)


async def test_a_commit_reaches_the_slave_with_the_log_and_a_restart_finds_unsaved_changes(nursery, tmp_path):
    # the whole-table copy runs every 60 s here: only the journal can bring the commit sooner
    cluster = await start_cluster(nursery, tmp_path, broker=BrokerSettings(register_interval_ms=500,
                                                                           slave_sync_interval_ms=60_000))
    master_node = await cluster.start_broker(broker_id=0)
    slave_node = await cluster.start_broker(broker_id=1)
    master, slave = broker_at(master_node.address), broker_at(slave_node.address)
    with trio.fail_after(10):
        while slave.replication.master_missing or not master.replication.metrics().slaves_connected:
            await trio.sleep(0.02)
    master.topics.ensure("Journaled", 4)
    async with open_remoting_client() as client:
        for offset in (7, 42):
            committed = await client.invoke(master_node.address, RemotingCommand(
                code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
                    "consumerGroup": "Readers", "topic": "Journaled", "queueId": "0", "commitOffset": str(offset)}))
            assert committed.code == ResponseCode.SUCCESS, committed.remark
    started = time.monotonic()
    with trio.fail_after(5):
        while slave.offsets.get("Readers", "Journaled", 0) != 42:
            await trio.sleep(0.005)
    took = time.monotonic() - started
    print(f"a consumer offset commit reached the slave {took * 1000:.0f} ms after it was answered")
    assert took < 1.0
    assert master.offset_journal.written >= 1 and slave.offset_journal.applied >= 1
    assert master.store.max_queue_offset(OFFSETS_TOPIC, 0) >= 1
    assert OFFSETS_TOPIC not in master.topics.topics  # internal: in no route

    # a table that lost what followed its last save finds it in the log again
    for broker in (master, slave):
        broker.offsets.table.clear()
        broker.offsets.journal_next = 0
        assert broker.offset_journal.catch_up() >= 1
        assert broker.offsets.get("Readers", "Journaled", 0) == 42
