"""A cluster whose nodes are hosts of a lab (``[cluster] lab = N`` in conf.toml): each node
address (10.231.N.<octet>) is a host of its own, ``h<octet>``, and mqctl's own commands run on a
client host, 10.231.N.2, so nodes and clients talk over the bridge as separate machines would.

```
 mqctl start   the lab is made (owned by the config: it outlives the command), each node is
               started with ``ip netns exec mqlabN-h<octet>``, then the command goes on from the
               client host
 mqctl ...     any other command re-runs itself on the client host (same arguments)
 mqctl stop    the nodes stop, then the lab is deleted (a stop of every node of the config)
```
"""

from __future__ import annotations

import ipaddress
import os
import sys

from core.addresses import split_address
from core.config import Config
from mqctl.hosts.lab import PREFIX, SUBNET, Lab, LabError, create_lab, open_lab, unavailable

CLIENT_HOST = "client"
CLIENT_OCTET = 2
IN_LAB_ENV = "MQCTL_IN_LAB"  # set on the client host's re-run, so it never runs itself again


def lab_number(config: Config) -> int | None:
    return config.cluster.lab if config.cluster.lab >= 0 else None


def node_octets(config: Config) -> dict[str, int]:
    """Each node's host octet, from its listen address (LabError for an address outside the
    lab's subnet, or one no node of a lab may use)."""
    number = lab_number(config)
    assert number is not None
    listens = [(ns.name, ns.listen) for ns in config.nameservers] + [(b.node, b.listen) for b in config.brokers]
    listens += [(p.name, p.listen) for p in config.proxies]
    out = {}
    for name, listen in listens:
        try:
            ip = ipaddress.IPv4Address(split_address(listen)[0])
        except ValueError:
            raise LabError(f"{name} listens on {listen}: a lab node needs an address in {SUBNET}.{number}.0/24") from None
        prefix, octet = str(ip).rsplit(".", 1)
        if prefix != f"{SUBNET}.{number}" or not 10 <= int(octet) <= 254:
            raise LabError(f"{name} listens on {listen}: lab {number}'s nodes take {SUBNET}.{number}.10-254")
        out[name] = int(octet)
    return out


def namespace_of(config: Config, node: str) -> str:
    return f"{PREFIX}{lab_number(config)}-h{node_octets(config)[node]}"


def node_argv(config: Config, node: str, argv: list[str]) -> list[str]:
    """``argv`` as it runs for ``node``: on its host when the config has a lab."""
    if lab_number(config) is None:
        return argv
    return ["ip", "netns", "exec", namespace_of(config, node), *argv]


def start_lab(config: Config) -> Lab:
    """The config's lab, made when it is not up: a host per node address and the client host."""
    number = lab_number(config)
    assert number is not None
    why = unavailable()
    if why:
        raise LabError(f"[cluster] lab = {number}: {why}")
    lab = open_lab(number)
    if lab is not None:
        return lab
    octets = sorted(set(node_octets(config).values()))
    lab = create_lab([], number, owner=f"config:{config.source}")
    try:
        for octet in octets:
            lab.add_host(f"h{octet}", octet)
        lab.add_host(CLIENT_HOST, CLIENT_OCTET)
    except BaseException:
        lab.destroy()
        raise
    return lab


def stop_lab(config: Config) -> bool:
    """Delete the config's lab; whether it was up."""
    number = lab_number(config)
    lab = open_lab(number) if number is not None else None
    if lab is None:
        return False
    lab.destroy()
    return True


def run_on_client_host(config: Config, *, make: bool) -> None:
    """Re-run this command on the config's client host (it does not return) when the config
    has a lab and this process is not on it; ``make``: make the lab first when it is not up
    (``mqctl start``). Without the lab up and ``make`` false, the command runs here (its nodes
    are not running: it finds nothing)."""
    number = lab_number(config)
    if number is None or os.environ.get(IN_LAB_ENV):
        return
    lab = start_lab(config) if make else open_lab(number)
    if lab is None or CLIENT_HOST not in lab.hosts:
        return
    os.environ[IN_LAB_ENV] = lab.host(CLIENT_HOST).namespace
    sys.stdout.flush()
    sys.stderr.flush()
    argv = lab.command(CLIENT_HOST, [sys.executable, "-m", "mqctl", *sys.argv[1:]])
    os.execvp(argv[0], argv)
