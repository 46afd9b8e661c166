"""RECALL_MESSAGE: cancel a timer message before it is due (RocketMQ 5.3's RecallMessageProcessor).

Header: ``producerGroup``, ``topic``, ``recallHandle`` (formats/recall.py: the send's answer for
a timer message). The handle must name this broker, the request's topic and a time still ahead;
the broker then stores a recall marker in the schedule topic (core/broker/timers/schedule.py) and the
message is not delivered when it falls due. The answer's ``msgId`` is the recalled UNIQ_KEY.
A recall of a message that is already delivered is refused (ILLEGAL_OPERATION), as RocketMQ
refuses it; a recall of a handle this broker never gave out is harmless (nothing has that key).
"""

from __future__ import annotations

from typing import Protocol

from core.broker.produce.write_path import WritePath
from core.broker.tables.topics import TopicTable
from core.broker.timers.schedule import ScheduleService
from core.broker.wire.responses import response_code
from core.clock import now_ms
from core.node_specs import BrokerNode
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection, Reply
from core.remoting.request_headers import RecallMessageHeader
from formats.recall import RecallHandle, RecallHandleError


class RecallingBroker(Protocol):
    """What RECALL_MESSAGE needs from its broker (``Broker`` is one)."""

    node: BrokerNode
    schedule: ScheduleService
    topics: TopicTable
    writes: WritePath


def handle_recall(broker: RecallingBroker, header: RecallMessageHeader,
                  request: RemotingCommand, conn: Connection) -> Reply:
    topic = header.topic
    try:
        handle = RecallHandle.parse(header.recall_handle)
    except RecallHandleError as exc:
        return request.reply(ResponseCode.ILLEGAL_OPERATION, str(exc))
    if handle.topic != topic:
        return request.reply(ResponseCode.ILLEGAL_OPERATION, f"the recall handle is for topic {handle.topic[:100]!r}")
    if handle.broker_name != broker.node.name:
        return request.reply(ResponseCode.ILLEGAL_OPERATION, f"the recall handle names broker "
                             f"{handle.broker_name[:100]!r}, not {broker.node.name}")
    if handle.due_ms <= now_ms():
        return request.reply(ResponseCode.ILLEGAL_OPERATION, "the message is due already: delivered, not recalled")
    if broker.topics.get(topic) is None:
        return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    marker = broker.schedule.recall(handle.uniq_key, handle.due_ms)
    if marker is None:
        return request.reply(ResponseCode.SYSTEM_BUSY, "too many recalls waiting; try again later")
    try:
        broker.writes.put([marker])
    except Exception as exc:  # the store refused (disk full, ...): the in-memory recall still holds until restart
        code, remark = response_code(exc)
        return request.reply(code, remark)
    return request.reply(ResponseCode.SUCCESS, ext_fields={"msgId": handle.uniq_key})
