"""POP's receipt handles and revive records: as RocketMQ writes them, and refused when not."""

from __future__ import annotations

import pytest

from formats.pop import Ack, CheckPoint, PopRecordError, ReceiptHandle, retry_topic


def test_a_brokers_handle_and_a_proxys_handle_read_back_as_written():
    broker = ReceiptHandle.parse("15 1718000000000 30000 2 0 broker-a 1 17")
    assert (broker.ck_start_offset, broker.pop_time_ms, broker.invisible_time_ms, broker.revive_qid,
            broker.retry_flag, broker.broker_name, broker.queue_id, broker.queue_offset,
            broker.commit_log_offset) == (15, 1718000000000, 30000, 2, 0, "broker-a", 1, 17, -1)
    assert broker.text() == "15 1718000000000 30000 2 0 broker-a 1 17"
    assert broker.visible_again_ms() == 1718000030000 and not broker.ordered
    proxy = ReceiptHandle.parse("15 1718000000000 30000 999 1 broker-a 1 17 40960")
    assert proxy.commit_log_offset == 40960 and proxy.ordered
    assert proxy.text(with_commit_log_offset=True) == "15 1718000000000 30000 999 1 broker-a 1 17 40960"
    assert proxy.real_topic("G", "T") == "%RETRY%G_T"


def test_retry_topics_by_flag():
    assert [retry_topic("G", "T", flag) for flag in (0, 1, 2)] == ["T", "%RETRY%G_T", "%RETRY%G+T"]


@pytest.mark.parametrize("text, why", [
    ("", "8 or 9 fields"),
    ("1 2 3 4 0 broker-a 1", "8 or 9 fields"),
    ("x 2 3 4 0 broker-a 1 17", "not a number"),
    ("1 2 3 4 3 broker-a 1 17", "retry flag 3 is out of range"),
    ("1 2 3 1000 0 broker-a 1 17", "revive queue 1000 is out of range"),
    ("1 2 3 4 0 ../etc 1 17", "not a valid name"),
    ("1 2 3 4 0 broker-a 70000 17", "queue id 70000"),
    ("-5 2 3 4 0 broker-a 1 17", "out of range"),
    ("1 2 3 4 0 broker-a 1 99999999999999999999999", "not a number"),
    ("1 " * 400, "characters"),
])
def test_a_handle_that_is_not_rocketmqs_is_refused_with_the_reason(text, why):
    with pytest.raises(PopRecordError, match=why):
        ReceiptHandle.parse(text)


def test_a_checkpoint_round_trips_and_ticks_acks_off():
    ck = CheckPoint("T", "G", 1, 100, 5000, 30000, "broker-a", [0, 1, 3])
    back = CheckPoint.from_json(ck.to_json())
    assert back.key() == ck.key() and back.offsets == [100, 101, 103] and back.revive_time_ms == 35000
    assert back.ack(101) and not back.ack(102)
    assert back.unacked_offsets() == [100, 103]
    assert CheckPoint.from_json(back.to_json()).unacked_offsets() == [100, 103]


@pytest.mark.parametrize("body, why", [
    (b"[]", "not a JSON object"),
    (b"{nope", "not JSON"),
    (b'{"so":1,"pt":2,"it":3,"q":0,"t":"T","c":"G","bn":"b","d":[]}', "1 to 32 offsets"),
    (b'{"so":1,"pt":2,"it":3,"q":0,"t":"T","c":"G","bn":"b","d":[2,1]}', "ascend"),
    (b'{"so":true,"pt":2,"it":3,"q":0,"t":"T","c":"G","bn":"b","d":[0]}', "not an integer"),
    (b'{"so":1,"pt":2,"it":3,"q":0,"t":"T/../x","c":"G","bn":"b","d":[0]}', "not a valid name"),
])
def test_a_checkpoint_that_is_not_rocketmqs_is_refused(body, why):
    with pytest.raises(PopRecordError, match=why):
        CheckPoint.from_json(body)


def test_acks_and_batch_acks_round_trip():
    one = Ack("T", "G", 1, 100, 5000, "broker-a", (101,))
    assert one.tag == "ack" and Ack.from_json(one.to_json()) == one
    many = Ack("T", "G", 1, 100, 5000, "broker-a", (100, 103))
    assert many.tag == "bAck" and Ack.from_json(many.to_json()) == many
    with pytest.raises(PopRecordError, match="1 to 32"):
        Ack.from_json(b'{"so":1,"pt":2,"q":0,"t":"T","c":"G","bn":"b","aol":[]}')


def test_a_pop_answer_gives_each_message_its_handle_and_fifo_count():
    from formats.pop import PopAnswer
    answer = PopAnswer.parse({"popTime": "1700000000000", "invisibleTime": "30000", "reviveQid": "3",
                              "startOffsetInfo": "0 1 15;1 0 4", "msgOffsetInfo": "0 1 15,17;1 0 4",
                              "orderCountInfo": "0 qo1%17 2;0 1 0"})
    handle = answer.handle("T", 1, 17, "broker-a", 4096)
    assert handle.text(with_commit_log_offset=True) == "15 1700000000000 30000 3 0 broker-a 1 17 4096"
    assert answer.handle("%RETRY%G_T", 0, 4, "broker-a").retry_flag == 1
    assert answer.deliveries_before(1, 17) == 2 and answer.deliveries_before(1, 15) == 0
    with pytest.raises(PopRecordError):
        answer.handle("T", 2, 1, "broker-a")  # no checkpoint for queue 2 in this answer
    with pytest.raises(PopRecordError):
        PopAnswer.parse({"popTime": "x", "invisibleTime": "1", "reviveQid": "0"})
