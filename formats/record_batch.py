"""A batch body's items as the stored records they become, built a batch at a time.

Each item of a batch body (:mod:`formats.batch`) becomes one record (:mod:`formats.record`)
that shares every field but five with the other records of its request:

```
 item    [TOTALSIZE][MAGIC 0][BODYCRC 0][FLAG][blen][BODY][plen][PROPERTIES]
                                           |     |     |           |
 record  [TOTALSIZE][MAGIC][BODYCRC][QUEUEID][FLAG][QUEUEOFFSET][PHYSICALOFFSET]
         [SYSFLAG .. PREPARED TRANSACTION OFFSET]   <- "middle": one packing per batch
         [blen][BODY][TOPIC][plen + s][PROPERTIES][suffix, s bytes: CLUSTER\\x01name\\x02]
```
Per record only TOTALSIZE, BODYCRC, FLAG, QUEUEOFFSET and PHYSICALOFFSET are computed.
:meth:`RecordBatch.of_body` answers ``None`` for a batch whose properties need more than the
suffix (a WAIT or CLUSTER to drop, a DELAY or TRAN_MSG to refuse or check, a text not ending
in a separator, non-UTF-8) and for a malformed one: those take the per-record path
(:func:`formats.batch.decode_batch`), which gives the exact answer and error. Properties are
looked for once in the whole batch (:mod:`formats.property_texts`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from formats import property_texts
from formats.properties import PROPERTIES_SIZE_MAX, decode_properties
from formats.record import CRC_MASK, Host, MessageRecord, shared_fields

_ITEM_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGIC, BODYCRC, FLAG, body length
_I16 = struct.Struct(">h")
_ITEM_OVERHEAD = 22
_BORN = struct.Struct(">iq")  # SYSFLAG, BORNTIMESTAMP
_PORT = struct.Struct(">i")
_STORE_TS = struct.Struct(">q")
_AFTER_HOSTS = struct.Struct(">iq")  # RECONSUMETIMES, PREPARED TRANSACTION OFFSET
# Names that send a batch to the per-record path.
_PER_RECORD_NAMES = (b"\x02WAIT\x01", b"\x02CLUSTER\x01", b"\x02DELAY\x01", b"\x02TRAN_MSG\x01")


@dataclass(frozen=True, slots=True)
class BatchFields:
    """What every record of one batch request shares."""

    topic: str
    queue_id: int
    sysflag: int  # the items' (a compressed batch's items are stored inflated)
    born_timestamp: int
    born_host: Host
    store_host: Host
    reconsume_times: int


class RecordBatch:
    """The records one batch request stores: common fields once, each item's parts in lists."""

    __slots__ = ("_fixed", "_head", "_magic", "_tail", "_text", "_topic_field", "bodies", "fields", "flags",
                 "properties", "queue_id", "sizes", "suffix", "sysflag", "topic")

    def __init__(self, fields: BatchFields, suffix: bytes, bodies: list[bytes], properties: list[bytes],
                 flags: list[int], text: bytes) -> None:
        self.fields = fields
        self.topic, self.queue_id = fields.topic, fields.queue_id
        self.suffix = suffix
        self.bodies = bodies
        self.properties = properties  # each item's own text; the suffix follows it when stored
        self.flags = flags
        self._text = text  # the run text of ``properties`` (formats.property_texts)
        fixed, self._magic, self.sysflag, born, store, _v4, self._topic_field = shared_fields(
            fields.topic, fields.born_host, fields.store_host, fields.sysflag)  # sysflag with the host bits
        self._fixed = (born, store)
        middle_size = 4 + 8 + len(born) + 4 + 8 + len(store) + 4 + 4 + 8
        self._head = struct.Struct(f">iiiiiqq{middle_size}si")
        self._tail = struct.Struct(f">{len(self._topic_field)}sh")
        fixed += len(suffix)
        self.sizes = [fixed + len(b) + len(p) for b, p in zip(bodies, properties)]

    @classmethod
    def of_body(cls, body: bytes, fields: BatchFields, suffix: bytes) -> RecordBatch | None:
        """The records of batch ``body``, stored with ``fields``, each item's properties
        followed by ``suffix``; or ``None`` when it takes the per-record path (module docstring)."""
        bodies: list[bytes] = []
        texts: list[bytes] = []
        flags: list[int] = []
        unpack_head, unpack_i16 = _ITEM_HEAD.unpack_from, _I16.unpack_from
        pos, end = 0, len(body)
        while pos < end:
            if end - pos < _ITEM_OVERHEAD:
                return None
            total, _magic, _crc, flag, body_len = unpack_head(body, pos)
            item_end = pos + total
            props_at = pos + 20 + body_len
            if body_len < 0 or total < _ITEM_OVERHEAD + body_len or item_end > end:
                return None
            props_len = unpack_i16(body, props_at)[0]
            if props_at + 2 + props_len != item_end or (props_len and body[item_end - 1] != 2):
                return None
            bodies.append(body[pos + 20 : props_at])
            texts.append(body[props_at + 2 : item_end])
            flags.append(flag)
            pos = item_end
        if not bodies or max(map(len, texts)) + len(suffix) > PROPERTIES_SIZE_MAX:
            return None
        text = property_texts.run_text(texts)
        if text is None or any(name in text for name in _PER_RECORD_NAMES):
            return None
        return cls(fields, suffix, bodies, texts, flags, text)

    def __len__(self) -> int:
        return len(self.bodies)

    def encode(self, offsets: list[int], queue_offsets: Sequence[int], store_timestamp: int) -> list[bytes]:
        """The records' bytes as parts, five a record, to write back to back."""
        born, store = self._fixed
        f = self.fields
        middle = b"".join((_BORN.pack(self.sysflag, f.born_timestamp), born, _PORT.pack(f.born_host[1]),
                           _STORE_TS.pack(store_timestamp), store, _PORT.pack(f.store_host[1]),
                           _AFTER_HOSTS.pack(f.reconsume_times, 0)))
        pack_head, pack_tail, topic_field = self._head.pack, self._tail.pack, self._topic_field
        magic, queue_id, suffix, extra = self._magic, self.queue_id, self.suffix, len(self.suffix)
        parts: list[bytes] = []
        for size, crc, flag, qo, phys, body, props in zip(
                self.sizes, map(zlib.crc32, self.bodies), self.flags, queue_offsets, offsets, self.bodies,
                self.properties):
            parts += (pack_head(size, magic, crc & CRC_MASK, queue_id, flag, qo, phys, middle, len(body)),
                      body, pack_tail(topic_field, len(props) + extra), props, suffix)
        return parts

    def records_bytes(self, offsets: list[int], queue_offsets: Sequence[int],
                      store_timestamp: int) -> list[bytes]:
        """Each record's bytes on its own (a raft entry each)."""
        parts = self.encode(offsets, queue_offsets, store_timestamp)
        return [b"".join(parts[i : i + 5]) for i in range(0, len(parts), 5)]

    def tags_codes(self) -> list[int] | None:
        """Each record's ConsumeQueue tagsCode; ``None`` when no record has a tag (all 0)."""
        return property_texts.tags_codes(self.properties, self._text)

    def one_key_each(self) -> list[bytes] | None:
        """Each record's only index key (its UNIQ_KEY), or ``None``: :meth:`index_keys`."""
        return property_texts.one_key_each(self.properties, self._text)

    def index_keys(self) -> list[list[bytes]]:
        """Each record's index keys (KEYS split on whitespace, then UNIQ_KEY)."""
        return property_texts.index_keys(self.properties, self._text)

    def record(self, i: int, phys: int, queue_offset: int, store_timestamp: int) -> MessageRecord:
        """Record ``i`` as a :class:`MessageRecord` (for listeners that read records)."""
        text = self.properties[i] + self.suffix
        f = self.fields
        return MessageRecord(
            self.topic, self.bodies[i], decode_properties(text.decode()), self.queue_id, self.flags[i],
            queue_offset, phys, f.sysflag, f.born_timestamp, f.born_host, store_timestamp,
            f.store_host, f.reconsume_times, total_size=self.sizes[i], properties_text=text)

