"""The POP headers and their limits, for the proxy's gRPC door, which imports them from here:
they are declared with every request's headers in the wire layer
(:mod:`core.remoting.pop_headers`), where the broker and the ACL read them."""

from __future__ import annotations

from core.remoting.pop_headers import (
    ATTEMPT_ID_LENGTH_MAX,
    INIT_MAX,
    INIT_MIN,
    INVISIBLE_TIME_MAX_MS,
    POLL_TIME_MAX_MS,
    POP_MESSAGES_MAX,
    AckHeader,
    PopHeader,
)

__all__ = ["ATTEMPT_ID_LENGTH_MAX", "INIT_MAX", "INIT_MIN", "INVISIBLE_TIME_MAX_MS", "POLL_TIME_MAX_MS",
           "POP_MESSAGES_MAX", "AckHeader", "PopHeader"]
