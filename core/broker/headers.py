"""Request header fields as the broker reads them: SEND's long and short (V2) names, and
tolerant integer/boolean parsing (C++ sends numbers and "0"/"1", Java "true"/"false")."""

from __future__ import annotations

from dataclasses import dataclass

from core.remoting.command import RemotingCommand

# SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE short names -> SEND_MESSAGE names
V2_NAMES = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
    "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
    "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName",
}

# GET_ALL_TOPIC_CONFIG between our slave and master: the data version the slave holds, and the
# master's answer when that is its own (no body). Stock callers send neither.
KNOWN_DATA_VERSION = "knownDataVersion"
UNCHANGED = "unchanged"


class HeaderFieldError(ValueError):
    """A required header field is missing or malformed."""


def as_int(ext: dict[str, str], name: str, default: int | None = None, *, bits: int = 64) -> int:
    """Field ``name`` as a signed integer of ``bits`` bits (Java's long, or int with 32): a value
    out of that range is refused here, not found later by a struct that cannot pack it."""
    raw = ext.get(name)
    if raw is None or raw == "":
        if default is None:
            raise HeaderFieldError(f"the request lacks the field {name}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HeaderFieldError(f"field {name}={raw[:40]!r} is not an integer") from None
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise HeaderFieldError(f"field {name}={raw[:40]} is out of range for a {bits}-bit integer")
    return value


def as_bool(ext: dict[str, str], name: str) -> bool:
    return ext.get(name, "").lower() in ("1", "true")


@dataclass(frozen=True, slots=True)
class SendHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sysflag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    batch: bool
    max_reconsume_times: int | None

    @classmethod
    def of(cls, request: RemotingCommand, *, v2: bool) -> SendHeader:
        ext = request.ext_fields
        if v2:
            ext = {V2_NAMES.get(k, k): v for k, v in ext.items()}
        if not ext.get("topic"):
            raise HeaderFieldError("the request lacks the field topic")
        max_reconsume = ext.get("maxReconsumeTimes")
        return cls(
            producer_group=ext.get("producerGroup", ""),
            topic=ext["topic"],
            default_topic=ext.get("defaultTopic", "TBW102") or "TBW102",
            default_topic_queue_nums=as_int(ext, "defaultTopicQueueNums", 4, bits=32),
            queue_id=as_int(ext, "queueId", -1, bits=32),
            sysflag=as_int(ext, "sysFlag", 0, bits=32),
            born_timestamp=as_int(ext, "bornTimestamp", 0),
            flag=as_int(ext, "flag", 0, bits=32),
            properties=ext.get("properties", ""),
            reconsume_times=as_int(ext, "reconsumeTimes", 0, bits=32),
            batch=as_bool(ext, "batch"),
            max_reconsume_times=as_int(ext, "maxReconsumeTimes", bits=32) if max_reconsume else None,
        )


@dataclass(frozen=True, slots=True)
class PullHeader:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sysflag: int
    commit_offset: int
    suspend_timeout_ms: int
    subscription: str | None
    expression_type: str | None
    sub_version: int

    @classmethod
    def of(cls, request: RemotingCommand) -> PullHeader:
        ext = request.ext_fields
        if not ext.get("topic") or not ext.get("consumerGroup"):
            raise HeaderFieldError("PULL_MESSAGE needs topic and consumerGroup")
        return cls(
            group=ext["consumerGroup"], topic=ext["topic"], queue_id=as_int(ext, "queueId", bits=32),
            queue_offset=as_int(ext, "queueOffset"), max_msg_nums=as_int(ext, "maxMsgNums", 32, bits=32),
            sysflag=as_int(ext, "sysFlag", 0, bits=32), commit_offset=as_int(ext, "commitOffset", -1),
            suspend_timeout_ms=as_int(ext, "suspendTimeoutMillis", 15_000),
            subscription=ext.get("subscription"),
            expression_type=ext.get("expressionType"), sub_version=max(0, as_int(ext, "subVersion", 0)),
        )


# PULL sysFlag bits
PULL_COMMIT_OFFSET = 1
PULL_SUSPEND = 2
PULL_SUBSCRIPTION = 4
