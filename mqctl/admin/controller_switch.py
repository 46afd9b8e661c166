"""Whether a cluster may leave controller mode (``mqctl config set replication.controller
false``): without a controller, broker id 0 is each group's master again, so it must be the
broker that was master last, holding the longest log. Each broker's epoch file (written under
the controller) says which master epochs it served or copied; the broker whose last entry is the
newest epoch is the group's latest master.
"""

from __future__ import annotations

from core.config import Config
from core.errors import StoreCorruptError
from core.store.epoch_checkpoint import EpochCheckpoint


def latest_masters(config: Config) -> dict[str, tuple[str, int, int]]:
    """Per group: (node, broker id, epoch) of the broker that began the newest master epoch
    (its own epoch file's last entry is an epoch no other member's file goes past)."""
    found: dict[str, tuple[str, int, int]] = {}
    for broker in config.brokers:
        try:
            entries = EpochCheckpoint(config.data_dir / broker.node).entries
        except StoreCorruptError:
            continue
        if not entries:
            continue
        epoch = entries[-1].epoch
        best = found.get(broker.name)
        if best is None or epoch > best[2]:
            found[broker.name] = (broker.node, broker.id, epoch)
    return found


def leaving_controller_problem(config: Config) -> str | None:
    """Why turning controller mode off now would start a group with a master that is not the
    last one (which may lack acknowledged messages), or None."""
    wrong = {group: latest for group, latest in latest_masters(config).items() if latest[1] != 0}
    if not wrong:
        return None
    lines = [f"{group}: its last master is {node} (id {broker_id}, epoch {epoch}), not id 0"
             for group, (node, broker_id, epoch) in sorted(wrong.items())]
    groups = " ".join(sorted(wrong))
    return ("without the controller broker id 0 is the master again, and it does not hold the longest log: "
            + "; ".join(lines) + f". Hand the mastership to id 0 first (mqctl failover {groups.split()[0]} --to 0, "
            "for each group, with the cluster running), then turn the controller off")
