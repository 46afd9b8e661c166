"""Stream states (RFC 9113 §5.1) as a server sees them, and the bounded memory of closed streams.

```
                    recv HEADERS            recv END_STREAM
           idle  ----------------> open ------------------> half-closed (remote)
             |                      |                               |
             | recv HEADERS +       | send END_STREAM: we always    | send END_STREAM
             | END_STREAM           | reset too (RST_STREAM         |
             +----------------------|-- NO_ERROR, §8.1): the client |
                                    |   may stop sending            v
                                    +----> closed (reset sent) <--  closed (ended)
                 send or recv RST_STREAM: closed (reset sent / reset received)
```

A stream that is neither open nor half-closed has one of the closed states below; which one
decides what a late frame means (frame_rules.py): after this side reset a stream, frames the
client sent before it saw the reset are ignored (§5.1, "closed"); after the client reset it,
any frame but PRIORITY is a stream error; after both sides ended it, DATA or HEADERS is a
connection error. Identifiers at or below the highest one the client used that were never used
are closed too (§5.1.1), and so are streams the bounded memory forgot: "closed" with nothing
known, where a HEADERS is a reused identifier (a connection error, PROTOCOL_ERROR) and a DATA a
stream error. Even identifiers are this side's, and it opens none: they stay idle.
"""

from __future__ import annotations

IDLE = 0  # above every identifier the client used (or an even one)
OPEN = 1
HALF_CLOSED_REMOTE = 2  # the client sent END_STREAM; this side still answers
CLOSED = 3  # closed, nothing more known: skipped below the highest used, or forgotten
ENDED = 4  # both sides sent END_STREAM
RESET_SENT = 5  # this side sent RST_STREAM (or refused the stream)
RESET_RECEIVED = 6  # the client sent RST_STREAM
STATE_NAMES = ("idle", "open", "half-closed (remote)", "closed", "closed (ended)", "closed (reset sent)",
               "closed (reset received)")

CLOSED_REMEMBERED = 128  # closed streams whose end is remembered, per connection


class ClosedStreams:
    """The last :data:`CLOSED_REMEMBERED` closed streams and how each closed; older ones are
    forgotten (a client's late frames come within a round trip of the close)."""

    __slots__ = ("_states", "_size_max")

    def __init__(self, size_max: int = CLOSED_REMEMBERED) -> None:
        self._states: dict[int, int] = {}
        self._size_max = size_max

    def closed(self, stream_id: int, state: int) -> None:
        states = self._states
        if len(states) >= self._size_max and stream_id not in states:
            del states[next(iter(states))]  # the oldest
        states[stream_id] = state

    def state(self, stream_id: int) -> int:
        """How ``stream_id`` (not open, at or below the highest used) closed; CLOSED when unknown."""
        return self._states.get(stream_id, CLOSED)

    def __len__(self) -> int:
        return len(self._states)
