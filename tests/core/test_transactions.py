"""Transactional messages: halves, END_TRANSACTION, checks, restarts, and our transactional producer."""

import dataclasses
import time

import pytest
import trio

from core.broker.transactions.transaction_service import TransactionDecisionError, TransactionService
from core.broker.transactions.transactions import HalfTable, committed, is_half, to_half
from core.client.producer import Message
from core.client.pull import PullStatus, pull
from core.client.route import MessageQueue
from core.client.runtime import open_client
from core.client.transaction_producer import TransactionProducer, TransactionState
from core.config import BrokerSettings
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.store.message_store import open_message_store
from core.topic_names import TRANS_CHECK_MAX_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_TOPIC
from formats.properties import encode_properties
from formats.record import MessageRecord, decode_records
from formats.sysflag import TRANSACTION_COMMIT, transaction_type
from tests.core.cluster_harness import SMALL_STORE, start_cluster
from tests.core.test_broker import pull_cmd, send_cmd

FAST_CHECKS = BrokerSettings(register_interval_ms=500, transaction_timeout_ms=200, transaction_check_interval_ms=300,
                             transaction_check_max=3)
HOST = ("127.0.0.1", 10911)


def sent_half(i: int, group: str = "TXG") -> MessageRecord:
    return MessageRecord("Orders", f"tx{i}".encode(), {"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": f"{i:032X}",
                                                       "TAGS": "t"}, queue_id=2, sysflag=0x4, store_host=HOST)


def test_half_and_committed_forms():
    rec = sent_half(1)
    assert is_half(rec) and not is_half(MessageRecord("Orders"))
    half = to_half(rec)
    assert (half.topic, half.queue_id, half.sysflag) == (TRANS_HALF_TOPIC, 0, 0)
    assert half.properties["REAL_TOPIC"] == "Orders" and half.properties["REAL_QID"] == "2"
    stored = dataclasses.replace(half, phys_offset=4096)
    final = committed(stored, HOST)
    assert (final.topic, final.queue_id, final.prepared_tx_offset) == ("Orders", 2, 4096)
    assert transaction_type(final.sysflag) == TRANSACTION_COMMIT and "REAL_TOPIC" not in final.properties
    assert final.properties["TRAN_MSG"] == "true" and final.properties["PGROUP"] == "TXG"
    assert committed(dataclasses.replace(stored, properties={}), HOST) is None


def test_half_table_due_order_and_immunity():
    table = HalfTable()
    a = table.add(to_half(sent_half(1)), 0, 100, stored_ms=1000, timeout_ms=500)
    late = to_half(sent_half(2))
    late.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "5"
    table.add(late, 1, 200, stored_ms=1000, timeout_ms=500)
    assert table.due(1499) == [] and table.due(1500) == [a]
    table.checked(a, 1500, 300)
    assert table.due(1700) == [] and [h.queue_offset for h in table.due(6000)] == [0, 1]
    assert table.find(0, 999) is None and table.find(0, 100) is a
    assert table.low_water(7) == 0 and table.decide(0) is a and table.decide(0) is None
    assert table.low_water(7) == 1


def service(store, tmp_path, producers=lambda group: [], **settings):
    config = BrokerSettings(transaction_timeout_ms=0, transaction_check_interval_ms=1000, transaction_check_max=2,
                            **settings)
    return TransactionService(store, tmp_path / "config", config, HOST, producers, lambda rec: rec)


def open_half(store, svc, i):
    half = svc.half_of(sent_half(i))
    result = store.put(half)
    svc.opened(half, result)
    return result


async def test_decisions_count_once_and_name_what_is_wrong(tmp_path):
    async with open_message_store(tmp_path / "n", SMALL_STORE) as store:
        svc = service(store, tmp_path)
        first, second = open_half(store, svc, 1), open_half(store, svc, 2)
        assert store.max_queue_offset("Orders", 2) == 0, "halves are invisible"
        with pytest.raises(TransactionDecisionError, match="producer group wrong"):
            svc.decide(first.queue_offset, first.phys_offset, "OTHER", commit=True)
        with pytest.raises(TransactionDecisionError, match="no open transaction half"):
            svc.decide(first.queue_offset, second.phys_offset, "TXG", commit=True)
        done = svc.decide(first.queue_offset, first.phys_offset, "TXG", commit=True)
        assert store.read_record(done.phys_offset).body == b"tx1"
        with pytest.raises(TransactionDecisionError, match="decided already"):
            svc.decide(first.queue_offset, first.phys_offset, "TXG", commit=True)
        assert svc.decide(second.queue_offset, second.phys_offset, "TXG", commit=False) is None
        assert store.max_queue_offset("Orders", 2) == 1 and store.max_queue_offset(TRANS_OP_TOPIC, 0) == 2
        assert (svc.stats.committed, svc.stats.rolled_back) == (1, 1)


async def test_checks_go_to_a_producer_count_only_when_sent_and_give_up_after_the_max(tmp_path):
    async with open_message_store(tmp_path / "n", SMALL_STORE) as store:
        online: list[object] = []
        svc = service(store, tmp_path, producers=lambda group: online if group == "TXG" else [])
        result = open_half(store, svc, 1)
        now = int(time.time() * 1000)
        assert svc.due_checks(now) == [], "nobody to ask"
        assert svc.table.open[0].checks == 0, "an unasked round is not a check"
        online.append("conn")
        (check,) = svc.due_checks(now + 1000)
        assert check.connection == "conn" and check.command.code == RequestCode.CHECK_TRANSACTION_STATE
        assert check.command.ext_fields["commitLogOffset"] == str(result.phys_offset)
        assert check.command.ext_fields["tranStateTableOffset"] == "0"
        shown = decode_records(check.command.body)[0]
        assert (shown.topic, shown.queue_id, shown.body) == ("Orders", 2, b"tx1"), "the half as sent"
        assert svc.due_checks(now + 1500) == [], "spaced by the check interval"
        assert len(svc.due_checks(now + 2000)) == 1
        assert svc.due_checks(now + 3000) == [] and not svc.table.open
        (kept,) = decode_records(store.commitlog.read(*_first_entry(store, TRANS_CHECK_MAX_TOPIC)))
        assert kept.body == b"tx1" and svc.stats.given_up == 1


def _first_entry(store, topic):
    ((_, entry),) = store.queue_entries(topic, 0, 0, 1)
    return entry.phys_offset, entry.size


async def test_a_restart_reopens_undecided_halves_and_does_not_commit_twice(tmp_path):
    async with open_message_store(tmp_path / "n", SMALL_STORE) as store:
        svc = service(store, tmp_path)
        decided, left, crashed = (open_half(store, svc, i) for i in (1, 2, 3))
        svc.decide(decided.queue_offset, decided.phys_offset, "TXG", commit=False)
        # the commit of the third is stored, then the process dies before its op record
        store.put(committed(store.read_record(crashed.phys_offset), HOST))
        svc.save()
        again = service(store, tmp_path)
        assert sorted(again.table.open) == [left.queue_offset, crashed.queue_offset]
        # a late END_TRANSACTION commit for it does not store a second copy
        again.decide(crashed.queue_offset, crashed.phys_offset, "TXG", commit=True)
        assert store.max_queue_offset("Orders", 2) == 1
        third = service(store, tmp_path)
        assert sorted(third.table.open) == [left.queue_offset]


# ---------------------------------------------------------------------------- over TCP


@pytest.fixture
async def tx_cluster(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path, broker=FAST_CHECKS)
    running = await cluster.start_broker()
    return cluster, running


async def visible(runtime, queue: MessageQueue, uniq: str, deadline_s: float = 15.0) -> MessageRecord:
    with trio.fail_after(deadline_s):
        while True:
            got = await pull(runtime, "TXC", queue, 0, max_nums=32)
            for rec in got.messages if got.status is PullStatus.FOUND else []:
                if rec.uniq_key == uniq:
                    return rec
            await trio.sleep(0.05)


async def test_commit_shows_the_message_and_rollback_drops_it(tx_cluster):
    cluster, _ = tx_cluster
    calls = []

    def local(msg, arg):
        calls.append((msg.body, arg))
        return TransactionState.COMMIT if arg == "yes" else TransactionState.ROLLBACK

    async with open_client(cluster.namesrv) as client:
        producer = TransactionProducer(client, "TXG", check=lambda rec: TransactionState.UNKNOWN)
        kept = await producer.send_in_transaction(Message("TxOrders", b"kept", tags="t"), local, "yes")
        dropped = await producer.send_in_transaction(Message("TxOrders", b"dropped"), local, "no")
        assert calls == [(b"kept", "yes"), (b"dropped", "no")]
        assert (kept.state, dropped.state) == (TransactionState.COMMIT, TransactionState.ROLLBACK)
        rec = await visible(client, kept.send.queue, kept.send.msg_id)
        assert rec.body == b"kept" and rec.topic == "TxOrders" and rec.properties["TAGS"] == "t"
        assert rec.properties["TRAN_MSG"] == "true" and transaction_type(rec.sysflag) == TRANSACTION_COMMIT
        everything = []
        for q in range(4):
            got = await pull(client, "TXC", MessageQueue("TxOrders", "broker-a", q), 0)
            everything += [m.body for m in got.messages]
        assert everything == [b"kept"]


async def test_an_unknown_outcome_is_checked_and_a_failing_local_transaction_is_unknown(tx_cluster):
    cluster, _ = tx_cluster
    asked = []

    def check(rec):
        asked.append(rec)
        return TransactionState.COMMIT

    def local(msg, arg):
        raise RuntimeError("the database went away")

    async with open_client(cluster.namesrv) as client:
        producer = TransactionProducer(client, "TXG", check=check)
        await producer.start(["TxChecked"])
        sent = await producer.send_in_transaction(Message("TxChecked", b"asked"), local)
        assert sent.state is TransactionState.UNKNOWN
        rec = await visible(client, sent.send.queue, sent.send.msg_id)
        assert rec.body == b"asked"
        assert asked[0].topic == "TxChecked" and asked[0].uniq_key == sent.send.msg_id
        assert producer.checks_answered == 1


async def test_check_back_reaches_the_producer_after_it_restarts_and_after_a_broker_restart(tx_cluster):
    cluster, running = tx_cluster
    port = int(running.address.split(":")[1])
    async with open_client(cluster.namesrv, instance="before") as client:
        producer = TransactionProducer(client, "TXR", check=lambda rec: TransactionState.UNKNOWN)
        first = await producer.send_in_transaction(Message("TxRestart", b"one"), lambda m, a: TransactionState.UNKNOWN)
        second = await producer.send_in_transaction(Message("TxRestart", b"two"), lambda m, a: TransactionState.UNKNOWN)
    # the producer is gone; the broker restarts too, and must still know both halves are open
    await cluster.stop_broker(running.name)
    await cluster.start_broker(port=port)
    answers = {first.send.msg_id: TransactionState.COMMIT, second.send.msg_id: TransactionState.ROLLBACK}
    async with open_client(cluster.namesrv, instance="after") as client:
        producer = TransactionProducer(client, "TXR", check=lambda rec: answers[rec.uniq_key])
        await producer.start(["TxRestart"])
        rec = await visible(client, first.send.queue, first.send.msg_id)
        assert rec.body == b"one"
        with trio.fail_after(10):
            while producer.checks_answered < 2:
                await trio.sleep(0.05)
        got = await pull(client, "TXC", second.send.queue, 0)
        assert b"two" not in [m.body for m in got.messages]


async def test_end_transaction_errors_are_clear_and_batches_cannot_carry_halves(tx_cluster):
    from formats.batch import BatchItem, encode_batch

    _, running = tx_cluster
    async with open_remoting_client() as client:
        end = RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields={
            "producerGroup": "TXG", "tranStateTableOffset": "5", "commitLogOffset": "123", "commitOrRollback": "8"})
        resp = await client.invoke(running.address, end)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "no open transaction half" in resp.remark
        end.ext_fields["commitOrRollback"] = "3"
        resp = await client.invoke(running.address, end)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "0, 8 or 12" in resp.remark
        del end.ext_fields["commitLogOffset"]
        resp = await client.invoke(running.address, end)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "commitLogOffset" in resp.remark
        cmd = send_cmd("B", encode_batch([BatchItem(b"x", {"TRAN_MSG": "true"})]), batch="true")
        cmd.code = RequestCode.SEND_BATCH_MESSAGE
        resp = await client.invoke(running.address, cmd)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "batched" in resp.remark
        # a half sent by hand is stored, invisible, and the broker keeps serving
        half = send_cmd("Hand", b"h")
        half.ext_fields["i"] = encode_properties({"TRAN_MSG": "true", "PGROUP": "TXG", "WAIT": "true"})
        assert (await client.invoke(running.address, half)).code == ResponseCode.SUCCESS
        resp = await client.invoke(running.address, pull_cmd("Hand", 0, 0))
        assert resp.code != ResponseCode.SUCCESS
        resp = await client.invoke(running.address, pull_cmd(TRANS_HALF_TOPIC, 0, 0))
        assert resp.code == ResponseCode.SUCCESS and decode_records(resp.body)[0].body == b"h"
