"""The controller's state as every member of its raft group holds it: the events of the raft
log, applied in order as they commit. A member that restarts applies its log again from the
start and holds what it held; the leader judges requests against the same state. The raft
driver reports only commits past the commit index it recovered, so a member applies up to
``driver.commit_index`` once the driver has started, then on every ``on_commit``.
"""

from __future__ import annotations

import logging

from formats.dledger import MAGIC_NORMAL
from replication.controller.event_codec import EventError, decode_event
from replication.controller.group_state import GroupState, apply
from replication.dledger.raft_log import RaftLog

log = logging.getLogger(__name__)


class ControllerState:
    """The groups a controller member knows, up to its applied index."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupState] = {}
        self.applied = -1

    def group(self, name: str) -> GroupState:
        return self.groups.get(name) or GroupState(name)

    def apply_committed(self, entries: RaftLog, commit_index: int) -> None:
        """Apply every entry up to ``commit_index``. A damaged entry is skipped with a warning,
        the same on every member (they hold the same bytes), so the members still agree."""
        for index in range(self.applied + 1, commit_index + 1):
            entry = entries.entry(index)
            if entry is None:
                break  # not on this member's disk yet: applied when it is
            if entry.magic == MAGIC_NORMAL:  # a new leader's no-op carries no event
                try:
                    apply(self.groups, decode_event(entry.body))
                except EventError as exc:
                    log.warning("controller entry %d skipped: %s", index, exc)
            self.applied = index
