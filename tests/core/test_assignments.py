"""Queues balanced by the broker: QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE, the allocation
rules alone, and two brokers with their name server on real TCP."""

from __future__ import annotations

import orjson
import pytest
import trio

from core.broker.consume.assignments import allocate, assign
from core.broker.consume.request_modes import RequestMode, RequestModeError, RequestModeTable
from core.client.route import MessageQueue
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from tests.core.cluster_harness import start_cluster

QUEUES = [MessageQueue("T", broker, q) for broker in ("broker-a", "broker-b") for q in range(4)]


@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE"])
@pytest.mark.parametrize("clients", [1, 3, 8, 11])
def test_a_pull_group_s_clients_share_every_queue_once(strategy, clients) -> None:
    ids = [f"c{i:02}" for i in range(clients)]
    shares = [allocate(strategy, c, QUEUES, ids) for c in ids]
    assert sorted(q for share in shares for q in share) == QUEUES
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_avg_gives_neighbouring_runs_and_by_circle_deals_round() -> None:
    ids = ["a", "b", "c"]
    assert [q.queue_id for q in allocate("AVG", "a", QUEUES, ids)] == [0, 1, 2]  # 8 queues: 3, 3, 2
    assert allocate("AVG", "c", QUEUES, ids) == QUEUES[6:]
    assert allocate("AVG_BY_CIRCLE", "b", QUEUES, ids) == [QUEUES[1], QUEUES[4], QUEUES[7]]
    assert allocate("AVG", "stranger", QUEUES, ids) == []


def test_pop_shares_queues_with_the_next_clients_or_pops_each_broker_whole() -> None:
    ids = ["a", "b", "c", "d"]
    whole = assign(RequestMode("T", "G", "POP", 0), "AVG", "CLUSTERING", "a", QUEUES, ids)
    assert whole == [MessageQueue("T", "broker-a", -1), MessageQueue("T", "broker-b", -1)]
    # sharing with every other client is reading every queue: the same whole groups
    assert assign(RequestMode("T", "G", "POP", 3), "AVG", "CLUSTERING", "b", QUEUES, ids) == whole
    shared = assign(RequestMode("T", "G", "POP", 1), "AVG", "CLUSTERING", "d", QUEUES, ids)
    assert shared == sorted(allocate("AVG", "d", QUEUES, ids) + allocate("AVG", "a", QUEUES, ids))
    # each queue is read by popShareQueueNum + 1 clients
    every = [q for c in ids for q in assign(RequestMode("T", "G", "POP", 1), "AVG", "CLUSTERING", c, QUEUES, ids)]
    assert all(every.count(q) == 2 for q in QUEUES)
    crowd = [f"c{i:02}" for i in range(10)]  # more clients than queues: one queue each, round the list
    assert assign(RequestMode("T", "G", "POP", 2), "AVG", "CLUSTERING", "c09", QUEUES, crowd) == [QUEUES[1]]
    assert assign(RequestMode("T", "G"), "AVG", "BROADCASTING", "x", QUEUES, []) == QUEUES


def test_modes_are_kept_across_a_restart_and_a_retry_topic_is_refused(tmp_path) -> None:
    path = tmp_path / "messageRequestMode.json"
    table = RequestModeTable(path)
    assert table.get("T", "G") == RequestMode("T", "G", "PULL", -1)
    table.put(RequestMode.from_json({"topic": "T", "consumerGroup": "G", "mode": "POP", "popShareQueueNum": 2}))
    assert RequestModeTable(path).get("T", "G") == RequestMode("T", "G", "POP", 2)
    assert orjson.loads(path.read_bytes())["messageRequestModeMap"]["T"]["G"]["mode"] == "POP"
    with pytest.raises(RequestModeError, match="retry topic"):
        table.put(RequestMode("%RETRY%G", "G", "POP", 0))
    for bad in ({"topic": "T", "consumerGroup": "G", "mode": "PUSH"}, {"topic": "T", "consumerGroup": "a b"},
                {"topic": "T", "consumerGroup": "G", "popShareQueueNum": 10**9}, []):
        with pytest.raises(RequestModeError):
            RequestMode.from_json(bad)


def _heartbeat(client_id: str, group: str, topic: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.HEART_BEAT, body=orjson.dumps({
        "clientID": client_id, "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}]}]}))


def _query(topic: str, client_id: str, **more: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.QUERY_ASSIGNMENT, body=orjson.dumps({
        "topic": topic, "consumerGroup": "G", "clientId": client_id, "strategyName": "AVG",
        "messageModel": "CLUSTERING", **more}))


async def test_two_brokers_assign_the_cluster_s_queues_by_pull_then_by_pop(nursery, tmp_path) -> None:
    cluster = await start_cluster(nursery, tmp_path)
    a = await cluster.start_broker("broker-a")
    b = await cluster.start_broker("broker-b")
    async with open_remoting_client() as one, open_remoting_client() as two:
        for broker in (a, b):
            made = await one.invoke(broker.address, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
                "topic": "Assigned", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}))
            assert made.code == ResponseCode.SUCCESS, made.remark
        with trio.fail_after(10):  # both groups' queues in the name server's route
            while True:
                route = await one.invoke(cluster.namesrv[0], RemotingCommand(
                    code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "Assigned"}))
                if route.code == ResponseCode.SUCCESS and len(orjson.loads(route.body)["queueDatas"]) == 2:
                    break
                await trio.sleep(0.1)
        for client, name in ((one, "c1"), (two, "c2")):
            assert (await client.invoke(a.address, _heartbeat(name, "G", "Assigned"))).code == ResponseCode.SUCCESS

        def queues(answer: RemotingCommand) -> list[tuple[str, int, str]]:
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            return sorted((x["messageQueue"]["brokerName"], x["messageQueue"]["queueId"], x["mode"])
                          for x in orjson.loads(answer.body)["messageQueueAssignments"])

        got = [queues(await one.invoke(a.address, _query("Assigned", c))) for c in ("c1", "c2")]
        assert got[0] == [("broker-a", q, "PULL") for q in range(4)]
        assert got[1] == [("broker-b", q, "PULL") for q in range(4)]

        mode = RemotingCommand(code=RequestCode.SET_MESSAGE_REQUEST_MODE, body=orjson.dumps({
            "topic": "Assigned", "consumerGroup": "G", "mode": "POP", "popShareQueueNum": 0}))
        assert (await one.invoke(a.address, mode)).code == ResponseCode.SUCCESS
        assert queues(await one.invoke(a.address, _query("Assigned", "c2"))) == [
            ("broker-a", -1, "POP"), ("broker-b", -1, "POP")]

        retry = RemotingCommand(code=RequestCode.SET_MESSAGE_REQUEST_MODE, body=orjson.dumps({
            "topic": "%RETRY%G", "consumerGroup": "G", "mode": "POP"}))
        refused = await one.invoke(a.address, retry)
        assert refused.code == ResponseCode.NO_PERMISSION and "retry topic" in refused.remark
        unknown = RemotingCommand(code=RequestCode.SET_MESSAGE_REQUEST_MODE, body=orjson.dumps({
            "topic": "NoSuchTopic", "consumerGroup": "G", "mode": "POP"}))
        refused = await one.invoke(a.address, unknown)
        assert refused.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in refused.remark
        stranger = await one.invoke(a.address, _query("Assigned", "c9"))
        assert stranger.code == ResponseCode.SYSTEM_ERROR and "no heartbeat" in stranger.remark
        strategy = await one.invoke(a.address, _query("Assigned", "c1", strategyName="CONSISTENT_HASH"))
        assert strategy.code == ResponseCode.SYSTEM_ERROR and "AVG_BY_CIRCLE" in strategy.remark
        missing = await one.invoke(a.address, _query("NoSuchTopic", "c1"))
        assert missing.code == ResponseCode.SUCCESS and orjson.loads(missing.body) == {}
        bad = await one.invoke(a.address, RemotingCommand(code=RequestCode.QUERY_ASSIGNMENT, body=b"[1"))
        assert bad.code == ResponseCode.SYSTEM_ERROR and "not JSON" in bad.remark
