"""Inputs the fuzz suite (or a review of what it exercises) once found crashing or misread,
each kept as a named test so the fix stays."""

from __future__ import annotations

import pytest

from core.acl.file import AclFileError, parse_acl
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from tests.core.test_broker import send_cmd

KEYS = {"accessKey": "someone-key", "secretKey": "someone-secret"}


def test_acl_a_yaml_boolean_where_a_permission_belongs_is_a_file_error():
    # found: `defaultGroupPerm: true` raised AttributeError ('bool' has no .strip) and took
    # the reload down instead of keeping the previous policy with a message
    with pytest.raises(AclFileError, match=r"accounts\[0\]\.defaultGroupPerm must be text"):
        parse_acl({"accounts": [dict(KEYS, defaultGroupPerm=True)]})


def test_acl_a_mapping_as_access_key_is_a_file_error_not_its_repr():
    # found: `accessKey: {"": null}` became the key "{'': None}"
    with pytest.raises(AclFileError, match="accessKey must be text"):
        parse_acl({"accounts": [{"accessKey": {"": None}, "secretKey": "someone-secret"}]})


def test_acl_admin_written_as_the_word_false_is_false():
    # found: bool("false") is True, so `admin: "false"` made an administrator
    policy = parse_acl({"accounts": [dict(KEYS, admin="false")]})
    assert policy.accounts["someone-key"].admin is False
    with pytest.raises(AclFileError, match="admin must be true or false"):
        parse_acl({"accounts": [dict(KEYS, admin="yes please")]})


def test_acl_numeric_keys_are_their_digits():
    policy = parse_acl({"accounts": [{"accessKey": 12345678, "secretKey": 87654321}]})
    assert policy.accounts["12345678"].secret_key == "87654321"


def test_acl_white_list_ranges_stay_within_an_octet():
    # found: `10.0.0.1-99999999999` built a set of 10^11 integers (memory without bound)
    for pattern in ("10.0.0.1-99999999999", "10.0.0.{1,300}", "10.0.0.9-2"):
        with pytest.raises(AclFileError, match="not an address pattern"):
            parse_acl({"globalWhiteRemoteAddresses": [pattern]})


async def still_serves(client, address: str) -> None:
    answer = await client.invoke(address, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))
    assert answer.code == ResponseCode.SUCCESS


async def test_a_topic_sys_flag_beyond_64_bits_is_refused_not_stored(broker):
    # found: UPDATE_AND_CREATE_TOPIC with topicSysFlag=2**70 was stored, the topic table could
    # then not be written as JSON and the next registration took the broker process down
    client, address = broker
    cmd = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC,
                          ext_fields={"topic": "Flagged", "topicSysFlag": str(2**70)})
    answer = await client.invoke(address, cmd)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "out of range" in answer.remark
    topics = await client.invoke(address, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))
    assert b"Flagged" not in topics.body


async def test_send_fields_beyond_their_java_int_are_refused(broker):
    # found: queueId=2**31 passed the header and failed in the record encoder (struct.error),
    # answered as "error: argument out of range" with no hint of the field
    client, address = broker
    for field, value in (("e", str(2**31)), ("f", str(-(2**31) - 1)), ("g", str(2**63)), ("l", "many")):
        answer = await client.invoke(address, send_cmd("Ranges", **{field: value}))
        assert answer.code == ResponseCode.SYSTEM_ERROR, (field, answer.remark)
        assert "out of range" in answer.remark or "not an integer" in answer.remark
    await still_serves(client, address)


async def test_a_heartbeat_with_numbers_where_objects_belong_is_refused(broker):
    # found: {"consumerDataSet": [1]} raised AttributeError inside the client registry
    client, address = broker
    for body, where in ((b'{"consumerDataSet": [1]}', "consumerDataSet"),
                        (b'{"producerDataSet": {"groupName": "p"}}', "producerDataSet"),
                        (b'{"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [[]]}]}',
                         "subscriptionDataSet"),
                        (b'{"clientID": {"x": 1}}', "clientID")):
        answer = await client.invoke(address, RemotingCommand(code=RequestCode.HEART_BEAT, body=body))
        assert answer.code == ResponseCode.SYSTEM_ERROR and where in answer.remark, answer.remark
    await still_serves(client, address)


async def test_offsets_are_kept_only_for_queues_that_exist(broker):
    # found in review: UPDATE_CONSUMER_OFFSET stored any (group, topic, queue id) it was sent, and
    # each one stayed in memory and in consumerOffsets.json: a client could grow them without bound
    client, address = broker
    assert (await client.invoke(address, send_cmd("Kept"))).code == ResponseCode.SUCCESS  # 4 queues

    def commit(topic: str, queue_id: int) -> RemotingCommand:
        return RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
            "consumerGroup": "g1", "topic": topic, "queueId": str(queue_id), "commitOffset": "1"})

    assert (await client.invoke(address, commit("Kept", 3))).code == ResponseCode.SUCCESS
    assert (await client.invoke(address, commit("NeverSent", 0))).code == ResponseCode.TOPIC_NOT_EXIST
    for queue_id in (4, 2**31 - 1, -1):
        answer = await client.invoke(address, commit("Kept", queue_id))
        assert answer.code == ResponseCode.SYSTEM_ERROR and "illegal" in answer.remark
    kept = await client.invoke(address, RemotingCommand(code=RequestCode.GET_ALL_CONSUMER_OFFSET))
    assert b"NeverSent" not in kept.body and b"2147483647" not in kept.body and b"Kept@g1" in kept.body


async def test_hostile_names_in_heartbeat_and_lock_bodies_are_refused(broker):
    # a consumer group becomes a %RETRY% topic (and a folder); subscriptions name topics
    client, address = broker
    for body in (b'{"consumerDataSet": [{"groupName": "../../g"}]}',
                 b'{"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "a/b"}]}]}',
                 b'{"producerDataSet": [{"groupName": "p\\n"}]}'):
        answer = await client.invoke(address, RemotingCommand(code=RequestCode.HEART_BEAT, body=body))
        assert answer.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in answer.remark, answer.remark
    lock = b'{"consumerGroup": "g", "clientId": "c", "mqSet": [{"topic": "..", "brokerName": "b", "queueId": 0}]}'
    answer = await client.invoke(address, RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, body=lock))
    assert answer.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in answer.remark
    topics = await client.invoke(address, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))
    assert b"../../g" not in topics.body
    await still_serves(client, address)
