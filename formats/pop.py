"""POP consumption's records (RocketMQ 5): the receipt handle a consumer acks with, and the
checkpoint and ack records a broker keeps in its revive topic.

Receipt handle (``extraInfo``): space-separated fields; the broker hands out fields 0-7 and a
proxy appends 8 (gRPC's ``receipt_handle``):

```
 0 ckStartOffset  1 popTime(ms)  2 invisibleTime(ms)  3 reviveQid (999: FIFO, no checkpoint)
 4 retry flag (0 normal topic, 1 %RETRY%{group}_{topic}, 2 %RETRY%{group}+{topic})
 5 brokerName  6 queueId  7 queueOffset  [8 commitLogOffset]
 e.g. "15 1718000000000 30000 2 0 broker-a 1 17 40960"
```

Checkpoint (tag ``ck``), ack (``ack``) and batch ack (``bAck``) bodies are JSON with RocketMQ's
short keys:

```
 ck:   so start offset, pt popTime, it invisibleTime, bm ack bitmap, n count (<= 32), q queueId,
       t topic (real: may be a retry topic), c group, d [offset - so, ...], bn brokerName,
       rp re-put count (a string), ro revive offset (set when read back)
 ack:  ao acked offset, so, c, t, q, pt, bn        bAck: aol [acked offsets] in place of ao
```

Everything here comes from the wire or the store: a field that does not parse, is out of range
or names an unusable broker is a :class:`PopRecordError`, never a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from formats.errors import FormatError

ORDER_REVIVE_QID = 999
CHECKPOINT_MESSAGES_MAX = 32  # a POP hands out at most this many messages per queue
RETRY_NORMAL, RETRY_V1, RETRY_V2 = 0, 1, 2
NAME_LENGTH_MAX = 255  # RocketMQ's topic and group name limit; broker names are shorter
_NAME = re.compile(r"[%|a-zA-Z0-9_+\-]{1,255}\Z")
_INT64_MAX = 2**63 - 1


class PopRecordError(FormatError):
    """A receipt handle or a revive record that is not what RocketMQ writes."""


def retry_topic(group: str, topic: str, flag: int) -> str:
    """The topic a POP message of ``topic`` really came from, by the handle's retry flag."""
    if flag == RETRY_V1:
        return f"%RETRY%{group}_{topic}"
    if flag == RETRY_V2:
        return f"%RETRY%{group}+{topic}"
    return topic


def _int(text: str, what: str, low: int = 0, high: int = _INT64_MAX) -> int:
    if not text.lstrip("-").isdigit() or len(text) > 20:
        raise PopRecordError(f"{what} is not a number: {text[:40]!r}")
    value = int(text)
    if not low <= value <= high:
        raise PopRecordError(f"{what} {value} is out of range [{low}, {high}]")
    return value


def _name(text: Any, what: str) -> str:
    if not isinstance(text, str) or not _NAME.match(text):
        raise PopRecordError(f"{what} is not a valid name: {str(text)[:40]!r}")
    return text


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """What a consumer acks or changes the invisible time of."""

    ck_start_offset: int
    pop_time_ms: int
    invisible_time_ms: int
    revive_qid: int
    retry_flag: int
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int = -1  # only in a proxy's handle

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        if len(text) > 600:
            raise PopRecordError(f"a receipt handle of {len(text)} characters")
        parts = text.split(" ")
        if len(parts) not in (8, 9):
            raise PopRecordError(f"a receipt handle has 8 or 9 fields, not {len(parts)}: {text[:80]!r}")
        return cls(
            ck_start_offset=_int(parts[0], "the checkpoint offset"),
            pop_time_ms=_int(parts[1], "the pop time"),
            invisible_time_ms=_int(parts[2], "the invisible time"),
            revive_qid=_int(parts[3], "the revive queue", 0, ORDER_REVIVE_QID),
            retry_flag=_int(parts[4], "the retry flag", 0, 2),
            broker_name=_name(parts[5], "the broker name"),
            queue_id=_int(parts[6], "the queue id", 0, 65535),
            queue_offset=_int(parts[7], "the queue offset"),
            commit_log_offset=_int(parts[8], "the commit log offset", -1) if len(parts) == 9 else -1,
        )

    def text(self, *, with_commit_log_offset: bool = False) -> str:
        fields = [self.ck_start_offset, self.pop_time_ms, self.invisible_time_ms, self.revive_qid,
                  self.retry_flag, self.broker_name, self.queue_id, self.queue_offset]
        if with_commit_log_offset:
            fields.append(self.commit_log_offset)
        return " ".join(map(str, fields))

    @property
    def ordered(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QID

    def visible_again_ms(self) -> int:
        """When the message comes back unless acked (the handle is dead from then on)."""
        return self.pop_time_ms + self.invisible_time_ms

    def real_topic(self, group: str, topic: str) -> str:
        return retry_topic(group, topic, self.retry_flag)


@dataclass(slots=True)
class CheckPoint:
    """One POP of up to 32 messages of one queue: which are still un-acked, and when they come back."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time_ms: int
    invisible_time_ms: int
    broker_name: str
    offset_deltas: list[int]  # each message's queue offset - start_offset, ascending
    ack_bitmap: int = 0
    reput_count: int = 0
    revive_offset: int = -1  # where it sits in its revive queue, once read back

    @property
    def revive_time_ms(self) -> int:
        return self.pop_time_ms + self.invisible_time_ms

    @property
    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.offset_deltas]

    def key(self) -> tuple[str, str, int, int, int, str]:
        """What an ack names its checkpoint by."""
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time_ms, self.broker_name)

    def ack(self, offset: int) -> bool:
        """Mark ``offset`` acked; False when it is not one of this checkpoint's."""
        delta = offset - self.start_offset
        if delta not in self.offset_deltas:
            return False
        self.ack_bitmap |= 1 << self.offset_deltas.index(delta)
        return True

    def unacked_offsets(self) -> list[int]:
        return [self.start_offset + d for i, d in enumerate(self.offset_deltas) if not self.ack_bitmap >> i & 1]

    def to_json(self) -> bytes:
        return orjson.dumps({"so": self.start_offset, "pt": self.pop_time_ms, "it": self.invisible_time_ms,
                             "bm": self.ack_bitmap, "n": len(self.offset_deltas), "q": self.queue_id,
                             "t": self.topic, "c": self.group, "d": self.offset_deltas, "bn": self.broker_name,
                             "rp": str(self.reput_count), "ro": self.revive_offset})

    @classmethod
    def from_json(cls, body: bytes) -> CheckPoint:
        doc = _object(body, "checkpoint")
        deltas = doc.get("d")
        if not isinstance(deltas, list) or not 1 <= len(deltas) <= CHECKPOINT_MESSAGES_MAX:
            raise PopRecordError("a checkpoint needs 1 to 32 offsets ('d')")
        checked = [_json_int(d, "an offset delta", 0, _INT64_MAX) for d in deltas]
        if checked != sorted(set(checked)):
            raise PopRecordError("a checkpoint's offsets must ascend without repeats")
        return cls(
            topic=_name(doc.get("t"), "the topic"), group=_name(doc.get("c"), "the group"),
            queue_id=_json_int(doc.get("q"), "the queue id", 0, 65535),
            start_offset=_json_int(doc.get("so"), "the start offset"),
            pop_time_ms=_json_int(doc.get("pt"), "the pop time"),
            invisible_time_ms=_json_int(doc.get("it"), "the invisible time"),
            broker_name=_name(doc.get("bn"), "the broker name"), offset_deltas=checked,
            ack_bitmap=_json_int(doc.get("bm", 0), "the ack bitmap", 0, 2**CHECKPOINT_MESSAGES_MAX - 1),
            reput_count=_int(str(doc.get("rp", "0")), "the re-put count", 0, 1000),
            revive_offset=_json_int(doc.get("ro", -1), "the revive offset", -1),
        )


@dataclass(frozen=True, slots=True)
class Ack:
    """Offsets acked from one checkpoint (an ``ack`` names one, a ``bAck`` several)."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time_ms: int
    broker_name: str
    offsets: tuple[int, ...] = field(default=())

    def checkpoint_key(self) -> tuple[str, str, int, int, int, str]:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time_ms, self.broker_name)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"so": self.start_offset, "c": self.group, "t": self.topic, "q": self.queue_id,
                               "pt": self.pop_time_ms, "bn": self.broker_name}
        if len(self.offsets) == 1:
            doc["ao"] = self.offsets[0]
        else:
            doc["aol"] = list(self.offsets)
        return orjson.dumps(doc)

    @property
    def tag(self) -> str:
        return "ack" if len(self.offsets) == 1 else "bAck"

    @classmethod
    def from_json(cls, body: bytes) -> Ack:
        doc = _object(body, "ack")
        if "aol" in doc:
            raw = doc["aol"]
            if not isinstance(raw, list) or not 1 <= len(raw) <= CHECKPOINT_MESSAGES_MAX:
                raise PopRecordError("a batch ack needs 1 to 32 offsets ('aol')")
            offsets = tuple(_json_int(o, "an acked offset") for o in raw)
        else:
            offsets = (_json_int(doc.get("ao"), "the acked offset"),)
        return cls(topic=_name(doc.get("t"), "the topic"), group=_name(doc.get("c"), "the group"),
                   queue_id=_json_int(doc.get("q"), "the queue id", 0, 65535),
                   start_offset=_json_int(doc.get("so"), "the start offset"),
                   pop_time_ms=_json_int(doc.get("pt"), "the pop time"),
                   broker_name=_name(doc.get("bn"), "the broker name"), offsets=offsets)


def _object(body: bytes, what: str) -> dict[str, Any]:
    if len(body) > 64 * 1024:
        raise PopRecordError(f"a {what} record of {len(body)} bytes")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PopRecordError(f"a {what} record is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PopRecordError(f"a {what} record is not a JSON object")
    return doc


def _json_int(value: Any, what: str, low: int = 0, high: int = _INT64_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PopRecordError(f"{what} is not an integer: {str(value)[:40]!r}")
    if not low <= value <= high:
        raise PopRecordError(f"{what} {value} is out of range [{low}, {high}]")
    return value


@dataclass(frozen=True, slots=True)
class PopAnswer:
    """What a POP_MESSAGE answer's header says about the messages in its body (the fields a
    client turns into each message's receipt handle and delivery count)."""

    pop_time_ms: int
    invisible_time_ms: int
    revive_qid: int
    starts: dict[tuple[int, int], int]  # (retry flag, queue id) -> checkpoint start offset
    order_counts: dict[tuple[int, int], int]  # (queue id, offset) -> earlier deliveries (FIFO)

    @classmethod
    def parse(cls, ext: dict[str, str]) -> PopAnswer:
        starts: dict[tuple[int, int], int] = {}
        for entry in filter(None, ext.get("startOffsetInfo", "").split(";")):
            parts = entry.split(" ")
            if len(parts) != 3:
                raise PopRecordError(f"a startOffsetInfo entry is not 'flag queue offset': {entry[:80]!r}")
            starts[(_int(parts[0], "the retry flag", 0, 2), _int(parts[1], "the queue id", 0, 65535))] = \
                _int(parts[2], "the start offset")
        counts: dict[tuple[int, int], int] = {}
        for entry in filter(None, ext.get("orderCountInfo", "").split(";")):
            parts = entry.split(" ")
            if len(parts) == 3 and parts[1].startswith("qo") and "%" in parts[1]:
                queue, _, offset = parts[1][2:].partition("%")
                counts[(_int(queue, "the queue id", 0, 65535), _int(offset, "the offset"))] = \
                    _int(parts[2], "the delivery count", 0, 1 << 30)
        return cls(pop_time_ms=_int(ext.get("popTime", ""), "the pop time"),
                   invisible_time_ms=_int(ext.get("invisibleTime", ""), "the invisible time"),
                   revive_qid=_int(ext.get("reviveQid", ""), "the revive queue", 0, ORDER_REVIVE_QID),
                   starts=starts, order_counts=counts)

    def handle(self, topic: str, queue_id: int, queue_offset: int, broker_name: str,
               commit_log_offset: int = -1) -> ReceiptHandle:
        """The receipt handle of the message stored at (``topic``, ``queue_id``, ``queue_offset``)."""
        flag = RETRY_V2 if "+" in topic and topic.startswith("%RETRY%") else \
            RETRY_V1 if topic.startswith("%RETRY%") else RETRY_NORMAL
        start = self.starts.get((flag, queue_id))
        if start is None:
            raise PopRecordError(f"no start offset for queue {queue_id} (retry flag {flag}) in the POP answer")
        return ReceiptHandle(start, self.pop_time_ms, self.invisible_time_ms, self.revive_qid, flag,
                             broker_name, queue_id, queue_offset, commit_log_offset)

    def deliveries_before(self, queue_id: int, queue_offset: int) -> int:
        """How many times a FIFO message was handed out before this answer (0 for the others)."""
        return self.order_counts.get((queue_id, queue_offset), 0)
