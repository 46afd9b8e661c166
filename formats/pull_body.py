"""A PULL response's body: stored records back to back (layout in :mod:`formats.record`), and
the one change a proxy makes to it, the STOREHOST of each record.

A 4.x client sends a failed message back to the record's store host, and derives its offset
message id from it; a proxy that puts its own door there keeps those calls on the front door
(the broker reads only the CommitLog offset from an offset message id, so the id still finds
the record). Only IPv4 store hosts are replaced by an IPv4 door, in place; anything else is left
as stored.

```
 record:  ... [36: SYSFLAG 4] ... [48: BORNHOST 8|20] [STORETIMESTAMP 8] [STOREHOST 8|20] ...
 STOREHOST (IPv4): [4-byte address][int32 port]
```
"""

from __future__ import annotations

import ipaddress
import struct

from formats import sysflag as sf
from formats.errors import RecordError
from formats.record import host_width

_I32 = struct.Struct(">i")
_SYSFLAG_AT = 36
_BORNHOST_AT = 48
_RECORD_SIZE_MIN = 91


def with_store_host(body: bytes, host: str, port: int) -> bytes:
    """``body`` with every IPv4 STOREHOST set to ``host:port`` (itself when ``host`` is not an
    IPv4 address). A body that does not walk as records is a RecordError."""
    try:
        packed = ipaddress.IPv4Address(host).packed + _I32.pack(port)
    except ValueError:
        return body
    out = bytearray(body)
    pos, end = 0, len(out)
    while pos < end:
        if end - pos < _RECORD_SIZE_MIN:
            raise RecordError(f"{end - pos} bytes at {pos} are too few for a record")
        size = _I32.unpack_from(out, pos)[0]
        if size < _RECORD_SIZE_MIN or pos + size > end:
            raise RecordError(f"record at {pos} claims {size} bytes of {end - pos}")
        flags = _I32.unpack_from(out, pos + _SYSFLAG_AT)[0]
        if not flags & sf.STOREHOST_V6:
            at = pos + _BORNHOST_AT + host_width(flags, sf.BORNHOST_V6) + 8
            out[at : at + 8] = packed
        pos += size
    return bytes(out)
