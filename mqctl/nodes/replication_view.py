"""What ``mqctl status`` and ``mqctl restart`` make of replication, from the brokers'
GET_BROKER_RUNTIME_INFO tables (pure: tables in, fields out; no sockets).

A master's ``haSlaves`` lists its open HA links by the slave's end of each socket; a slave's
``haLocalAddr`` is that same end, which is how a slave finds its line on its master. A slave
counts as connected only when both sides say so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RuntimeInfo = Mapping[str, str]

# the fields `mqctl status --json` adds to every row (None where they do not apply; the last two
# under a controller: the master epoch the broker knows and its group's SyncStateSet)
FIELDS = ("mode", "slaves_connected", "slaves_configured", "connected", "acked_offset", "lag_bytes",
          "lag_seconds", "state", "epoch", "sync_state_set")
# the table's extra columns, after the original ones
COLUMNS = ("mode", "connected", "acked_offset", "lag_bytes", "lag_seconds", "state")
CONTROLLER_COLUMNS = COLUMNS + ("epoch", "sync_state_set")
UNKNOWN = "-"


@dataclass(frozen=True, slots=True)
class SlaveLink:
    """One slave as its master sees it."""

    addr: str
    ack_offset: int
    lag_bytes: int
    lag_seconds: float
    connected_seconds: float


def slave_links(master: RuntimeInfo | None) -> list[SlaveLink]:
    """The master's open links to slaves; none when it is down or has none."""
    if not master:
        return []
    try:
        entries = json.loads(master.get("haSlaves") or "[]")
        return [SlaveLink(str(e["addr"]), int(e["ackOffset"]), int(e["lagBytes"]), float(e["lagSeconds"]),
                          float(e["connectedSeconds"])) for e in entries]
    except (ValueError, TypeError, KeyError):  # not our node's shape: claim no link rather than guess
        return []


def link_of(slave: RuntimeInfo | None, master: RuntimeInfo | None) -> SlaveLink | None:
    """The master's link to ``slave``; None when either is down or they are not connected."""
    if not slave or slave.get("haConnected") != "true" or not slave.get("haLocalAddr"):
        return None
    return next((link for link in slave_links(master) if link.addr == slave["haLocalAddr"]), None)


def refused(slave: RuntimeInfo | None) -> str | None:
    """Why the slave stopped replicating (its log forked from the master's with no common prefix)."""
    return (slave or {}).get("haRefused") or None


def caught_up(slave: RuntimeInfo | None, master: RuntimeInfo | None) -> SlaveLink | None:
    """The link when the master has the slave connected with nothing left to copy."""
    link = link_of(slave, master)
    return link if link is not None and link.lag_bytes == 0 else None


def _max_offset(info: RuntimeInfo | None) -> int | None:
    return int(info["commitLogMaxOffset"]) if info and "commitLogMaxOffset" in info else None


def controller_master(member_infos: Mapping[str, RuntimeInfo | None]) -> str | None:
    """Under a controller: the node of a group that says it is master (the newest epoch's)."""
    masters = [(int(i.get("haMasterEpoch", 0)), node) for node, i in member_infos.items()
               if i and i.get("haRole") == "master"]
    return max(masters)[1] if masters else None


def controller_fields(info: RuntimeInfo | None) -> dict[str, Any]:
    """The master epoch a broker under a controller knows, and its group's SyncStateSet."""
    if not info or info.get("haController") != "true":
        return {}
    try:
        members = [int(b) for b in json.loads(info.get("haSyncStateSet") or "[]")]
    except (ValueError, TypeError):
        members = []
    return {"epoch": int(info.get("haMasterEpoch", 0)), "sync_state_set": members}


def nameserver_fields(alive: bool) -> dict[str, Any]:
    return dict.fromkeys(FIELDS) | {"state": "serving" if alive else "down"}


def master_fields(master: RuntimeInfo | None, *, alive: bool, mode_configured: str,
                  slaves_configured: int) -> dict[str, Any]:
    """A master row: its mode (as running, else as configured) and how many slaves it has."""
    fields = dict.fromkeys(FIELDS) | {"mode": mode_configured, "slaves_configured": slaves_configured}
    if not alive:
        return fields | {"state": "down"}
    if master is None:
        return fields | {"state": "not answering"}
    mode = master.get("haMode") or master.get("replicationMode") or mode_configured
    return fields | {"mode": mode, "slaves_connected": len(slave_links(master)), "state": "serving"}


def slave_fields(slave: RuntimeInfo | None, master: RuntimeInfo | None, *, alive: bool,
                 mode_configured: str) -> dict[str, Any]:
    """A slave row: connected, acked offset and lag as its master sees them. Not connected: the
    slave's own end offset as acked and the lag unknown (None)."""
    fields = dict.fromkeys(FIELDS) | {"mode": mode_configured}
    if not alive:
        return fields | {"connected": False, "state": "down"}
    if slave is None:
        return fields | {"connected": False, "state": "not answering"}
    fields["mode"] = slave.get("haMode") or slave.get("replicationMode") or mode_configured
    link = link_of(slave, master)
    reason = refused(slave)
    if link is None:
        state = f"diverged: {reason}" if reason else ("master down" if master is None else "not connected")
        return fields | {"connected": False, "acked_offset": _max_offset(slave), "state": state}
    return fields | {"connected": True, "acked_offset": link.ack_offset, "lag_bytes": link.lag_bytes,
                     "lag_seconds": link.lag_seconds, "state": "in sync" if link.lag_bytes == 0 else "catching up"}


# `mqctl status` under replication.mode = "dledger": the raft view of each member
RAFT_FIELDS = ("mode", "term", "leader", "first_index", "commit_index", "last_index", "watermark", "state")
RAFT_COLUMNS = RAFT_FIELDS


def raft_leader_info(member_infos: Sequence[RuntimeInfo | None]) -> RuntimeInfo | None:
    """The table of the group's member that leads (takes writes), if one answered."""
    return next((i for i in member_infos if i and i.get("raftWritable") == "true"), None)


def raft_fields(info: RuntimeInfo | None, leader: RuntimeInfo | None, *, alive: bool) -> dict[str, Any]:
    """A raft member's row: its role, term, the leader it knows, its first (retention deletes
    before it), commit and last index, and the index the leader knows it holds (its
    watermark)."""
    fields = dict.fromkeys(RAFT_FIELDS) | {"mode": "dledger"}
    if not alive:
        return fields | {"role": "down", "state": "down"}
    if info is None or "raftTerm" not in info:
        return fields | {"state": "not answering"}
    role = info.get("haRole", "")
    fields |= {"role": role, "term": int(info["raftTerm"]), "leader": info.get("raftLeader") or None,
               "first_index": int(info.get("raftFirstIndex", 0)),
               "commit_index": int(info.get("raftCommitIndex", -1)), "last_index": int(info.get("raftLastIndex", -1))}
    if leader is not None:
        try:
            marks = json.loads(leader.get("raftWatermarks") or "{}")
            fields["watermark"] = int(marks[info["raftMember"]])
        except (ValueError, KeyError, TypeError):
            pass
    if info.get("raftWritable") == "true":
        state = "leading"
    elif role == "leader":
        state = "leading (committing its first entry)"
    elif int(info.get("raftLastIndex", -1)) < int(info.get("raftInstallEnd", -1)):
        state = f"installing from {fields['leader'] or 'the leader'}"
    elif fields["leader"]:
        behind = None if fields["watermark"] is None or leader is None else \
            int(leader.get("raftLastIndex", 0)) - fields["watermark"]
        state = f"following {fields['leader']}" + (f", {behind} behind" if behind else "")
    else:
        state = "electing"
    return fields | {"state": state}


def table_cells(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` as the table shows it: yes/no, a master's slaves as connected/configured, and "-"
    for a slave's unknown lag."""
    cells = dict(row)
    if row.get("mode") == "dledger":
        return {k: UNKNOWN if v is None else v for k, v in cells.items()}
    if row.get("role") == "slave":
        cells["connected"] = "yes" if row.get("connected") else "no"
        for key in ("acked_offset", "lag_bytes", "lag_seconds"):
            if row.get(key) is None:
                cells[key] = UNKNOWN
    elif row.get("role") == "master" and row.get("slaves_configured"):
        connected = row.get("slaves_connected")
        cells["connected"] = f"{UNKNOWN if connected is None else connected}/{row['slaves_configured']}"
    return cells
