"""A config table on disk that grows by its changes, not by the table (topics, subscription
groups):

```
 config/<table>.json           the whole table as of its last rewrite (RocketMQ's JSON wrapper)
 config/<table>.json.journal   one JSON line per change since: {"put": {...}, ...} or
                               {"delete": "<name>", ...}, fsynced before the change is answered
```
A change costs one line; the table is rewritten (and the journal emptied) once the journal
holds as many lines as the table has entries, at least ``JOURNAL_LINES_MIN``, and whenever the
owner asks. Replaying the journal over a newer table gives that table again (each line sets or
removes one entry, in order), so a crash between the rewrite and the journal's removal loses
nothing; a torn last line (a crash while it was written) was never answered and is skipped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from core.json_files import save_json

log = logging.getLogger(__name__)

JOURNAL_LINES_MIN = 1024  # the table is rewritten after at least this many changes


class ChangeJournal:
    """The journal beside the table file ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.journal_path = path.with_name(path.name + ".journal")
        self.lines = 0

    def replay(self, apply: Callable[[dict[str, Any]], None]) -> None:
        """Give each line of the journal to ``apply`` in order (a line it cannot use raises
        KeyError, TypeError or ValueError and is logged and skipped)."""
        try:
            raw = self.journal_path.read_bytes()
        except FileNotFoundError:
            return
        lines = raw.splitlines()
        for number, text in enumerate(lines, 1):
            try:
                line = orjson.loads(text)
                if not isinstance(line, dict):
                    raise TypeError("not a JSON object")
                apply(line)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                log.warning("%s line %d unreadable, ignored: %s", self.journal_path, number, exc)
        self.lines = len(lines)

    def record(self, line: dict[str, Any], entries: int, table: Callable[[], Any]) -> None:
        """Make one change durable: a journal line, or a rewrite of ``table()`` (a table of
        ``entries`` entries) when the journal is long enough."""
        if self.lines + 1 >= max(JOURNAL_LINES_MIN, entries):
            self.rewrite(table())
            return
        if self.lines == 0:
            self.journal_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.journal_path, "ab") as fh:
            fh.write(orjson.dumps(line) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.lines += 1

    def rewrite(self, doc: Any) -> None:
        """Replace the table file with ``doc``; the journal is then empty."""
        save_json(self.path, doc)
        self.journal_path.unlink(missing_ok=True)
        self.lines = 0
