"""Where a parked message goes when its wait ends: a delayed message (schedule topic) and a
transaction half (half topic) keep their real topic and queue in the properties ``REAL_TOPIC``
and ``REAL_QID``. Those are read back from the store, so they are checked as any name from
outside is: a valid topic that clients may send to, and a queue id in range."""

from __future__ import annotations

from collections.abc import Mapping

from core.store.paths import QUEUE_ID_MAX
from core.topic_names import send_forbidden, topic_problem
from formats.properties import REAL_QID, REAL_TOPIC


def real_destination(properties: Mapping[str, str]) -> tuple[str, int] | None:
    """The topic and queue a parked message goes to, or ``None`` when the properties do not
    name a valid one (not something this broker wrote: the caller skips and logs it)."""
    topic = properties.get(REAL_TOPIC)
    raw_queue = properties.get(REAL_QID, "")
    if not topic or topic_problem(topic) or send_forbidden(topic):
        return None
    if not raw_queue.isascii() or not raw_queue.isdigit() or int(raw_queue) > QUEUE_ID_MAX:
        return None
    return topic, int(raw_queue)
