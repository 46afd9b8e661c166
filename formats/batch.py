"""Batch bodies (SEND_BATCH_MESSAGE, or SEND_MESSAGE with ``batch`` set by the C++ client).

Per item, concatenated (Java ``MessageDecoder.encodeMessage``):

```
 off  size  field
   0     4  TOTALSIZE      = 22 + n + p
   4     4  MAGIC          0
   8     4  BODYCRC        0
  12     4  FLAG
  16   4+n  BODY           int32 length, then bytes
   .   2+p  PROPERTIES     int16 length, then the properties string
```
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from formats.errors import FormatError
from formats.properties import PROPERTIES_SIZE_MAX, decode_properties, encode_properties

BATCH_ITEM_OVERHEAD = 22
_HEAD = struct.Struct(">iiiii")
_I16 = struct.Struct(">h")


@dataclass(slots=True)
class BatchItem:
    """One message of a batch body."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    properties_text: bytes | None = field(default=None, compare=False)  # as received, when decoded


def encode_batch(items: Iterable[BatchItem]) -> bytes:
    """Concatenated batch items."""
    parts: list[bytes] = []
    for item in items:
        props = encode_properties(item.properties).encode()
        if len(props) > PROPERTIES_SIZE_MAX:
            raise FormatError("batch item properties too long")
        total = BATCH_ITEM_OVERHEAD + len(item.body) + len(props)
        parts.append(_HEAD.pack(total, 0, 0, item.flag, len(item.body)))
        parts.append(item.body)
        parts.append(_I16.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def decode_batch(buf: bytes) -> list[BatchItem]:
    """Split a batch body into items; raises :class:`FormatError` on any inconsistency."""
    out: list[BatchItem] = []
    end = len(buf)
    unpack_head, unpack_i16 = _HEAD.unpack_from, _I16.unpack_from
    pos = 0
    while pos < end:
        if end - pos < BATCH_ITEM_OVERHEAD:
            raise FormatError(f"batch item at {pos} is truncated")
        total, _magic, _crc, flag, body_len = unpack_head(buf, pos)
        item_end = pos + total
        if total < BATCH_ITEM_OVERHEAD or item_end > end:
            raise FormatError(f"batch item at {pos} has bad size {total}")
        if body_len < 0 or BATCH_ITEM_OVERHEAD + body_len > total:
            raise FormatError(f"batch item at {pos} has bad body length {body_len}")
        props_pos = pos + 20 + body_len
        props_len = unpack_i16(buf, props_pos)[0]
        if props_len < 0 or props_pos + 2 + props_len != item_end:
            raise FormatError(f"batch item at {pos} has bad properties length {props_len}")
        raw = bytes(buf[props_pos + 2 : item_end])
        try:
            props = decode_properties(raw.decode())
        except UnicodeDecodeError:
            raise FormatError(f"batch item at {pos} has non-UTF-8 properties") from None
        out.append(BatchItem(bytes(buf[pos + 20 : props_pos]), props, flag, raw))
        pos = item_end
    return out
