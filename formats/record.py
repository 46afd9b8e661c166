"""The stored message record: one CommitLog entry, also the unit of a PULL response body.

Big-endian. Offsets for IPv4 hosts (each host grows to 20 bytes when its V6 sysflag bit is set):

```
 off  size  field
   0     4  TOTALSIZE            whole record, this field included
   4     4  MAGICCODE            0xDAA320A7 (v1: 1-byte topic length) | 0xDAA320AB (v2: 2-byte)
   8     4  BODYCRC              crc32(stored body) & 0x7FFFFFFF
  12     4  QUEUEID
  16     4  FLAG                 the producer's flag
  20     8  QUEUEOFFSET          logical offset in the ConsumeQueue
  28     8  PHYSICALOFFSET       byte offset of this record in the CommitLog
  36     4  SYSFLAG              see formats.sysflag
  40     8  BORNTIMESTAMP        ms
  48     8  BORNHOST             4-byte IPv4 + int32 port   (16 + 4 if BORNHOST_V6)
  56     8  STORETIMESTAMP       ms
  64     8  STOREHOST            4-byte IPv4 + int32 port   (16 + 4 if STOREHOST_V6)
  72     4  RECONSUMETIMES
  76     8  PREPARED TRANSACTION OFFSET
  84   4+n  BODY                 int32 length, then the stored (maybe compressed) body
   .   1+t  TOPIC                int8 length (int16 in v2), then UTF-8
   .   2+p  PROPERTIES           int16 length, then the properties string (formats.properties)
```
TOTALSIZE = 91 + n + t + p with IPv4 hosts and a v1 topic.

A CommitLog segment that cannot hold the next record (plus 8 spare bytes) ends with a BLANK:

```
 [int32 remaining bytes of the segment][int32 BLANK_MAGIC 0xCBD43194]
```
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

from formats import sysflag as sf
from formats.buffers import ReadableBytes, WritableBytes
from formats.compression import decompress
from formats.errors import RecordError
from formats.properties import (
    PROPERTIES_SIZE_MAX,
    TAGS,
    UNIQ_KEY,
    PropertiesText,
    decode_properties,
    encode_properties,
    message_keys,
)

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_SIZE = 8
MAGIC_V1_BYTES = struct.pack(">i", MAGIC_V1)
MAGIC_V2_BYTES = struct.pack(">i", MAGIC_V2)
BLANK_MAGIC_BYTES = struct.pack(">i", BLANK_MAGIC)
RECORD_SIZE_MIN = 91
TOPIC_SIZE_MAX_V1 = 127
CRC_MASK = 0x7FFFFFFF

# Field offsets that do not depend on host widths.
OFF_TOTALSIZE = 0
OFF_MAGIC = 4
OFF_BODYCRC = 8
OFF_QUEUEID = 12
OFF_FLAG = 16
OFF_QUEUEOFFSET = 20
OFF_PHYSICALOFFSET = 28
OFF_SYSFLAG = 36
OFF_BORNTIMESTAMP = 40
OFF_BORNHOST = 48

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_QQ = struct.Struct(">qq")
_FIXED_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP, 48 bytes
# The all-IPv4 fast path: TOTALSIZE .. body length, 88 bytes.
_V4_HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED TX OFFSET, body length
_BLANK = struct.Struct(">ii")

Host = tuple[str, int]


def crc32_masked(data: bytes) -> int:
    """RocketMQ's body CRC: zlib CRC-32 masked to 31 bits."""
    return zlib.crc32(data) & CRC_MASK


@dataclass(slots=True)
class MessageRecord:
    """One stored message, as the fields of the record layout above."""

    topic: str
    body: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    phys_offset: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: Host = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    body_crc: int = 0
    magic: int = MAGIC_V1
    total_size: int = 0
    # The properties already encoded, when the caller has them (a batch item's bytes): the
    # encoder then writes these instead of encoding ``properties`` again. Must say the same.
    properties_text: bytes | None = None

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return message_keys(self.properties)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(UNIQ_KEY)

    @property
    def body_crc_ok(self) -> bool:
        return crc32_masked(self.body) == self.body_crc

    def payload(self) -> bytes:
        """The body as the producer sent it, decompressed when the record is compressed."""
        kind = sf.compression_type(self.sysflag)
        return self.body if kind is None else decompress(self.body, kind)


@functools.lru_cache(maxsize=4096)
def _topic_field(topic: str) -> tuple[bytes, bytes]:
    """The topic's UTF-8 bytes and its length-prefixed field (v1: int8, v2: int16)."""
    raw = topic.encode()
    if len(raw) > 0x7FFF:
        raise RecordError(f"topic is {len(raw)} bytes")
    prefix = _I16.pack(len(raw)) if len(raw) > TOPIC_SIZE_MAX_V1 else bytes((len(raw),))
    return raw, prefix + raw


@functools.lru_cache(maxsize=1024)
def _host_bytes(host: Host) -> tuple[bytes, bool]:
    ip = ipaddress.ip_address(host[0])
    return ip.packed, ip.version == 6


def _host_from(buf: ReadableBytes, pos: int, v6: bool) -> Host:
    width = 16 if v6 else 4
    port = _I32.unpack_from(buf, pos + width)[0]
    return (_ip_text(bytes(buf[pos : pos + width])), port)


@functools.lru_cache(maxsize=4096)
def _topic_text(raw: bytes) -> str:
    return raw.decode()


@functools.lru_cache(maxsize=4096)
def _ip_text(raw: bytes) -> str:
    """Text form of a packed address (cached: ipaddress costs a quarter of a record decode)."""
    return str(ipaddress.IPv6Address(raw) if len(raw) == 16 else ipaddress.IPv4Address(raw))


def host_width(sysflag: int, v6_bit: int) -> int:
    """Bytes a host field takes: 8 (IPv4 + port) or 20 (IPv6 + port)."""
    return 20 if sysflag & v6_bit else 8


# What prepare_record computes: (size, magic, crc, sysflag, born ip, store ip, both-IPv4, tail).
# A plain tuple: a NamedTuple's Python-level __new__ costs a sixth of an append.
PreparedRecord = tuple[int, int, int, int, bytes, bytes, bool, bytes]
_V6_BITS = sf.BORNHOST_V6 | sf.STOREHOST_V6


def prepare_record(rec: MessageRecord) -> PreparedRecord:
    """Everything about a record's bytes that does not depend on where it is stored: its size,
    BODYCRC, sysflag (host V6 bits follow the hosts), packed hosts, and the trailing bytes
    (topic field, properties). The magic is v2 only when the topic needs a 2-byte length."""
    props_bytes = rec.properties_text
    if props_bytes is None:
        props_bytes = encode_properties(rec.properties).encode()
    if len(props_bytes) > PROPERTIES_SIZE_MAX:
        raise RecordError(f"properties are {len(props_bytes)} bytes, more than {PROPERTIES_SIZE_MAX}")
    fixed, magic, flags, born, store, v4, topic_field = shared_fields(
        rec.topic, rec.born_host, rec.store_host, rec.sysflag)
    body = rec.body
    return (fixed + len(body) + len(props_bytes), magic, zlib.crc32(body) & CRC_MASK, flags, born, store,
            v4, topic_field + _I16.pack(len(props_bytes)) + props_bytes)


@functools.lru_cache(maxsize=4096)
def shared_fields(topic: str, born_host: Host, store_host: Host,
                  sysflag: int) -> tuple[int, int, int, bytes, bytes, bool, bytes]:
    """What records of one topic, hosts and sysflag have in common (a batch's records, and
    most records of a producer): size without body and properties, magic, sysflag with the
    host V6 bits, packed hosts, both-IPv4, topic field. Cached: it was a third of a prepare."""
    topic_raw, topic_field = _topic_field(topic)
    born, born_v6 = _host_bytes(born_host)
    store, store_v6 = _host_bytes(store_host)
    flags = sysflag & ~_V6_BITS
    if born_v6:
        flags |= sf.BORNHOST_V6
    if store_v6:
        flags |= sf.STOREHOST_V6
    v2 = len(topic_raw) > TOPIC_SIZE_MAX_V1
    fixed = RECORD_SIZE_MIN + len(topic_raw) + v2 + (12 if born_v6 else 0) + (12 if store_v6 else 0)
    return (fixed, MAGIC_V2 if v2 else MAGIC_V1, flags, born, store, not (born_v6 or store_v6),
            topic_field)


def write_record(
    buf: WritableBytes, pos: int, rec: MessageRecord, prep: PreparedRecord,
    queue_offset: int, phys_offset: int, store_timestamp: int,
) -> None:
    """Write the record into ``buf`` at ``pos`` (a mapped segment: encoded once, in place)."""
    size, magic, crc, flags, born, store, v4, tail = prep
    body = rec.body
    if v4:
        _V4_HEAD.pack_into(
            buf, pos, size, magic, crc, rec.queue_id, rec.flag, queue_offset, phys_offset,
            flags, rec.born_timestamp, born, rec.born_host[1], store_timestamp, store,
            rec.store_host[1], rec.reconsume_times, rec.prepared_tx_offset, len(body),
        )
        p = pos + 88
    else:
        head = b"".join((
            _FIXED_HEAD.pack(size, magic, crc, rec.queue_id, rec.flag, queue_offset, phys_offset,
                             flags, rec.born_timestamp),
            born, _I32.pack(rec.born_host[1]), _I64.pack(store_timestamp),
            store, _I32.pack(rec.store_host[1]),
            _TAIL.pack(rec.reconsume_times, rec.prepared_tx_offset, len(body)),
        ))
        buf[pos : pos + len(head)] = head
        p = pos + len(head)
    buf[p : p + len(body)] = body
    p += len(body)
    buf[p : pos + size] = tail


def encode_record(rec: MessageRecord) -> bytearray:
    """The record's bytes, with the store fields the record carries."""
    prep = prepare_record(rec)
    out = bytearray(prep[0])
    write_record(out, 0, rec, prep, rec.queue_offset, rec.phys_offset, rec.store_timestamp)
    return out


def store_timestamp_offset(sysflag: int) -> int:
    """Offset of STORETIMESTAMP within a record with this sysflag."""
    return OFF_BORNHOST + host_width(sysflag, sf.BORNHOST_V6)


def read_store_timestamp(buf: bytes | memoryview) -> int | None:
    """STORETIMESTAMP of the record ``buf`` begins with, without decoding the rest (None: too
    short to hold one)."""
    if len(buf) < OFF_SYSFLAG + 4:
        return None
    at = store_timestamp_offset(_I32.unpack_from(buf, OFF_SYSFLAG)[0])
    return _I64.unpack_from(buf, at)[0] if len(buf) >= at + 8 else None


def patch_store_fields(
    buf: bytearray, queue_offset: int, phys_offset: int, store_timestamp: int
) -> None:
    """Fill the fields the store assigns at append time into an encoded record."""
    _QQ.pack_into(buf, OFF_QUEUEOFFSET, queue_offset, phys_offset)
    v6 = buf[OFF_SYSFLAG + 3] & sf.BORNHOST_V6
    _I64.pack_into(buf, 68 if v6 else 56, store_timestamp)


def decode_record(
    buf: ReadableBytes,
    pos: int = 0,
    *,
    limit: int | None = None,
    check_crc: bool = True,
    with_body: bool = True,
) -> MessageRecord:
    """Decode the record starting at ``pos``; ``limit`` is where valid data ends.

    Raises :class:`RecordError` naming what is wrong (size, magic, lengths, CRC).
    """
    end = len(buf) if limit is None else limit
    if end - pos < 8:
        raise RecordError("truncated record header", pos)
    total, magic = _BLANK.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise RecordError("bad magic", pos)
    if total < RECORD_SIZE_MIN:
        raise RecordError(f"record size {total} below minimum", pos)
    if total > end - pos:
        raise RecordError(f"record size {total} runs past the end of data", pos)
    record_end = pos + total
    flags = _I32.unpack_from(buf, pos + OFF_SYSFLAG)[0]
    if not flags & _V6_BITS:  # both hosts IPv4: one unpack for the 88-byte head
        (
            _, _, crc, queue_id, flag, queue_offset, phys_offset, flags, born_ts, born_ip, born_port,
            store_ts, store_ip, store_port, reconsume, prepared, body_len,
        ) = _V4_HEAD.unpack_from(buf, pos)
        born_host = (_ip_text(born_ip), born_port)
        store_host = (_ip_text(store_ip), store_port)
        p = pos + 88
    else:
        (
            _, _, crc, queue_id, flag, queue_offset, phys_offset, flags, born_ts,
        ) = _FIXED_HEAD.unpack_from(buf, pos)
        p = pos + OFF_BORNHOST
        born_v6 = bool(flags & sf.BORNHOST_V6)
        store_v6 = bool(flags & sf.STOREHOST_V6)
        fixed_rest = (20 if born_v6 else 8) + 8 + (20 if store_v6 else 8) + 16
        if p + fixed_rest > record_end:
            raise RecordError("record too short for its host fields", pos)
        born_host = _host_from(buf, p, born_v6)
        p += 20 if born_v6 else 8
        store_ts = _I64.unpack_from(buf, p)[0]
        p += 8
        store_host = _host_from(buf, p, store_v6)
        p += 20 if store_v6 else 8
        reconsume, prepared, body_len = _TAIL.unpack_from(buf, p)
        p += 16
    if body_len < 0 or p + body_len > record_end:
        raise RecordError(f"body length {body_len} does not fit the record", pos)
    body_start = p
    p += body_len
    if magic == MAGIC_V2:
        if p + 2 > record_end:
            raise RecordError("topic length does not fit the record", pos)
        topic_len = _I16.unpack_from(buf, p)[0]
        p += 2
    else:
        if p + 1 > record_end:
            raise RecordError("topic length does not fit the record", pos)
        topic_len = buf[p]
        p += 1
    if topic_len <= 0 or p + topic_len + 2 > record_end:
        raise RecordError(f"topic length {topic_len} does not fit the record", pos)
    try:
        topic = _topic_text(bytes(buf[p : p + topic_len]))
    except UnicodeDecodeError:
        raise RecordError("topic is not UTF-8", pos) from None
    p += topic_len
    props_len = _I16.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0 or p + props_len != record_end:
        raise RecordError(
            f"properties length {props_len} does not match the record size {total}", pos
        )
    body = bytes(buf[body_start : body_start + body_len]) if (with_body or check_crc) else b""
    if check_crc and crc32_masked(body) != crc:
        raise RecordError("body crc mismatch", pos)
    try:
        props = decode_properties(bytes(buf[p:record_end]).decode())
    except UnicodeDecodeError:
        raise RecordError("properties are not UTF-8", pos) from None
    # positional: this runs once per record on every consumer
    return MessageRecord(
        topic, body if with_body else b"", props, queue_id, flag, queue_offset, phys_offset, flags,
        born_ts, born_host, store_ts, store_host, reconsume, prepared, crc, magic, total,
    )


# TOTALSIZE, MAGIC, QUEUEID, QUEUEOFFSET, SYSFLAG, STORETIMESTAMP and the body length of a
# record with IPv4 hosts: what dispatch needs from the 88-byte head.
DISPATCH_HEAD_V4 = struct.Struct(">ii4xi4xq8xi16xq20xi")


class DispatchFields(NamedTuple):
    """The fields of a record its ConsumeQueue and key-index entries are made of."""

    total_size: int
    topic: str
    queue_id: int
    queue_offset: int
    sysflag: int
    store_timestamp: int
    properties: dict[str, str]


def decode_dispatch_fields(buf: ReadableBytes, pos: int, limit: int) -> DispatchFields:
    """The :class:`DispatchFields` of the record at ``pos`` (ending by ``limit``), checked as
    :func:`decode_record` checks them, skipping the body, hosts and CRC: a replica dispatching
    its master's records pays about half of a full decode."""
    layout = _v4_layout(buf, pos, limit)
    if layout is None:
        return _fully_decoded_fields(buf, pos, limit)
    head, topic_at, props_at, end = layout
    total, _, queue_id, queue_offset, flags, store_ts, _ = head
    try:
        topic = _topic_text(bytes(buf[topic_at : props_at - 2]))
        props = decode_properties(bytes(buf[props_at:end]).decode()) if end > props_at else {}
    except UnicodeDecodeError:
        raise RecordError("topic or properties are not UTF-8", pos) from None
    return DispatchFields(total, topic, queue_id, queue_offset, flags, store_ts, props)


def _v4_layout(buf: ReadableBytes, pos: int, limit: int) -> tuple[tuple[int, ...], int, int, int] | None:
    """For a sound record with IPv4 hosts at ``pos``: its head fields (DISPATCH_HEAD_V4), where
    its topic and its properties start, and where it ends; None for anything else (IPv6 hosts,
    damage), which the full decoder handles."""
    if limit - pos < 88:
        return None
    head = DISPATCH_HEAD_V4.unpack_from(buf, pos)
    total, magic, _, _, flags, _, body_len = head
    if flags & _V6_BITS or magic not in (MAGIC_V1, MAGIC_V2) or not RECORD_SIZE_MIN <= total <= limit - pos:
        return None
    end = pos + total
    p = pos + 88 + body_len
    if magic == MAGIC_V1:
        topic_len = buf[p] if body_len >= 0 and p < end else -1
        p += 1
    else:
        topic_len = _I16.unpack_from(buf, p)[0] if body_len >= 0 and p + 2 <= end else -1
        p += 2
    if topic_len <= 0 or p + topic_len + 2 > end:
        return None
    props_at = p + topic_len + 2
    if _I16.unpack_from(buf, props_at - 2)[0] != end - props_at:
        return None
    return head, p, props_at, end


def record_properties(buf: ReadableBytes, pos: int = 0, limit: int | None = None) -> PropertiesText:
    """The properties of the record at ``pos`` (what an SQL92 selector reads), looked up by
    name on demand; the body and topic are not decoded."""
    end_limit = len(buf) if limit is None else limit
    layout = _v4_layout(buf, pos, end_limit)
    if layout is None:  # IPv6 hosts, or damage for the full decoder to name
        return PropertiesText(encode_properties(_fully_decoded_fields(buf, pos, end_limit).properties))
    _, _, props_at, end = layout
    try:
        return PropertiesText(bytes(buf[props_at:end]).decode())
    except UnicodeDecodeError:
        raise RecordError("properties are not UTF-8", pos) from None


def _fully_decoded_fields(buf: ReadableBytes, pos: int, limit: int) -> DispatchFields:
    """The slow path (IPv6 hosts, or damage for decode_record to name)."""
    rec = decode_record(buf, pos, limit=limit, check_crc=False, with_body=False)
    return DispatchFields(rec.total_size, rec.topic, rec.queue_id, rec.queue_offset, rec.sysflag,
                          rec.store_timestamp, rec.properties)


def record_size(buf: bytes | WritableBytes, pos: int = 0) -> int:
    """TOTALSIZE of the record (or the size of a BLANK) at ``pos``, unchecked."""
    return _I32.unpack_from(buf, pos)[0]


def encode_blank(remaining: int) -> bytes:
    """The end-of-segment marker for a segment with ``remaining`` unused bytes."""
    return _BLANK.pack(remaining, BLANK_MAGIC)


def is_blank(buf: bytes | WritableBytes, pos: int = 0) -> bool:
    """Whether an end-of-segment BLANK marker starts at ``pos``."""
    return len(buf) - pos >= BLANK_SIZE and _I32.unpack_from(buf, pos + 4)[0] == BLANK_MAGIC


def decode_records(buf: ReadableBytes, *, check_crc: bool = True) -> list[MessageRecord]:
    """All records of a concatenation (a PULL response body)."""
    out: list[MessageRecord] = []
    pos = 0
    while pos < len(buf):
        rec = decode_record(buf, pos, check_crc=check_crc)
        out.append(rec)
        pos += rec.total_size
    return out
