"""Message ids.

Offset msgId (the broker's): uppercase hex of the store host and the record's physical offset.

```
 IPv4: [ip:4][port:4][phys offset:8]  -> 32 hex chars
 IPv6: [ip:16][port:4][phys offset:8] -> 56 hex chars
```

UNIQ_KEY (the client's id, kept in the properties): 16 bytes as 32 uppercase hex chars. Ours
follow Java's MessageClientIDSetter shape:

```
 [ip:4][pid:2][client hash:4][ms since start of month:4][counter:2]
```
"""

from __future__ import annotations

import calendar
import functools
import ipaddress
import itertools
import os
import struct
import threading
import time
from dataclasses import dataclass

from formats.errors import FormatError

_OFFSET_V4 = struct.Struct(">4siq")
_OFFSET_V6 = struct.Struct(">16siq")
_UNIQ = struct.Struct(">4sHiIH")  # ip, pid, hash; then the tail: ms since the month start, counter


@dataclass(frozen=True, slots=True)
class OffsetMsgId:
    """A decoded offset msgId."""

    host: str
    port: int
    phys_offset: int


def encode_offset_msg_id(host: str, port: int, phys_offset: int) -> str:
    """The broker's msgId for the record at ``phys_offset`` stored on ``host:port``."""
    packed, layout = _packed_host(host)
    return layout.pack(packed, port, phys_offset).hex().upper()


@functools.lru_cache(maxsize=256)
def _packed_host(host: str) -> tuple[bytes, struct.Struct]:
    ip = ipaddress.ip_address(host)
    return ip.packed, (_OFFSET_V6 if ip.version == 6 else _OFFSET_V4)


def decode_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """Split an offset msgId; raises :class:`FormatError` when it is not one."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise FormatError(f"msgId {msg_id!r} is not hex") from None
    if len(raw) == _OFFSET_V4.size:
        ip_raw, port, offset = _OFFSET_V4.unpack(raw)
    elif len(raw) == _OFFSET_V6.size:
        ip_raw, port, offset = _OFFSET_V6.unpack(raw)
    else:
        raise FormatError(f"msgId {msg_id!r} is {len(raw)} bytes, not 16 or 28")
    if offset < 0:
        raise FormatError(f"msgId {msg_id!r} has a negative offset")
    return OffsetMsgId(str(ipaddress.ip_address(ip_raw)), port, offset)


class UniqKeyGenerator:
    """Thread-safe generator of UNIQ_KEY ids for one client process."""

    def __init__(self, ip: str = "127.0.0.1", pid: int | None = None) -> None:
        prefix = ipaddress.ip_address(ip).packed[-4:]
        pid = (os.getpid() if pid is None else pid) & 0xFFFF
        # ip, pid and hash never change: their hex is made once (a third of an id's cost)
        self._head = _UNIQ.pack(prefix, pid, id(self) & 0x7FFFFFFF, 0, 0).hex().upper()[:20]
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start = 0
        self._next_month_start = 0  # the month start is cached: gmtime per id cost 4% of a send
        self._stamped = (-1, "")  # (ms, the id's head and time part then)

    def next(self, now_ms: int) -> str:
        """The id of a message born at ``now_ms`` (the caller's clock: ms since the epoch)."""
        now = now_ms
        seq = next(self._counter) & 0xFFFF  # itertools.count is atomic under the GIL
        if not self._month_start <= now < self._next_month_start:
            with self._lock:
                self._month_start = month_start_ms(now)
                self._next_month_start = month_start_ms(self._month_start + 32 * 86_400_000)
        stamped_ms, stamped = self._stamped  # one attribute: another thread sees a whole pair
        if now != stamped_ms:  # the head and time part are made once a millisecond
            stamped = self._head + format((now - self._month_start) & 0xFFFFFFFF, "08X")
            self._stamped = (now, stamped)
        return stamped + format(seq, "04X")


def month_start_ms(now_ms: int) -> int:
    """Epoch ms of the first instant of the UTC month containing ``now_ms``."""
    t = time.gmtime(now_ms / 1000)
    return calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)) * 1000


def is_uniq_key(text: str) -> bool:
    """Whether ``text`` has the shape of a UNIQ_KEY (32 hex chars)."""
    if len(text) != 32:
        return False
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True
