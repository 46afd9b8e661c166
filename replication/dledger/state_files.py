"""The small state files of a raft member, each a few ``key=value`` lines (DLedger's
properties files) written whole and synced, then renamed into place:

```
 <store>/dledger/currterm     currTerm=<n> / voteLeader=<id>   (before any answer that depends on it)
 <store>/dledger/checkpoint   endIndex=<n> / committedIndex=<n>
 <store>/dledger/start        startIndex=<S> prevTerm=<t> startPos=<p> installEnd=<n>
```
"""

from __future__ import annotations

import os
from pathlib import Path

from replication.dledger.raft_node import HardState


def save_hard_state(path: Path, state: HardState) -> None:
    """Write term and vote durably (DLedger's ``currterm`` properties) before any answer."""
    write_properties(path, {"currTerm": str(state.term), "voteLeader": state.voted_for or ""})


def load_hard_state(path: Path) -> HardState:
    props = read_properties(path)
    return HardState(int(props.get("currTerm", "0")), props.get("voteLeader") or None)


def save_commit_checkpoint(path: Path, committed_index: int, end_index: int) -> None:
    write_properties(path, {"endIndex": str(end_index), "committedIndex": str(committed_index)})


def load_commit_checkpoint(path: Path) -> int:
    return int(read_properties(path).get("committedIndex", "-1"))


def write_properties(path: Path, props: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


def read_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out
