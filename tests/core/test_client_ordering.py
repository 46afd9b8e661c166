"""Our client's orderly send (queue selectors)."""

import pytest

from core.client.consumer import pull
from core.client.producer import Message, Producer, select_by_hash
from core.client.route import MessageQueue
from core.client.runtime import ClientError, open_client
from tests.core.cluster_harness import start_cluster


@pytest.fixture
async def cluster(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path)
    await cluster.start_broker()
    return cluster


async def test_send_orderly_keeps_each_key_in_one_queue_in_send_order(cluster):
    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "OPG")
        placed: dict[str, set[int]] = {}
        for i in range(30):
            order = f"order-{i % 3}"
            result = await producer.send_orderly(Message("Ordered", f"{order}:{i}".encode()), select_by_hash, order)
            placed.setdefault(order, set()).add(result.queue.queue_id)
        assert all(len(queues) == 1 for queues in placed.values()), placed
        for order, (queue_id,) in placed.items():
            got = await pull(client, "OCG", MessageQueue("Ordered", "broker-a", queue_id), 0)
            mine = [int(m.body.split(b":")[1]) for m in got.messages if m.body.startswith(order.encode())]
            assert mine == sorted(mine) and len(mine) == 10
        # the same key picks the same queue in any process (a stable hash, not Python's salted one)
        queues = [MessageQueue("T", "b", q) for q in range(8)]
        assert select_by_hash(queues, Message("T", b""), "order-1") == MessageQueue("T", "b", 7)


async def test_a_selector_must_pick_one_of_the_topics_queues(cluster):
    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "OPG")
        await producer.send(Message("Picky", b"make the topic"))
        with pytest.raises(ClientError, match="not a writable queue"):
            await producer.send_orderly(Message("Picky", b"x"), lambda qs, m, a: MessageQueue("Picky", "nope", 0))
