"""Topic naming rules shared by broker and client (RocketMQ's TopicValidator and prefixes)."""

from __future__ import annotations

import re

AUTO_CREATE_TOPIC = "TBW102"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delayed messages wait here, queue = level - 1
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # transaction halves wait here for their decision
TRANS_OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # one record per decided half
TRANS_CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # halves nobody decided after every check
TOPIC_LENGTH_MAX = 127
_TOPIC_CHARS = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def topic_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid name, or ``None``."""
    if not topic:
        return "The specified topic is blank."
    if not _TOPIC_CHARS.match(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_LENGTH_MAX:
        return f"The specified topic[{topic}] is longer than topic max length {TOPIC_LENGTH_MAX}."
    return None


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
