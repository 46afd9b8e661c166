"""The request headers of POP consumption (RocketMQ 5's PopMessageRequestHeader,
AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader and NotificationRequestHeader) and
their limits, written once: read and checked where they enter a broker (``of``), built where the
proxy's gRPC door sends them (``request``). PopHeader's and AckHeader's attributes keep the
names the door builds them with (``group`` for ``consumerGroup``, times with their unit);
NotificationHeader's are RocketMQ's in snake case, as every other header's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.header_fields import (
    HeaderFieldError,
    RequestHeader,
    as_bool,
    as_int,
    boolean,
    declared,
    number,
    text,
)
from formats.pop import PopRecordError, ReceiptHandle

# POP limits, kept by the broker and by the proxy's gRPC door when it builds POP requests
POP_MESSAGES_MAX = 32  # RocketMQ refuses more with INVALID_PARAMETER
INVISIBLE_TIME_MAX_MS = 12 * 3600 * 1000  # the gRPC proxy's bound; the broker keeps it too
POLL_TIME_MAX_MS = 60_000
INIT_MIN, INIT_MAX = 0, 1
ATTEMPT_ID_LENGTH_MAX = 128


def _text(ext: Mapping[str, str], name: str) -> str:
    value = ext.get(name)
    if not value:
        raise HeaderFieldError(f"the request lacks the field {name}")
    return value


def _receipt_handle(ext: Mapping[str, str]) -> ReceiptHandle:
    try:
        return ReceiptHandle.parse(_text(ext, "extraInfo"))
    except PopRecordError as exc:
        raise HeaderFieldError(f"extraInfo: {exc}") from None


@dataclass(frozen=True, slots=True)
class PopHeader(RequestHeader):
    """PopMessageRequestHeader. The gRPC door builds it (:meth:`request`)."""

    group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = number("queueId", bits=32)  # -1: every read queue
    max_msg_nums: int = number("maxMsgNums", bits=32)
    invisible_time_ms: int = number("invisibleTime")
    poll_time_ms: int = number("pollTime", 0)
    born_time_ms: int = number("bornTime", 0)
    init_mode: int = number("initMode", INIT_MIN, bits=32)
    expression_type: str = text("expType", "TAG")
    expression: str = text("exp", "*")
    order: bool = boolean("order")
    attempt_id: str = text("attemptId", "")

    @classmethod
    def of(cls, request: RemotingCommand) -> Self:
        ext = request.ext_fields
        header = cls(
            group=_text(ext, "consumerGroup"), topic=_text(ext, "topic"),
            queue_id=as_int(ext, "queueId", bits=32), max_msg_nums=as_int(ext, "maxMsgNums", bits=32),
            invisible_time_ms=as_int(ext, "invisibleTime"), poll_time_ms=as_int(ext, "pollTime", 0),
            born_time_ms=as_int(ext, "bornTime", 0), init_mode=as_int(ext, "initMode", INIT_MIN, bits=32),
            expression_type=ext.get("expType") or "TAG", expression=ext.get("exp") or "*",
            order=as_bool(ext, "order"), attempt_id=ext.get("attemptId", "")[:ATTEMPT_ID_LENGTH_MAX],
        )
        _check_queue_and_init_mode(header.queue_id, header.init_mode)
        if not 0 < header.invisible_time_ms <= INVISIBLE_TIME_MAX_MS:
            raise HeaderFieldError(f"invisibleTime {header.invisible_time_ms} ms is not in (0, 12 h]")
        return header

    def request(self, language: str = "PYTHON") -> RemotingCommand:
        """POP_MESSAGE with this header."""
        ext = {"consumerGroup": self.group, "topic": self.topic, "queueId": str(self.queue_id),
               "maxMsgNums": str(self.max_msg_nums), "invisibleTime": str(self.invisible_time_ms),
               "pollTime": str(self.poll_time_ms), "bornTime": str(self.born_time_ms), "initMode": str(self.init_mode),
               "expType": self.expression_type, "exp": self.expression, "order": "true" if self.order else "false"}
        if self.attempt_id:
            ext["attemptId"] = self.attempt_id[:ATTEMPT_ID_LENGTH_MAX]
        return RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields=ext, language=language)


@dataclass(frozen=True, slots=True)
class AckHeader(RequestHeader):
    """AckMessageRequestHeader (ACK_MESSAGE) and ChangeInvisibleTimeRequestHeader
    (CHANGE_MESSAGE_INVISIBLETIME, which adds ``invisibleTime``). The gRPC door builds it."""

    group: str = text("consumerGroup")
    topic: str = text("topic")  # the real topic: a retry topic when the handle says so
    queue_id: int = number("queueId", bits=32)
    handle: ReceiptHandle = declared("extraInfo", _receipt_handle)  # noqa: RUF009 (a declarator, as text())
    offset: int = number("offset")
    invisible_time_ms: int = number("invisibleTime", 0)  # CHANGE_MESSAGE_INVISIBLETIME only (0 for an ack)

    @classmethod
    def of(cls, request: RemotingCommand) -> Self:
        ext = request.ext_fields
        change = request.code == RequestCode.CHANGE_MESSAGE_INVISIBLETIME
        header = cls(group=_text(ext, "consumerGroup"), topic=_text(ext, "topic"),
                     queue_id=as_int(ext, "queueId", bits=32), handle=_receipt_handle(ext), offset=as_int(ext, "offset"),
                     invisible_time_ms=as_int(ext, "invisibleTime") if change else 0)
        if change and not 0 <= header.invisible_time_ms <= INVISIBLE_TIME_MAX_MS:
            raise HeaderFieldError(f"invisibleTime {header.invisible_time_ms} ms is not in [0, 12 h]")
        return header

    def request(self, *, change: bool = False, language: str = "PYTHON") -> RemotingCommand:
        """ACK_MESSAGE, or CHANGE_MESSAGE_INVISIBLETIME to ``invisible_time_ms``, with this header."""
        ext = {"consumerGroup": self.group, "topic": self.topic, "queueId": str(self.queue_id),
               "extraInfo": self.handle.text(), "offset": str(self.offset)}
        if not change:
            return RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields=ext, language=language)
        ext["invisibleTime"] = str(self.invisible_time_ms)
        return RemotingCommand(code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=ext, language=language)


@dataclass(frozen=True, slots=True)
class NotificationHeader(RequestHeader):
    """NotificationRequestHeader: whether a POP would find a message, long-polling as one."""

    consumer_group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = number("queueId", bits=32)
    poll_time: int = number("pollTime", 0)
    born_time: int = number("bornTime", 0)
    init_mode: int = number("initMode", INIT_MIN, bits=32)
    order: bool = boolean("order")
    attempt_id: str = text("attemptId", "")

    def __post_init__(self) -> None:
        _check_queue_and_init_mode(self.queue_id, self.init_mode)

    def as_pop(self) -> PopHeader:
        """The POP this notification asks about (one message; the time it stays out is unused)."""
        return PopHeader(group=self.consumer_group, topic=self.topic, queue_id=self.queue_id, max_msg_nums=1,
                         invisible_time_ms=1, poll_time_ms=self.poll_time, born_time_ms=self.born_time,
                         init_mode=self.init_mode, expression_type="TAG", expression="*", order=self.order,
                         attempt_id=self.attempt_id[:ATTEMPT_ID_LENGTH_MAX])


def _check_queue_and_init_mode(queue_id: int, init_mode: int) -> None:
    if queue_id < -1:
        raise HeaderFieldError(f"queueId {queue_id} is neither a queue nor -1 (every queue)")
    if init_mode not in (INIT_MIN, INIT_MAX):
        raise HeaderFieldError(f"initMode {init_mode} is neither 0 (MIN) nor 1 (MAX)")
