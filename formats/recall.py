"""RocketMQ 5's recall handle: what a send of a timer message answers (``recallHandle``), and
what RECALL_MESSAGE names to cancel it before it is due.

```
 URL-safe Base64 (no line breaks) of the text:  v1 <topic> <broker name> <due ms> <UNIQ_KEY>
```

``due ms`` is the message's ``TIMER_OUT_MS`` (RocketMQ writes it plus one on its wheel's ticks;
our timers keep the millisecond, so it is the due time itself).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from formats.errors import FormatError

VERSION = "v1"
HANDLE_LENGTH_MAX = 1024


class RecallHandleError(FormatError):
    """A recall handle that does not parse."""


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    due_ms: int
    uniq_key: str

    def text(self) -> str:
        return base64.urlsafe_b64encode(
            f"{VERSION} {self.topic} {self.broker_name} {self.due_ms} {self.uniq_key}".encode()).decode()

    @classmethod
    def parse(cls, text: str) -> RecallHandle:
        if not text or len(text) > HANDLE_LENGTH_MAX:
            raise RecallHandleError(f"a recall handle must be 1 to {HANDLE_LENGTH_MAX} characters")
        try:
            fields = base64.urlsafe_b64decode(text.encode("ascii")).decode().split(" ")
        except (binascii.Error, UnicodeError, ValueError) as exc:
            raise RecallHandleError(f"the recall handle is not Base64 text: {exc}") from None
        if len(fields) != 5 or fields[0] != VERSION or not fields[3].isdigit() or not all(fields[1:]):
            raise RecallHandleError("the recall handle is not 'v1 topic broker due uniq-key'")
        return cls(fields[1], fields[2], int(fields[3]), fields[4])
