"""Topic and group naming rules shared by broker, store and client (RocketMQ's TopicValidator
and prefixes), and the system topics only the broker itself writes.

Every topic and group that arrives from the wire or from a stored property is checked here
before anything uses it; the store checks topic names once more before it makes a folder of
one (``core.store.paths``). Names are matched whole (``fullmatch``): ``$`` would accept a name
that ends in a newline.
"""

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
# A group's retry and dead-letter topics are folder names too: a folder name has at most 255
# bytes, so groups stop 7 short of RocketMQ's 255 (its broker fails to make such a folder).
FOLDER_NAME_MAX = 255
GROUP_LENGTH_MAX = FOLDER_NAME_MAX - len(RETRY_PREFIX)
# Topics the broker writes itself and clients may not send to (RocketMQ's
# NOT_ALLOWED_SEND_TOPIC_SET), and the prefix of RocketMQ 5's later internal topics (POP's revive
# log, the timer wheel, ...), which RocketMQ leaves sendable and we do not.
SEND_FORBIDDEN_TOPICS = frozenset({
    SCHEDULE_TOPIC, "SCHEDULE_TOPIC_XXXX_V2", TRANS_HALF_TOPIC, TRANS_OP_TOPIC, TRANS_CHECK_MAX_TOPIC,
    "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
QUEUE_NUMS_MAX = 1024  # queues of one topic at most
NAME_CHARS = "^[%|a-zA-Z0-9_-]+$"
_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
_SHOWN_MAX = 64


def shown(name: str) -> str:
    """``name`` as an answer or a log line may quote it: escaped and cut short."""
    text = name if name.isprintable() and name.isascii() else ascii(name)[1:-1]
    return text if len(text) <= _SHOWN_MAX else text[:_SHOWN_MAX] + f"... ({len(name)} characters)"


def _name_problem(kind: str, name: str, length_max: int) -> str | None:
    if not name:
        return f"The specified {kind} is blank."
    if not _NAME.fullmatch(name):
        return f"The specified {kind}[{shown(name)}] contains illegal characters, allowing only {NAME_CHARS}"
    if len(name) > length_max:
        return f"The specified {kind}[{shown(name)}] is longer than {kind} max length {length_max}."
    return None


def topic_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid name, or ``None``. A group's retry and dead-letter topics
    are as long as the group allows."""
    derived = topic.startswith((RETRY_PREFIX, DLQ_PREFIX))
    return _name_problem("topic", topic, FOLDER_NAME_MAX if derived else TOPIC_LENGTH_MAX)


def group_problem(group: str) -> str | None:
    """Why ``group`` (a producer or consumer group) is not a valid name, or ``None``."""
    return _name_problem("group", group, GROUP_LENGTH_MAX)


def queue_nums_problem(read: int, write: int, perm: int) -> str | None:
    """Why these queue counts and permission bits are not a topic's, or ``None`` (counts size
    per-queue loops and lists in brokers, name servers and clients)."""
    if not (1 <= read <= QUEUE_NUMS_MAX and 1 <= write <= QUEUE_NUMS_MAX) or not 0 <= perm <= 0xF:
        return f"queue counts must be 1..{QUEUE_NUMS_MAX} and perm a combination of 8|4|2|1"
    return None


def send_forbidden(topic: str) -> bool:
    """Whether only the broker may write ``topic`` (clients' sends are refused)."""
    return topic in SEND_FORBIDDEN_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def send_refusal(topic: str) -> str | None:
    """The remark refusing a client's send to ``topic`` (RocketMQ's words), or ``None``."""
    return f"Sending message to topic[{topic}] is forbidden." if send_forbidden(topic) else None


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
