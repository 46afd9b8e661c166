"""A broker counts per request, not per message: a batch of 50 adds 50 messages with one
observation of the send latency; refusals and pulls are counted too."""

from __future__ import annotations

import urllib.request

import trio

from core.client.producer import Message, Producer
from core.client.runtime import open_client
from core.metrics.http import address_file
from mqctl.top.scrape import parse
from tests.core.cluster_harness import start_cluster


def _scrape(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
        return parse(answer.read().decode())


async def test_a_batch_is_counted_once_with_all_its_messages(nursery, tmp_path) -> None:
    cluster = await start_cluster(nursery, tmp_path)
    await cluster.start_broker()
    address = address_file(tmp_path, "broker-a-0").read_text().strip()
    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "PG")
        await producer.send(Message("Counted", b"warm-up"))  # creates the topic
        before = await trio.to_thread.run_sync(_scrape, address)
        result = await producer.send_batch([Message("Counted", b"x" * 10) for _ in range(50)])
        assert result.status == "SEND_OK"
        after = await trio.to_thread.run_sync(_scrape, address)
    topic = (("topic", "Counted"),)
    assert after["rocketmq_messages_in_total"][topic] - before["rocketmq_messages_in_total"][topic] == 50
    sends = (("code", "SUCCESS"), ("protocol", "remoting"), ("request", "SEND_BATCH_MESSAGE"))
    assert after["rocketmq_rpc_latency_seconds_count"][sends] == 1  # one request, one observation
    assert after["rocketmq_answers_total"][sends] == 1
    assert after["rocketmq_messages_in_bytes_total"][topic] > before["rocketmq_messages_in_bytes_total"][topic] + 500
    assert after["rocketmq_store_size_bytes"][()] > 0
    assert after["rocketmq_replication_mode_info"][(("mode", "async"), ("role", "master"))] == 1
