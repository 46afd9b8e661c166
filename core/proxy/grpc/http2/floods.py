"""The flood meter of one HTTP/2 connection: frames that cost the server work without carrying a
request or an answer, counted against the ones that do (as nghttp2, h2o and Go's server count).

Two ledgers; past either, the connection is answered GOAWAY ENHANCE_YOUR_CALM:

- **control frames** (PING, SETTINGS, PRIORITY, RST_STREAM, a WINDOW_UPDATE, an empty DATA that
  does not end its stream, a CONTINUATION, a frame of an unknown type): at most
  ``CONTROL_FREE`` plus ``CONTROL_PER_USEFUL`` for each useful frame (a stream opened, a DATA
  frame with payload, a DATA frame this side sent: gRPC clients answer the server's DATA with
  WINDOW_UPDATEs and BDP PINGs, and send keepalive PINGs);
- **streams the client reset before they were answered**, and header blocks refused as too large
  (rapid reset, CVE-2023-44487: each one may have cost an upstream call): at most
  ``RESETS_FREE`` plus one for each stream answered.

Memory is bounded elsewhere (the reader stops while answers wait for the socket); this bounds
the CPU and the upstream calls a client can spend without doing anything useful.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTROL_FREE = 1000
CONTROL_PER_USEFUL = 4
RESETS_FREE = 100
HEADER_BLOCK_REFUSAL_COST = 10  # decoding a block past the list limit costs more than a reset


@dataclass(slots=True)
class FloodMeter:
    control: int = 0
    useful: int = 0
    resets: int = 0
    answered: int = 0

    def control_frame(self) -> bool:
        """Count a control frame; True when the connection is past its allowance."""
        self.control += 1
        return self.control > CONTROL_FREE + CONTROL_PER_USEFUL * self.useful

    def stream_reset(self, cost: int = 1) -> bool:
        """Count a stream the client reset unanswered (or a refused header block); True when
        past the allowance."""
        self.resets += cost
        return self.resets > RESETS_FREE + self.answered
