"""What a send that was not acknowledged was told, in a form that counts alike failures together.

Standard library only: the stock clients' workers import it too.
"""

from __future__ import annotations

import re

_REPEATED_ADDRESS = re.compile(r" \(\d{1,3}(?:\.\d{1,3}){3}:\d+\)$")
_WITHIN = re.compile(r" within [\d.]+ ?s\b")
_SPENT = "send timeout spent"


def why_not_acknowledged(error: str) -> str:
    """The last attempt's failure (the one that says why, not that the time then ran out),
    without the time that was left. A drill's nodes keep their addresses, so those stay."""
    if error.startswith("sending to ") and " failed: " in error:
        error = error.split(" failed: ", 1)[1]
    failures = [f for f in error.split("; ") if f] or [error]
    telling = [f for f in failures if f != _SPENT]
    last = telling[-1] if telling else failures[-1]
    return _WITHIN.sub("", _REPEATED_ADDRESS.sub("", last))
