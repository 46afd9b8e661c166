"""CONSUMER_SEND_MSG_BACK: a consumer gives a message back (RECONSUME_LATER) to be retried.

The record at the given CommitLog offset is stored again in ``%RETRY%<group>`` with one more
reconsume time and a delay that grows with each retry (level 3 + reconsume times unless the
consumer named one), so it comes back to the group through the schedule topic; once the
group's max reconsume times are used up (or the consumer asks with a negative level) it goes to
``%DLQ%<group>`` instead, without delay. The original topic is kept in ``RETRY_TOPIC`` and the
first message's id in ``ORIGIN_MESSAGE_ID``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.broker.headers import HeaderFieldError, as_int
from core.broker.responses import response_code
from core.broker.topics import topic_problem
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.topic_names import dlq_topic, retry_topic
from formats.errors import RecordError
from formats.msgid import encode_offset_msg_id
from formats.properties import DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC, WAIT
from formats.record import MessageRecord

if TYPE_CHECKING:
    from core.broker.broker import Broker

RETRY_QUEUE_NUMS = 1
DLQ_QUEUE_NUMS = 1
FIRST_RETRY_LEVEL = 3  # RocketMQ: retry n waits level 3 + n (10s, 30s, 1m, 2m, ...)


def handle_send_back(broker: Broker, request: RemotingCommand, conn: Connection) -> RemotingCommand:
    ext = request.ext_fields
    group = ext.get("group", "")
    try:
        offset = as_int(ext, "offset")
        delay_level = as_int(ext, "delayLevel", 0, bits=32)
        max_times = as_int(ext, "maxReconsumeTimes", broker.settings.retry_max_times, bits=32)
    except HeaderFieldError as exc:
        return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    problem = topic_problem(retry_topic(group)) if group else "the request lacks the field group"
    if problem:
        return request.reply(ResponseCode.SYSTEM_ERROR, problem)
    try:
        original = broker.store.read_record(offset)
    except (KeyError, RecordError, ValueError):
        return request.reply(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
    again = _retry_record(broker, original, offset, group, delay_level, max_times)
    created = broker.topics.ensure(again.topic, RETRY_QUEUE_NUMS if again.topic == retry_topic(group)
                                   else DLQ_QUEUE_NUMS)[1]
    try:
        broker.store.put(broker.schedule.hold_if_delayed(again))
    except Exception as exc:  # store and format errors, mapped in one place
        code, remark = response_code(exc)
        return request.reply(code, remark)
    if created:
        broker.topics_changed()
    return request.reply(ResponseCode.SUCCESS)


def _retry_record(broker: Broker, original: MessageRecord, offset: int, group: str, delay_level: int,
                  max_times: int) -> MessageRecord:
    """The record to store for another try (or the dead letter)."""
    props = dict(original.properties)
    props.setdefault(RETRY_TOPIC, original.topic)
    props.pop(WAIT, None)
    props.pop(DELAY, None)
    if not props.get(ORIGIN_MESSAGE_ID):
        host, port = original.store_host
        props[ORIGIN_MESSAGE_ID] = encode_offset_msg_id(host, port, offset)
    reconsumed = original.reconsume_times
    if reconsumed >= max_times or delay_level < 0:
        topic = dlq_topic(group)
    else:
        topic = retry_topic(group)
        props[DELAY] = str(delay_level if delay_level > 0 else FIRST_RETRY_LEVEL + reconsumed)
    return MessageRecord(
        topic=topic, body=original.body, properties=props, queue_id=0, flag=original.flag,
        sysflag=original.sysflag, born_timestamp=original.born_timestamp, born_host=original.born_host,
        store_host=broker.store_host, reconsume_times=reconsumed + 1,
    )
