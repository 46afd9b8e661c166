"""Our client's broadcasting push consumer: every member reads every message and keeps its own
offsets."""

import json

import pytest
import trio

from core.client.consumer import MessageModel, PushConsumer
from core.client.producer import Message, Producer
from core.client.runtime import ClientError, open_client
from tests.core.cluster_harness import start_cluster


@pytest.fixture
async def cluster(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path)
    await cluster.start_broker()
    return cluster


def collector(into: list[bytes]):
    async def handler(messages):
        into.extend(m.body for m in messages)
        return True
    return handler


async def wait_for(items: list, count: int, deadline_s: float = 15.0) -> None:
    with trio.fail_after(deadline_s):
        while len(items) < count:
            await trio.sleep(0.02)


async def test_each_broadcasting_member_gets_everything_and_resumes_from_its_own_file(cluster, tmp_path):
    got = {"a": [], "b": []}
    async with open_client(cluster.namesrv, instance="a") as client_a, \
            open_client(cluster.namesrv, instance="b") as client_b:
        producer = Producer(client_a, "BPG")
        await producer.send(Message("News", b"create the topic"))
        members = {}
        for name, client in (("a", client_a), ("b", client_b)):
            members[name] = PushConsumer(client, "BCG", collector(got[name]), message_model=MessageModel.BROADCASTING,
                                         offsets_path=tmp_path / name / "offsets.json")
            members[name].subscribe("News")
            await members[name].start()
        for i in range(40):
            await producer.send(Message("News", f"n{i}".encode()))
        expected = [f"n{i}".encode() for i in range(40)]
        await wait_for(got["a"], 40)
        await wait_for(got["b"], 40)
        assert sorted(got["a"]) == sorted(got["b"]) == sorted(expected), "each member got every message once"
        info = members["a"].running_info()
        assert info["properties"]["messageModel"] == "BROADCASTING"
        assert not any(s["topic"].startswith("%RETRY%") for s in info["subscriptionSet"])
        await members["a"].stop()
        saved = json.loads((tmp_path / "a" / "offsets.json").read_text())["offsetTable"]
        assert sum(row["offset"] for row in saved) == 41, "offsets kept in the member's own file"
        for i in range(40, 45):
            await producer.send(Message("News", f"n{i}".encode()))
        again: list[bytes] = []
        restarted = PushConsumer(client_a, "BCG", collector(again), message_model=MessageModel.BROADCASTING,
                                 offsets_path=tmp_path / "a" / "offsets.json")
        restarted.subscribe("News")
        await restarted.start()
        await wait_for(again, 5)
        await wait_for(got["b"], 45)
        await restarted.stop()
        await members["b"].stop()
    assert sorted(again) == sorted(f"n{i}".encode() for i in range(40, 45)), "resumed where it stopped"
    # the broker kept no offsets for a broadcasting group
    assert not (cluster.data_dir / "broker-a-0" / "config" / "consumerOffsets.json").exists() or \
        "BCG" not in (cluster.data_dir / "broker-a-0" / "config" / "consumerOffsets.json").read_text()


async def test_broadcasting_cannot_be_orderly(cluster):
    async with open_client(cluster.namesrv) as client:
        with pytest.raises(ClientError, match="cannot be broadcasting"):
            PushConsumer(client, "G", collector([]), orderly=True, message_model=MessageModel.BROADCASTING)
