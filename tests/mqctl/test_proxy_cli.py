"""A proxy node run by mqctl: started, shown and stopped like the others; mqctl's own send and
tail through it; a transaction's check-back relayed to the producer connected through it."""

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
