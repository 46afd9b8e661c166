"""ACL on real node processes: our client and the stock C++ client, signed, unsigned, badly signed,
denied and white-listed; refused requests store nothing; the ACL file is re-read while running."""

from __future__ import annotations

import json

import pytest
import trio

from core.client.producer import Message, Producer
from core.client.runtime import ClientError, open_client
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import Credentials, sign
from tests.conftest import running_cluster

ACL_FILE = """\
accounts:
  - accessKey: producer-key
    secretKey: producer-secret
    defaultTopicPerm: DENY
    topicPerms: [Orders=PUB]
  - accessKey: consumer-key
    secretKey: consumer-secret
    defaultTopicPerm: SUB
    groupPerms: [billing=SUB]
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
"""
PRODUCER = Credentials("producer-key", "producer-secret")


@pytest.fixture
def acl_cluster(tmp_path, subprocess_env):
    (tmp_path / "plain_acl.yml").write_text(ACL_FILE)
    acl = 'enabled = true\nfile = "plain_acl.yml"\naccess_key = "admin-key"\nsecret_key = "admin-secret"'
    with running_cluster(tmp_path, subprocess_env, acl=acl, proxies=1, grpc=True) as cluster:
        yield cluster


def max_offset(cluster) -> int:
    status = cluster.mqctl("status", "--json")
    assert status.returncode == 0, status.stderr
    rows = [json.loads(line) for line in status.stdout.splitlines()]
    return next(r["max_offset"] for r in rows if r["role"] == "master")


def raw_send(topic: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, body=b"sneaky", ext_fields={
        "a": "PID", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0", "i": "",
        "j": "0", "k": "false", "m": "false"})


async def test_our_client_signed_unsigned_wrongly_signed_denied_and_white_listed(acl_cluster, tmp_path):
    broker = acl_cluster.mqctl("send", "Orders", "as admin", "--json")  # mqctl signs with [acl]'s keys
    assert broker.returncode == 0, broker.stderr
    async with open_client([acl_cluster.namesrv], credentials=PRODUCER) as client:
        result = await Producer(client, "PID").send(Message("Orders", b"as producer"))
        assert result.status == "SEND_OK"
        with pytest.raises(ClientError, match="no PUB permission on topic 'Payments'"):
            await Producer(client, "PID").send(Message("Payments", b"not allowed"))
    stored = max_offset(acl_cluster)

    broker_addr = next(json.loads(line)["address"] for line in acl_cluster.mqctl("status", "--json").stdout.splitlines()
                       if json.loads(line)["role"] == "master")
    async with open_remoting_client() as raw:
        unsigned = await raw.invoke(broker_addr, raw_send("Orders"))
        assert unsigned.code == ResponseCode.NO_PERMISSION and "not signed" in unsigned.remark
        forged = raw_send("Orders")
        sign(forged, Credentials("producer-key", "a-guessed-secret"))
        answer = await raw.invoke(broker_addr, forged)
        assert answer.code == ResponseCode.NO_PERMISSION and "signature check failed" in answer.remark
        tampered = raw_send("Orders")
        sign(tampered, PRODUCER)
        tampered.body = b"changed after signing"
        assert (await raw.invoke(broker_addr, tampered)).code == ResponseCode.NO_PERMISSION
    assert max_offset(acl_cluster) == stored  # nothing refused was stored

    # white-list loopback: the broker re-reads the file and unsigned requests pass
    (tmp_path / "plain_acl.yml").write_text("globalWhiteRemoteAddresses: [127.0.0.1]\n" + ACL_FILE)
    async with open_remoting_client() as raw:
        with trio.fail_after(20):
            while (await raw.invoke(broker_addr, raw_send("Orders"))).code != ResponseCode.SUCCESS:
                await trio.sleep(0.2)
    assert max_offset(acl_cluster) > stored


@pytest.mark.parametrize("entry", ["direct", "proxy"])
def test_stock_client_with_session_credentials(acl_cluster, entry):
    """Directly, or through the proxy: there the proxy checks each request first (and the
    broker again), so the refused ones never reach a broker."""
    namesrv = acl_cluster.namesrv if entry == "direct" else acl_cluster.proxies[0]
    producer = {"ROCKETMQ_ACCESS_KEY": "producer-key", "ROCKETMQ_SECRET_KEY": "producer-secret"}
    consumer = {"ROCKETMQ_ACCESS_KEY": "consumer-key", "ROCKETMQ_SECRET_KEY": "consumer-secret"}
    sent = acl_cluster.cpp("produce", namesrv, "Orders", "5", env=producer)
    assert [r.get("status") for r in sent] == [0] * 5, sent
    got = acl_cluster.cpp("consume", namesrv, "billing", "Orders", "*", "5", "60", env=consumer)
    assert sorted(r["idx"] for r in got) == [str(i) for i in range(5)]

    stored = max_offset(acl_cluster)
    denied = acl_cluster.cpp("produce", namesrv, "Payments", "2", env=producer)
    assert len(denied) == 2 and all("error" in r for r in denied), denied
    wrong = dict(producer, ROCKETMQ_SECRET_KEY="a-guessed-secret")
    forged = acl_cluster.cpp("produce", namesrv, "Orders", "2", env=wrong)
    assert len(forged) == 2 and all("error" in r for r in forged), forged
    assert max_offset(acl_cluster) == stored
    proxy_log = (acl_cluster.config.parent / "data" / "logs" / "proxy1.log").read_text()
    refused_at_proxy = ("no PUB permission on topic 'Payments'" in proxy_log,
                        "signature check failed for AccessKey 'producer-key'" in proxy_log)
    assert refused_at_proxy == ((True, True) if entry == "proxy" else (False, False))



def test_the_5x_client_signs_with_an_account_and_is_held_to_its_permissions(acl_cluster):
    for topic in ("Orders", "Payments"):  # a 5.x client's topics must exist (no auto-creation from its route query)
        assert acl_cluster.mqctl("topic", "create", topic).returncode == 0
    producer = {"RMQ5_ACCESS_KEY": "producer-key", "RMQ5_SECRET_KEY": "producer-secret"}
    sent = acl_cluster.rmq5("produce", acl_cluster.grpc[0], "Orders", json.dumps([{"body": "5x order"}]), env=producer)
    assert [r["event"] for r in sent] == ["sent"], sent
    stored = max_offset(acl_cluster)
    denied = acl_cluster.rmq5("produce", acl_cluster.grpc[0], "Payments", json.dumps([{"body": "no"}]), env=producer)
    # refused at its route query already (as RocketMQ's proxy: a route needs PUB or SUB); the
    # client reports only that it got no route (the refusal itself: tests/mqctl/test_door_security.py)
    assert [r["event"] for r in denied] == ["failed"] and "Payments" in denied[0]["error"], denied
    forged = acl_cluster.rmq5("produce", acl_cluster.grpc[0], "Orders", json.dumps([{"body": "forged"}]),
                              env={"RMQ5_ACCESS_KEY": "producer-key", "RMQ5_SECRET_KEY": "guessed"})
    assert [r["event"] for r in forged] in (["startup-failed"], ["failed"]), forged
    assert "40100" in forged[0]["error"] or "route" in forged[0]["error"], forged  # UNAUTHORIZED, or no route for it
    unsigned = acl_cluster.rmq5("produce", acl_cluster.grpc[0], "Orders", json.dumps([{"body": "anonymous"}]))
    assert [r["event"] for r in unsigned] in (["startup-failed"], ["failed"]), unsigned
    assert max_offset(acl_cluster) == stored  # nothing refused was stored
    consumer = {"RMQ5_ACCESS_KEY": "consumer-key", "RMQ5_SECRET_KEY": "consumer-secret"}
    got = acl_cluster.rmq5("consume", acl_cluster.grpc[0], "billing", "Orders", json.dumps({"count": 1, "wait_s": 10}),
                           env=consumer)
    assert any(r.get("body") == b"5x order".hex() for r in got)
