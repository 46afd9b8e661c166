"""Every topic and group a request names in its header, checked before any handler reads it.

Fields are found by name, whatever the request code, so a handler added later is covered
without a line here; names carried in bodies (heartbeats, queue locks) are checked where those
bodies are parsed. A name that fails gets SYSTEM_ERROR, as RocketMQ's TopicValidator answers.

This runs on every request, sends included: names already found valid are remembered by the
broker's :class:`RequestNames` (a bounded set; a busy broker sees few distinct names), so the
usual cost is a few lookups.
"""

from __future__ import annotations

from collections.abc import Callable

from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.topic_names import group_problem, topic_problem

TOPIC_FIELDS = ("topic", "defaultTopic", "originTopic")
GROUP_FIELDS = ("consumerGroup", "producerGroup", "group")
# SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE name the same fields by letters (see headers.V2_NAMES)
_SHORT_NAMED = frozenset({RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})
SHORT_TOPIC_FIELDS = ("b", "c")
SHORT_GROUP_FIELDS = ("a",)
KNOWN_NAMES_MAX = 65536


class _KnownValid:
    """Names one rule accepted, so that the next request naming them skips the rule."""

    def __init__(self, rule: Callable[[str], str | None]) -> None:
        self.rule = rule
        self.names: set[str] = set()

    def first_problem(self, ext: dict[str, str], fields: tuple[str, ...]) -> str | None:
        names = self.names
        for field in fields:
            value = ext.get(field)
            if value and value not in names:
                problem = self.rule(value)
                if problem is not None:
                    return problem
                if len(names) >= KNOWN_NAMES_MAX:
                    names.clear()
                names.add(value)
        return None


_SHORT_TOPIC_FIELDS = SHORT_TOPIC_FIELDS + TOPIC_FIELDS
_SHORT_GROUP_FIELDS = SHORT_GROUP_FIELDS + GROUP_FIELDS


class RequestNames:
    """One broker's check of the names requests carry, with the names it found valid."""

    def __init__(self) -> None:
        self._topics = _KnownValid(topic_problem)
        self._groups = _KnownValid(group_problem)

    def problem(self, request: RemotingCommand) -> str | None:
        """Why a topic or group the request's header names is not a valid name, or ``None``.
        Empty fields are left to the handler (which knows whether it needs them). A V2 send is
        checked under both spellings: its header maps letters to names, so either may be read."""
        ext = request.ext_fields
        if not ext:
            return None
        if request.code in _SHORT_NAMED:
            return (self._topics.first_problem(ext, _SHORT_TOPIC_FIELDS)
                    or self._groups.first_problem(ext, _SHORT_GROUP_FIELDS))
        return self._topics.first_problem(ext, TOPIC_FIELDS) or self._groups.first_problem(ext, GROUP_FIELDS)
