"""What a subscription lets through (RocketMQ's ConsumerFilterManager and ExpressionMessageFilter).

A TAG subscription is checked on the ConsumeQueue entry's tagsCode; an SQL92 one on the stored
record's properties, by a selector parsed once when the subscription arrives (heartbeat or a pull
that carries it) and kept per group, topic and version.

Refusals use RocketMQ's codes and say why:

- SQL92 on a broker whose ``broker.enable_property_filter`` is off: SYSTEM_ERROR "The broker does
  not support consumer to filter message by SQL92", as RocketMQ answers (a pull, CHECK_CLIENT_CONFIG);
- a malformed selector or an unknown expression type: SUBSCRIPTION_PARSE_FAILED with where it
  fails. RocketMQ answers CHECK_CLIENT_CONFIG the same way, but a pull whose selector does not
  compile is served *unfiltered* there; here it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import FilterError, SelectorSyntaxError
from core.filter.expression_types import SQL92, TAG, is_tag_type
from core.filter.sql92 import Selector, compile_selector
from core.remoting.codes import ResponseCode
from formats.tags import subscription_codes

FILTERS_MAX = 65_536  # (group, topic) pairs kept; the oldest are forgotten first


class FilterRefused(FilterError):
    """A subscription this broker will not serve: answer ``code`` with ``remark``."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(frozen=True, slots=True)
class MessageFilter:
    expression_type: str
    expression: str
    codes: frozenset[int] | None = None  # TAG: the tagsCodes let through; None: every tag
    selector: Selector | None = None  # SQL92: tested on each record's properties

    @property
    def passes_all(self) -> bool:
        return self.codes is None and self.selector is None


MATCH_ALL = MessageFilter(TAG, "*")


def build_filter(expression_type: str | None, expression: str | None, *, sql_enabled: bool) -> MessageFilter:
    """The filter of a subscription; raises FilterRefused."""
    text = expression or ""
    if is_tag_type(expression_type):
        codes = subscription_codes(text)
        return MATCH_ALL if codes is None else MessageFilter(TAG, text, frozenset(codes))
    if expression_type != SQL92:
        raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                            f"unknown expression type {str(expression_type)[:40]!r}: TAG or SQL92")
    if not sql_enabled:
        raise FilterRefused(ResponseCode.SYSTEM_ERROR, "The broker does not support consumer to filter message by "
                            "SQL92 (broker.enable_property_filter = false)")
    try:
        return MessageFilter(SQL92, text, selector=compile_selector(text))
    except SelectorSyntaxError as exc:
        raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                            f"parse the consumer's subscription failed: {exc}") from None


@dataclass(frozen=True, slots=True)
class _Kept:
    version: int
    expression_type: str
    expression: str
    outcome: MessageFilter | FilterRefused


class ConsumerFilterTable:
    """The latest filter of each (group, topic), by the subscription's version."""

    def __init__(self, *, sql_enabled: bool, entries_max: int = FILTERS_MAX) -> None:
        self.sql_enabled = sql_enabled
        self._entries_max = entries_max
        self._kept: dict[tuple[str, str], _Kept] = {}

    def filter_for(self, group: str, topic: str, expression_type: str | None, expression: str | None,
                   version: int = 0) -> MessageFilter:
        """The filter of this subscription, built only when the group's expression for the
        topic changed; raises FilterRefused (remembered like a filter)."""
        key = (group, topic)
        kind, text = expression_type or TAG, expression or ""
        outcome: MessageFilter | FilterRefused
        kept = self._kept.get(key)
        if kept is not None and kept.expression_type == kind and kept.expression == text:
            outcome = kept.outcome
            if version > kept.version:
                self._kept[key] = _Kept(version, kind, text, outcome)
        else:
            try:
                outcome = build_filter(kind, text, sql_enabled=self.sql_enabled)
            except FilterRefused as exc:
                outcome = exc
            # an older version than the one kept (a late request) is served, not kept
            if kept is None or version >= kept.version:
                self._keep(key, _Kept(version, kind, text, outcome))
        if isinstance(outcome, FilterRefused):
            raise FilterRefused(outcome.code, outcome.remark)  # a fresh one: a kept one would grow its traceback
        return outcome

    def _keep(self, key: tuple[str, str], kept: _Kept) -> None:
        self._kept.pop(key, None)
        self._kept[key] = kept
        while len(self._kept) > self._entries_max:
            del self._kept[next(iter(self._kept))]

    def __len__(self) -> int:
        return len(self._kept)
