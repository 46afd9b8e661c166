"""Every topic and group a request names in its header, checked before any handler reads it.

Fields are found by name, whatever the request code, so a handler added later is covered
without a line here; names carried in bodies (heartbeats, queue locks) are checked where those
bodies are parsed. A name that fails gets SYSTEM_ERROR, as RocketMQ's TopicValidator answers.
"""

from __future__ import annotations

from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.topic_names import group_problem, topic_problem

TOPIC_FIELDS = ("topic", "defaultTopic", "originTopic")
GROUP_FIELDS = ("consumerGroup", "producerGroup", "group")
# SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE name the same fields by letters (see headers.V2_NAMES)
_SHORT_NAMED = {RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
SHORT_TOPIC_FIELDS = ("b", "c")
SHORT_GROUP_FIELDS = ("a",)


def request_name_problem(request: RemotingCommand) -> str | None:
    """Why a topic or group the request's header names is not a valid name, or ``None``.
    Empty fields are left to the handler (which knows whether it needs them)."""
    ext = request.ext_fields
    if not ext:
        return None
    topics, groups = TOPIC_FIELDS, GROUP_FIELDS
    if request.code in _SHORT_NAMED:
        topics, groups = SHORT_TOPIC_FIELDS + TOPIC_FIELDS, SHORT_GROUP_FIELDS + GROUP_FIELDS
    for field in topics:
        value = ext.get(field)
        if value and (problem := topic_problem(value)):
            return problem
    for field in groups:
        value = ext.get(field)
        if value and (problem := group_problem(value)):
            return problem
    return None
