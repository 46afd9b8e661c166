"""Queue locks for orderly consumers: the sans-IO table and LOCK/UNLOCK_BATCH_MQ over TCP."""

import orjson

from core.broker.consume.queue_locks import LOCK_TTL_MS, LockedQueue, QueueLocks
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from tests.core.test_broker import broker  # noqa: F401  (fixture)

Q0, Q1 = LockedQueue("T", "broker-a", 0), LockedQueue("T", "broker-a", 1)


def test_a_queue_has_one_owner_until_released_or_expired():
    locks = QueueLocks()
    assert locks.try_lock("G", "c1", [Q0, Q1], now_ms=0) == [Q0, Q1]
    assert locks.try_lock("G", "c2", [Q0, Q1], now_ms=1000) == []
    assert locks.try_lock("OTHER", "c2", [Q0], now_ms=1000) == [Q0], "groups lock independently"
    assert locks.try_lock("G", "c1", [Q0], now_ms=LOCK_TTL_MS) == [Q0], "the owner renews"
    # Q1 was not renewed: free once its time is up (the edge itself still counts as held)
    assert locks.try_lock("G", "c2", [Q1], now_ms=LOCK_TTL_MS) == []
    assert locks.try_lock("G", "c2", [Q1], now_ms=LOCK_TTL_MS + 1) == [Q1]
    locks.unlock("G", "c2", [Q0])  # not c2's: nothing happens
    assert locks.owner("G", Q0, now_ms=LOCK_TTL_MS + 1) == "c1"
    locks.unlock("G", "c1", [Q0])
    assert locks.owner("G", Q0, now_ms=LOCK_TTL_MS + 1) is None
    assert locks.try_lock("G", "c2", [Q0], now_ms=LOCK_TTL_MS + 2) == [Q0]
    locks.drop_client("c2")
    assert locks.owner("G", Q0, now_ms=LOCK_TTL_MS + 2) is None


def lock_cmd(code: int, client_id: str, *queue_ids: int) -> RemotingCommand:
    body = {"consumerGroup": "OG", "clientId": client_id,
            "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in queue_ids]}
    return RemotingCommand(code=code, body=orjson.dumps(body))


async def test_lock_and_unlock_batch_over_tcp(broker):  # noqa: F811
    client, addr, _ = broker
    first = await client.invoke(addr, lock_cmd(RequestCode.LOCK_BATCH_MQ, "c1", 0, 1))
    assert first.code == ResponseCode.SUCCESS
    assert sorted(q["queueId"] for q in orjson.loads(first.body)["lockOKMQSet"]) == [0, 1]
    second = await client.invoke(addr, lock_cmd(RequestCode.LOCK_BATCH_MQ, "c2", 1, 2))
    assert [q["queueId"] for q in orjson.loads(second.body)["lockOKMQSet"]] == [2]
    assert (await client.invoke(addr, lock_cmd(RequestCode.UNLOCK_BATCH_MQ, "c1", 1))).code == ResponseCode.SUCCESS
    third = await client.invoke(addr, lock_cmd(RequestCode.LOCK_BATCH_MQ, "c2", 1))
    assert [q["queueId"] for q in orjson.loads(third.body)["lockOKMQSet"]] == [1]
    bad = await client.invoke(addr, RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, body=b"[1, 2]"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "LOCK_BATCH_MQ" in bad.remark
