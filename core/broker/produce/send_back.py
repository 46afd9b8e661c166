"""CONSUMER_SEND_MSG_BACK: a consumer gives a message back (RECONSUME_LATER) to be retried.

The record at the given CommitLog offset is stored again in ``%RETRY%<group>`` with one more
reconsume time and a delay that grows with each retry (level 3 + reconsume times unless the
consumer named one), so it comes back to the group through the schedule topic; once the
group's max reconsume times are used up (or the consumer asks with a negative level) it goes to
``%DLQ%<group>`` instead, without delay. The original topic is kept in ``RETRY_TOPIC`` and the
first message's id in ``ORIGIN_MESSAGE_ID``.

The offset names no topic, and the copy is readable by the group: with ACL on, the record found
needs SUB on its topic as the group reads it (:func:`core.acl.requests.resource`: the group's
own ``%RETRY%<group>`` is the group's, a POP retry topic of the group the topic it retries), or
the request is refused (NO_PERMISSION) with nothing stored and no topic created. RocketMQ checks
only the group, so an account could read any topic through its own DLQ.
"""

from __future__ import annotations

from typing import Protocol

from core.acl.permissions import SUB
from core.acl.requests import Resource, resource
from core.broker.tables.topics import TopicTable, topic_problem
from core.broker.timers.schedule import ScheduleService
from core.broker.wire.responses import response_code
from core.config import BrokerSettings
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.request_headers import ConsumerSendMsgBackHeader
from core.store.message_store import MessageStore
from core.topic_names import dlq_topic, retry_topic
from formats.errors import RecordError
from formats.msgid import encode_offset_msg_id
from formats.properties import DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC, WAIT
from formats.record import MessageRecord

RETRY_QUEUE_NUMS = 1
DLQ_QUEUE_NUMS = 1
FIRST_RETRY_LEVEL = 3  # RocketMQ: retry n waits level 3 + n (10s, 30s, 1m, 2m, ...)


class SendBackBroker(Protocol):
    """What a message given back needs from its broker (``Broker`` is one)."""

    schedule: ScheduleService
    settings: BrokerSettings
    store: MessageStore
    store_host: tuple[str, int]
    topics: TopicTable

    def acl_refusal(self, request: RemotingCommand, conn: Connection, resources: list[Resource]) -> str | None: ...

    def topics_changed(self) -> None: ...


def handle_send_back(broker: SendBackBroker, header: ConsumerSendMsgBackHeader, request: RemotingCommand,
                     conn: Connection) -> RemotingCommand:
    group, offset = header.group, header.offset
    max_times = header.max_reconsume_times
    if max_times is None:
        max_times = broker.settings.retry_max_times
    problem = topic_problem(retry_topic(group))
    if problem:
        return request.reply(ResponseCode.SYSTEM_ERROR, problem)
    try:
        original = broker.store.read_record(offset)
        if original.phys_offset != offset:  # bytes inside a record (a body) that look like one
            raise KeyError(offset)
    except (KeyError, RecordError, ValueError):
        return request.reply(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
    refused = broker.acl_refusal(request, conn, [resource("topic", original.topic, group, SUB)])
    if refused is not None:
        return request.reply(ResponseCode.NO_PERMISSION, refused)
    again = _retry_record(broker, original, offset, group, header.delay_level, max_times)
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


def _retry_record(broker: SendBackBroker, original: MessageRecord, offset: int, group: str, delay_level: int,
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
