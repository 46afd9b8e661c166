"""The request headers of POP consumption (RocketMQ 5's PopMessageRequestHeader,
AckMessageRequestHeader and ChangeInvisibleTimeRequestHeader) and their limits, written once:
read and checked where they enter a broker (``of``), built where the proxy's gRPC door sends
them (``request``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.broker.headers import HeaderFieldError, as_bool, as_int
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from formats.pop import PopRecordError, ReceiptHandle

POP_MESSAGES_MAX = 32  # RocketMQ refuses more with INVALID_PARAMETER
INVISIBLE_TIME_MAX_MS = 12 * 3600 * 1000  # the gRPC proxy's bound; the broker keeps it too
POLL_TIME_MAX_MS = 60_000
INIT_MIN, INIT_MAX = 0, 1
ATTEMPT_ID_LENGTH_MAX = 128


def _text(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if not value:
        raise HeaderFieldError(f"the request lacks the field {name}")
    return value


@dataclass(frozen=True, slots=True)
class PopHeader:
    group: str
    topic: str
    queue_id: int  # -1: every read queue
    max_msg_nums: int
    invisible_time_ms: int
    poll_time_ms: int
    born_time_ms: int
    init_mode: int
    expression_type: str
    expression: str
    order: bool
    attempt_id: str

    @classmethod
    def of(cls, request: RemotingCommand) -> PopHeader:
        ext = request.ext_fields
        header = cls(
            group=_text(ext, "consumerGroup"), topic=_text(ext, "topic"),
            queue_id=as_int(ext, "queueId", bits=32), max_msg_nums=as_int(ext, "maxMsgNums", bits=32),
            invisible_time_ms=as_int(ext, "invisibleTime"), poll_time_ms=as_int(ext, "pollTime", 0),
            born_time_ms=as_int(ext, "bornTime", 0), init_mode=as_int(ext, "initMode", INIT_MIN, bits=32),
            expression_type=ext.get("expType") or "TAG", expression=ext.get("exp") or "*",
            order=as_bool(ext, "order"), attempt_id=ext.get("attemptId", "")[:ATTEMPT_ID_LENGTH_MAX],
        )
        if header.queue_id < -1:
            raise HeaderFieldError(f"queueId {header.queue_id} is neither a queue nor -1 (every queue)")
        if not 0 < header.invisible_time_ms <= INVISIBLE_TIME_MAX_MS:
            raise HeaderFieldError(f"invisibleTime {header.invisible_time_ms} ms is not in (0, 12 h]")
        if header.init_mode not in (INIT_MIN, INIT_MAX):
            raise HeaderFieldError(f"initMode {header.init_mode} is neither 0 (MIN) nor 1 (MAX)")
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
class AckHeader:
    group: str
    topic: str  # the real topic: a retry topic when the handle says so
    queue_id: int
    handle: ReceiptHandle
    offset: int
    invisible_time_ms: int  # CHANGE_MESSAGE_INVISIBLETIME only (0 for an ack)

    @classmethod
    def of(cls, request: RemotingCommand, *, change: bool = False) -> AckHeader:
        ext = request.ext_fields
        try:
            handle = ReceiptHandle.parse(_text(ext, "extraInfo"))
        except PopRecordError as exc:
            raise HeaderFieldError(f"extraInfo: {exc}") from None
        header = cls(group=_text(ext, "consumerGroup"), topic=_text(ext, "topic"),
                     queue_id=as_int(ext, "queueId", bits=32), handle=handle, offset=as_int(ext, "offset"),
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
