"""The names of a store's files under its folder (``data_dir/<node>``), and the two facts read
from them before anything is opened: whether the folder holds an unsealed raft era, and where
a CommitLog continues a sealed one. Every mode's parts share these names.

```
 <root>/abort                 present while the store is open (a crash leaves it)
 <root>/checkpoint            flush and dispatch points for recovery (core.store.checkpoint)
 <root>/logfloor              logFloor=<offset>: the CommitLog continues from this segment
                              start; below it lies a sealed raft era (read by offset only)
 <root>/dledger/base          dataBeginOffset=<offset>: where a raft member's entries begin
```
"""

from __future__ import annotations

from pathlib import Path

from core.errors import StoreError

ABORT_FILE = "abort"
CHECKPOINT_FILE = "checkpoint"
# A store that ran as a raft member keeps its raft state here (replication.dledger).
RAFT_STATE_DIR = "dledger"
RAFT_BASE_FILE = "base"
# Written when a group leaves raft (replication.dledger.seal).
LOG_FLOOR_FILE = "logfloor"


def holds_unsealed_raft(root: Path) -> bool:
    """Whether the store under ``root`` holds raft entries no seal has closed (it can only open
    as a raft member's store until `mqctl restart` seals it)."""
    return (root / RAFT_STATE_DIR / RAFT_BASE_FILE).exists() and not (root / LOG_FLOOR_FILE).exists()


def read_log_floor(root: Path) -> int | None:
    """Where the CommitLog under ``root`` continues a sealed raft era (None: it has none)."""
    try:
        text = (root / LOG_FLOOR_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    key, _, value = text.strip().partition("=")
    if key != "logFloor" or not value.isdigit():
        raise StoreError(f"{root / LOG_FLOOR_FILE}: expected logFloor=<offset>, found {text.strip()!r}")
    return int(value)
