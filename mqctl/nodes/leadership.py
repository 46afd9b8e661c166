"""A raft group's leadership as its members report it (GET_BROKER_RUNTIME_INFO): who leads,
and whether a member holds everything the leader committed."""

from __future__ import annotations

import trio

from core.config import Config
from mqctl.common import probe


def group_infos(config: Config, group: str) -> dict[str, dict[str, str] | None]:
    """The runtime table of each member of broker group ``group`` (None: not answering)."""
    members = {b.node: b.listen for b in config.brokers if b.name == group}
    return trio.run(lambda: probe.runtime_infos(members, credentials=config.acl.credentials()))


def leader_of(infos: dict[str, dict[str, str] | None]) -> str | None:
    return next((node for node, info in infos.items() if info and info.get("raftWritable") == "true"), None)


def caught_up_with_leader(infos: dict[str, dict[str, str] | None], node: str) -> str | None:
    """The leader's name when the group has one and ``node`` holds everything it committed."""
    leader = leader_of(infos)
    mine = infos.get(node)
    if leader is None or not mine:
        return None
    lead = infos[leader] or {}
    return leader if int(mine.get("raftCommitIndex", -1)) >= int(lead.get("raftCommitIndex", 0)) else None
