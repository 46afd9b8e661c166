"""A proxy node run by mqctl: started, shown and stopped like the others; mqctl's own send and
tail through it; a transaction's check-back relayed to the producer connected through it; POP,
ack and QUERY_ASSIGNMENT through a door."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from core.client.lookup import query_messages
from core.client.producer import Message
from core.client.runtime import open_client
from core.client.transaction_producer import TransactionProducer, TransactionState
from mqctl.common import probe
from tests.conftest import Cluster, child_env, running_cluster


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Cluster]:
    broker = "transaction_timeout_ms = 0\ntransaction_check_interval_ms = 300"  # check open halves at once
    with running_cluster(tmp_path, child_env(), proxies=1, broker=broker) as c:
        yield c


def forwarded(proxy: str) -> int:
    info = trio.run(probe.runtime_info, proxy)
    assert info is not None
    return int(info["proxyForwarded"])


def test_mqctl_sends_and_tails_through_the_proxy_and_status_shows_it(proxied: Cluster) -> None:
    proxy = proxied.proxies[0]
    rows = [json.loads(line) for line in proxied.mqctl("status", "--json").stdout.splitlines()]
    assert {(r["node"], r["role"], r["alive"]) for r in rows if r["role"] == "proxy"} == {("proxy1", "proxy", True)}
    before = forwarded(proxy)
    sent = proxied.mqctl("send", "ViaProxy", "--proxy", "proxy1", "--json", input="one\ntwo\nthree\n")
    assert sent.returncode == 0, sent.stderr
    assert [json.loads(line)["status"] for line in sent.stdout.splitlines()] == ["SEND_OK"] * 3
    assert forwarded(proxy) - before >= 3
    tailed = proxied.mqctl("tail", "ViaProxy", "--from-beginning", "--count", "3", "--json", "--proxy", proxy)
    assert tailed.returncode == 0, tailed.stderr
    assert sorted(json.loads(line)["body"] for line in tailed.stdout.splitlines()) == ["one", "three", "two"]
    sent_by_key = proxied.mqctl("send", "ViaProxy", "keyed", "--key", "order-7", "--proxy", "proxy1")
    assert sent_by_key.returncode == 0, sent_by_key.stderr

    async def query() -> list[str]:  # QUERY_MESSAGE goes to the door of each group, then to its master
        async with open_client([proxy]) as client:
            return [r.body.decode() for r in await query_messages(client, "ViaProxy", "order-7")]

    assert trio.run(query) == ["keyed"]
    wrong = proxied.mqctl("send", "ViaProxy", "x", "--proxy", "proxy9")
    assert wrong.returncode != 0 and "--proxy takes a proxy of" in wrong.stderr and "proxy1" in wrong.stderr
    stopped = proxied.mqctl("stop", "proxy1", "--json")
    assert json.loads(stopped.stdout.splitlines()[0]) == {"node": "proxy1", "state": "stopped"}


def test_a_check_back_reaches_the_producer_connected_through_the_proxy(proxied: Cluster) -> None:
    proxy = proxied.proxies[0]
    asked: list[str] = []

    def check(rec):  # type: ignore[no-untyped-def]
        asked.append(rec.uniq_key)
        return TransactionState.COMMIT

    async def run() -> str:
        async with open_client([proxy], instance="tx-through-proxy") as client:
            producer = TransactionProducer(client, "TXP", check=check)
            await producer.start(["TxProxied"])
            sent = await producer.send_in_transaction(Message("TxProxied", b"decided later"),
                                                      lambda m, a: TransactionState.UNKNOWN)
            assert sent.state is TransactionState.UNKNOWN
            with trio.fail_after(20):
                while producer.checks_answered < 1:
                    await trio.sleep(0.05)
            return sent.send.msg_id

    msg_id = trio.run(run)
    assert asked[0] == msg_id
    got = proxied.mqctl("tail", "TxProxied", "--from-beginning", "--count", "1", "--json", "--proxy", "proxy1")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["body"] == "decided later"


def test_pop_and_ack_go_through_a_door_to_the_master(proxied: Cluster) -> None:
    from core.remoting.client import open_remoting_client
    from core.remoting.codes import RequestCode, ResponseCode
    from core.remoting.command import RemotingCommand
    from formats.record import decode_records

    sent = proxied.mqctl("send", "PopProxied", "--proxy", "proxy1", "--json", input="a\nb\n")
    assert sent.returncode == 0, sent.stderr
    host, port = proxied.proxies[0].rsplit(":", 1)
    door = f"{host}:{int(port) + 1}"  # broker-a's door

    async def run() -> list[int]:
        async with open_remoting_client() as client:
            popped = []
            with trio.fail_after(20):
                while len(popped) < 2:
                    resp = await client.invoke(door, RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields={
                        "consumerGroup": "PG", "topic": "PopProxied", "queueId": "-1", "maxMsgNums": "32",
                        "invisibleTime": "30000", "pollTime": "8000", "bornTime": "0", "initMode": "0"}), timeout_s=15)
                    assert resp.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), resp.remark
                    if resp.code == ResponseCode.SUCCESS:
                        ext = resp.ext_fields
                        starts = {int(e.split()[1]): e.split()[2] for e in ext["startOffsetInfo"].split(";")}
                        for rec in decode_records(resp.body):
                            assert rec.store_host == (host, int(port) + 1)  # the door, not the broker
                            handle = (f"{starts[rec.queue_id]} {ext['popTime']} {ext['invisibleTime']} "
                                      f"{ext['reviveQid']} 0 broker-a {rec.queue_id} {rec.queue_offset}")
                            acked = await client.invoke(door, RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields={
                                "consumerGroup": "PG", "topic": "PopProxied", "queueId": str(rec.queue_id),
                                "extraInfo": handle, "offset": str(rec.queue_offset)}))
                            popped.append(acked.code)
            # a 5.x Java POP consumer's rebalance asks the broker, through the door, for its queues
            beat = {"clientID": "p1", "consumerDataSet": [{"groupName": "PG", "consumeType": "CONSUME_POP",
                    "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": "PopProxied", "subString": "*", "subVersion": 1}]}]}
            assert (await client.invoke(door, RemotingCommand(code=RequestCode.HEART_BEAT,
                                                              body=json.dumps(beat).encode()))).code == 0
            moded = proxied.mqctl("group", "mode", "PG", "PopProxied", "--pop", "--pop-share", "0")
            assert moded.returncode == 0, moded.stderr
            asked = await client.invoke(door, RemotingCommand(code=RequestCode.QUERY_ASSIGNMENT, body=json.dumps({
                "topic": "PopProxied", "consumerGroup": "PG", "clientId": "p1", "strategyName": "AVG",
                "messageModel": "CLUSTERING"}).encode()))
            assert asked.code == ResponseCode.SUCCESS, asked.remark
            assigned = json.loads(asked.body)["messageQueueAssignments"]
            assert [(a["messageQueue"]["brokerName"], a["messageQueue"]["queueId"], a["mode"]) for a in assigned] == [
                ("broker-a", -1, "POP")]  # set with mqctl: every client POPs the whole group
            return popped

    assert trio.run(run) == [ResponseCode.SUCCESS] * 2
