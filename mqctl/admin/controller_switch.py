"""Whether a cluster may leave controller mode (``mqctl config set replication.controller
false``): without a controller, broker id 0 is each group's master again, so it must be the
broker that was master last, holding the longest log. Each broker notes the newest master epoch
it served as master (``masterEpoch`` in its store; slaves copy the epoch file, so that alone
does not tell); the broker with the newest is the group's latest master.
"""

from __future__ import annotations

from core.config import Config
from core.store.epoch_checkpoint import master_epoch_served


def latest_masters(config: Config) -> dict[str, tuple[str, int, int]]:
    """Per group: (node, broker id, epoch) of the broker that served the newest master epoch."""
    found: dict[str, tuple[str, int, int]] = {}
    for broker in config.brokers:
        epoch = master_epoch_served(config.data_dir / broker.node)
        best = found.get(broker.name)
        if epoch and (best is None or epoch > best[2]):
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
