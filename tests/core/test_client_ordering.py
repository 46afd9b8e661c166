"""Our client's orderly send (queue selectors) and orderly push consumer (queue locks,
suspend and retry)."""

import pytest
import trio

from core.client.consumer import PushConsumer
from core.client.producer import Message, Producer, select_by_hash
from core.client.pull import pull
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


async def send_keyed(producer, topic, numbers, keys=4):
    """Key k of message i is i % keys, and key k goes to queue k."""
    for i in numbers:
        await producer.send_orderly(Message(topic, f"{i % keys}:{i}".encode()), lambda qs, m, k: qs[k], i % keys)


async def test_orderly_members_never_share_a_queue_and_each_key_keeps_its_order(cluster):
    busy: dict[MessageQueue, str] = {}
    overlaps = []
    seen: dict[str, list[int]] = {}
    by_member = {"a": 0, "b": 0}

    def handler_for(member):
        async def handler(messages):
            mq = MessageQueue(messages[0].topic, "broker-a", messages[0].queue_id)
            if busy.setdefault(mq, member) != member:
                overlaps.append((mq, busy[mq], member))
            try:
                await trio.sleep(0.005)  # the work, during which nobody else may touch this queue
                for m in messages:
                    key, i = m.body.decode().split(":")
                    seen.setdefault(key, []).append(int(i))
                by_member[member] += len(messages)
            finally:
                busy.pop(mq, None)
            return True
        return handler

    async with open_client(cluster.namesrv, instance="a") as client_a, \
            open_client(cluster.namesrv, instance="b") as client_b:
        producer = Producer(client_a, "OPG")
        await send_keyed(producer, "Ord", range(200))
        first = PushConsumer(client_a, "OCG", handler_for("a"), from_beginning=True, orderly=True)
        first.subscribe("Ord")
        await first.start()
        with trio.fail_after(10):
            while by_member["a"] < 20:
                await trio.sleep(0.01)
        # a second member joins while the first is busy: half the queues change hands
        second = PushConsumer(client_b, "OCG", handler_for("b"), from_beginning=True, orderly=True)
        second.subscribe("Ord")
        await second.start()
        with trio.fail_after(30):
            while len(second._loops) < 2:
                await trio.sleep(0.02)
        await send_keyed(producer, "Ord", range(200, 240))
        with trio.fail_after(30):
            while sum(len(set(v)) for v in seen.values()) < 240:
                await trio.sleep(0.02)
        await second.stop()
        await first.stop()
    assert overlaps == []
    assert by_member["b"] > 0, "the second member took queues over from the first"
    for key, order in seen.items():
        firsts = list(dict.fromkeys(order))  # a queue handed over may repeat what was not committed
        assert firsts == sorted(firsts) and len(firsts) == 60, key


async def test_orderly_suspends_a_queue_then_dead_letters_after_max_tries(cluster):
    offered: list[tuple[str, int]] = []  # (body, reconsume times) of each batch's first message
    consumed: list[str] = []

    async def handler(messages):
        offered.append((messages[0].body.decode(), messages[0].reconsume_times))
        if messages[0].body == b"0:poison":
            return 0
        consumed.extend(m.body.decode() for m in messages)
        return True

    async with open_client(cluster.namesrv) as client:
        producer = Producer(client, "OPG")
        for body in (b"0:poison", b"0:after"):
            await producer.send_orderly(Message("Sus", body), lambda qs, m, a: qs[0])
        consumer = PushConsumer(client, "SCG", handler, from_beginning=True, orderly=True, max_reconsume_times=3,
                                suspend_s=0.05)
        consumer.subscribe("Sus")
        await consumer.start()
        with trio.fail_after(15):
            while not consumed:
                await trio.sleep(0.02)
        dead = []
        with trio.fail_after(10):
            while not dead:
                try:
                    dead = (await pull(client, "X", MessageQueue("%DLQ%SCG", "broker-a", 0), 0)).messages
                except ClientError:  # its route is not on the name server yet
                    pass
                await trio.sleep(0.05)
        await consumer.stop()
    assert offered == [("0:poison", 0), ("0:poison", 1), ("0:poison", 2), ("0:after", 0)], \
        "offered again with its tries counted, three times in all, and nothing overtakes it"
    assert consumed == ["0:after"]
    assert dead[0].body == b"0:poison"
