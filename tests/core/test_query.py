"""Lookups over real TCP: QUERY_MESSAGE by key and UNIQ_KEY within a time range, and
VIEW_MESSAGE_BY_ID; bad requests get a clear error and the broker keeps serving."""

import time

import pytest
import trio

from core.client.lookup import MessageNotFoundError, find_by_id, offset_msg_id, query_messages, view_message
from core.client.runtime import ClientError, open_client
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.msgid import encode_offset_msg_id
from formats.properties import encode_properties
from formats.record import MessageRecord, decode_record, decode_records, encode_record
from tests.core.cluster_harness import start_cluster

FAR_FUTURE_MS = 2**62


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def send(client, addr: str, topic: str, body: bytes, *, keys: str | None = None, uniq: str | None = None) -> int:
    """Store one message; returns its CommitLog offset."""
    props = {"TAGS": "t", "WAIT": "true"}
    if keys is not None:
        props["KEYS"] = keys
    if uniq is not None:
        props["UNIQ_KEY"] = uniq
    resp = await client.invoke(addr, RemotingCommand(code=RequestCode.SEND_MESSAGE, body=body, ext_fields={
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": str(now_ms()), "flag": "0",
        "properties": encode_properties(props), "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["msgId"][16:], 16)


def query_cmd(topic: str, key: str, max_num: str = "32", begin: str = "0", end: str = str(FAR_FUTURE_MS),
              **extra: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={
        "topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin, "endTimestamp": end, **extra})


def view_cmd(offset: object) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(offset)})


async def test_query_by_key_answers_records_in_log_order_and_where_the_index_ends(broker):
    client, addr = broker
    first = await send(client, addr, "Q", b"one", keys="order-1 shared")
    await send(client, addr, "Q", b"two", keys="order-2")
    third = await send(client, addr, "Q", b"three", keys="shared")
    await send(client, addr, "Other", b"elsewhere", keys="shared")  # same key, another topic
    resp = await client.invoke(addr, query_cmd("Q", "shared"))
    assert resp.code == ResponseCode.SUCCESS
    recs = decode_records(resp.body)
    assert [r.body for r in recs] == [b"one", b"three"]
    assert [r.phys_offset for r in recs] == [first, third]
    assert all(r.topic == "Q" for r in recs)
    index_end = await send(client, addr, "Q", b"four", keys="order-4")
    resp = await client.invoke(addr, query_cmd("Q", "order-4"))
    assert resp.ext_fields["indexLastUpdatePhyoffset"] == str(index_end)
    assert abs(int(resp.ext_fields["indexLastUpdateTimestamp"]) - now_ms()) < 60_000


async def test_unique_key_queries_take_the_default_max_not_the_requests(broker):
    client, addr = broker
    uniq = "0A0B0C0D00010000000000000000002A"
    for body in (b"first try", b"resent"):  # a resend stores the message again under its UNIQ_KEY
        await send(client, addr, "U", body, uniq=uniq)
    limited = await client.invoke(addr, query_cmd("U", uniq, max_num="1"))
    assert limited.code == ResponseCode.SUCCESS and len(decode_records(limited.body)) == 1
    unique = await client.invoke(addr, query_cmd("U", uniq, max_num="1", _UNIQUE_KEY_QUERY="true"))
    assert unique.code == ResponseCode.SUCCESS
    assert [r.body for r in decode_records(unique.body)] == [b"first try", b"resent"]
    assert {r.uniq_key for r in decode_records(unique.body)} == {uniq}


async def test_time_range_excludes_messages_stored_outside_it(broker):
    client, addr = broker
    before = now_ms()
    await send(client, addr, "R", b"now", keys="k")
    past = await client.invoke(addr, query_cmd("R", "k", begin="0", end=str(before - 60_000)))
    future = await client.invoke(addr, query_cmd("R", "k", begin=str(now_ms() + 60_000)))
    around = await client.invoke(addr, query_cmd("R", "k", begin=str(before - 60_000), end=str(now_ms() + 60_000)))
    assert past.code == future.code == ResponseCode.QUERY_NOT_FOUND
    assert around.code == ResponseCode.SUCCESS and decode_records(around.body)[0].body == b"now"


async def test_nothing_matching_is_query_not_found_with_a_remark(broker):
    client, addr = broker
    await send(client, addr, "N", b"x", keys="present")
    resp = await client.invoke(addr, query_cmd("N", "absent"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND and "absent" in resp.remark and not resp.body
    assert set(resp.ext_fields) == {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}
    resp = await client.invoke(addr, query_cmd("NoSuchTopic", "present"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND


@pytest.mark.parametrize("fields, fragment", [
    ({"key": None}, "lacks the field key"),
    ({"topic": ""}, "lacks the field topic"),
    ({"maxNum": "many"}, "maxNum='many' is not an integer"),
    ({"maxNum": "0"}, "maxNum=0 must be at least 1"),
    ({"beginTimestamp": None}, "lacks the field beginTimestamp"),
    ({"endTimestamp": "tomorrow"}, "endTimestamp='tomorrow' is not an integer"),
])
async def test_bad_query_fields_get_a_clear_error_and_the_broker_keeps_serving(broker, fields, fragment):
    client, addr = broker
    await send(client, addr, "B", b"kept", keys="k")
    cmd = query_cmd("B", "k")
    for name, value in fields.items():
        if value is None:
            del cmd.ext_fields[name]
        else:
            cmd.ext_fields[name] = value
    resp = await client.invoke(addr, cmd)
    assert resp.code == ResponseCode.SYSTEM_ERROR and fragment in resp.remark
    resp = await client.invoke(addr, query_cmd("B", "k"))
    assert resp.code == ResponseCode.SUCCESS and decode_records(resp.body)[0].body == b"kept"


async def test_view_by_offset_refuses_offsets_that_are_not_a_record_start(broker):
    client, addr = broker
    # a body that is itself a valid record: decoding at its start must not pass for a message
    inner = bytes(encode_record(MessageRecord("Inner", b"not a stored message", {"KEYS": "x"})))
    offset = await send(client, addr, "V", inner)
    after = await send(client, addr, "V", b"next")
    ok = await client.invoke(addr, view_cmd(offset))
    assert ok.code == ResponseCode.SUCCESS and decode_record(ok.body).body == inner
    for bad in (offset + 1, offset + 88, after + 10_000, -5):
        resp = await client.invoke(addr, view_cmd(bad))
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == f"no message at commitlog offset {bad}"
    resp = await client.invoke(addr, view_cmd("abc"))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not an integer" in resp.remark
    resp = await client.invoke(addr, RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "lacks the field offset" in resp.remark
    again = await client.invoke(addr, view_cmd(after))
    assert again.code == ResponseCode.SUCCESS and decode_record(again.body).body == b"next"


async def test_client_lookups_merge_every_broker_of_the_route(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path)
    a, b = await cluster.start_broker("broker-a"), await cluster.start_broker("broker-b")
    uniq = "0A0B0C0D0001000000000000000000FF"
    async with open_remoting_client() as raw:
        on_a = await send(raw, a.address, "M", b"on a", keys="shared", uniq=uniq)
        await send(raw, b.address, "M", b"filler")  # "on b" sorts last even if both share a store ms
        await send(raw, b.address, "M", b"on b", keys="shared only-b")
    async with open_client(cluster.namesrv) as client:
        with trio.fail_after(10):  # each broker registers the new topic with the name server
            while len((route := await client.route("M", refresh=True)) and route.brokers or {}) < 2:
                await trio.sleep(0.05)
        both = await query_messages(client, "M", "shared")
        assert sorted(r.body for r in both) == [b"on a", b"on b"]
        assert [r.body for r in await query_messages(client, "M", "only-b")] == [b"on b"]
        assert [r.body for r in await query_messages(client, "M", "shared", max_num=1)] == [b"on b"]
        assert await query_messages(client, "M", "shared", end_ms=now_ms() - 60_000) == []
        assert await query_messages(client, "M", uniq) == [], "a UNIQ_KEY is not one of the KEYS"
        (by_uniq,) = await query_messages(client, "M", uniq, unique=True)
        assert by_uniq.body == b"on a" and by_uniq.phys_offset == on_a
        msg_id = offset_msg_id(by_uniq)
        assert (await view_message(client, msg_id)).body == b"on a"
        assert [r.body for r in await find_by_id(client, msg_id)] == [b"on a"]
        assert [r.body for r in await find_by_id(client, uniq, "M")] == [b"on a"]
        with pytest.raises(MessageNotFoundError, match="no message at commitlog offset"):
            await view_message(client, encode_offset_msg_id(*by_uniq.store_host, on_a + 1))
        with pytest.raises(MessageNotFoundError):
            await find_by_id(client, "F" * 32, "M")
        with pytest.raises(ClientError, match="neither an offset msgId"):
            await find_by_id(client, "xyz")
        with pytest.raises(ClientError, match="does not exist"):
            await query_messages(client, "NoSuchTopic", "shared")
