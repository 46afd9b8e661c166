"""``mqctl chaos``: a fault drill under load that proves, on this machine, what a replication
mode keeps.

```
 place:  a lab of network namespaces when the machine allows one (a host per node, the drill
         on the client host: mqctl/chaos/lab_cluster.py), else loopback addresses behind fault
         proxies (mqctl/chaos/cluster.py), said in one line
 start:  name server, one broker group (async/sync: master and slave; dledger, controller: 3), a
         proxy with its 4.x and gRPC doors
 run:    client processes of mqctl's client, the stock C++ 4.x client and the official 5.x
         client offer --rate messages a second, each writing its sends and deliveries to a
         journal (mqctl/chaos/workload.py); faults from a seeded schedule, one at a time
         (mqctl/chaos/schedule.py); the master / leader watched
 drain:  stop sending, wait until every acknowledged message is delivered (or nothing more comes)
 judge:  lost, phantom, moved, duplicated, reordered, FIFO order, per queue; unavailability,
         recovery per fault, throughput and latency over time (mqctl/chaos/run.py runs it,
         history.py judges, report.py and timeline.py tell); exit 1 on a broken promise: loss or reordering in sync or dledger mode,
         and in any mode a message delivered that was never sent or away from its acknowledged place
```
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import trio
import typer

from mqctl.chaos.cluster import MEMBERS, DrillCluster, LoopbackCluster
from mqctl.chaos.lab_cluster import LabCluster, lab_hosts
from mqctl.chaos.report import LOSS_ALLOWED, print_report
from mqctl.chaos.run import drill
from mqctl.chaos.schedule import FAULT_KINDS, NEEDS_THREE, parse_faults
from mqctl.chaos.workload import CLIENTS, missing_clients
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.progress import progress_bar
from mqctl.hosts.faults import nft_missing
from mqctl.hosts.lab import Lab, LabError, create_lab, enter, unavailable
from mqctl.hosts.placement import CLIENT_HOST


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m)?", text.strip())
    if not match:
        raise CliError(f"--duration must be seconds or minutes, such as 60s or 10m, not {text!r}")
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


NETS = ("auto", "lab", "loopback")


def chaos(
    mode: Annotated[str, typer.Option(help="Replication mode to drill: async, sync, dledger or controller "
                                                "(sync under a controller).")] = "dledger",
    faults: Annotated[str, typer.Option(help="Comma list of " + ", ".join(FAULT_KINDS) + " (disk-full mounts a "
                                        "tmpfs per broker: root only; one-way, split, bridge, loss and rate need "
                                        "a lab).")] = "kill,pause,partition",
    duration: Annotated[str, typer.Option(help="How long faults are injected (then heal and drain): 60s, 10m.")] = "60s",
    seed: Annotated[int, typer.Option(help="Seed of the fault schedule (the same seed, the same schedule).")] = 1,
    rate: Annotated[int, typer.Option(help="Messages a second offered by all producers together.", min=10,
                                      max=20_000)] = 2400,
    clients: Annotated[str | None, typer.Option(help="Comma list of ours, cpp (the stock C++ 4.x client), rmq5 "
                                                "(the official 5.x client, through the proxy's gRPC door); "
                                                "default: each of them installed here.")] = None,
    net: Annotated[str, typer.Option(help="auto: a lab of network namespaces when this machine allows one, "
                                     "else loopback; lab; loopback.")] = "auto",
    directory: Annotated[Path | None, typer.Option("--dir", help="Where the drill's cluster lives "
                                                   "(default: a temporary folder, removed after).")] = None,
    report_dir: Annotated[Path | None, typer.Option("--report", help="Write DIR/timeline.png (throughput and "
                                                    "latency over time, faults shaded, leader changes marked) "
                                                    "beside DIR/history.json and the clients' journals.")] = None,
    as_json: JsonOutput = False,
) -> None:
    """Run a fault drill under load and check what the mode promises.

    Run a fault drill on a cluster of its own under load and check what the mode promises."""
    if mode not in LOSS_ALLOWED:
        raise CliError(f"--mode must be async, sync, dledger or controller, not {mode!r}")
    if net not in NETS:
        raise CliError(f"--net must be auto, lab or loopback, not {net!r}")
    try:
        kinds = parse_faults(faults)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if MEMBERS[mode] < 3 and (few := [k for k in kinds if k in NEEDS_THREE]):
        raise CliError(f"{', '.join(few)} set members against each other: {mode} mode has two; drop "
                       f"{', '.join(few)} or drill dledger or controller")
    chosen = choose_clients(clients)
    seconds = parse_duration(duration)
    if directory is not None and directory.exists() and any(directory.iterdir()):
        raise CliError(f"--dir {directory} is not empty: a drill starts from nothing (its keys would "
                       "meet an earlier drill's messages)")
    lab = open_drill_lab(net, mode, kinds)
    root = directory or Path(tempfile.mkdtemp(prefix="mqctl-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        cluster: DrillCluster = (LabCluster(root, mode, lab, "delay" in kinds) if lab is not None
                                 else LoopbackCluster(root, mode))
        with client_log(root / "chaos.log"), \
                progress_bar(f"chaos drill, {mode}", seconds, quiet=as_json) as bar:
            found = trio.run(drill, cluster, kinds, seconds, seed, rate, chosen, report_dir, bar)
    except BaseException:
        if directory is None:
            shutil.rmtree(root, ignore_errors=True)
        raise
    finally:
        if lab is not None:
            lab.destroy()
    # the evidence stays when a promise was broken: the nodes' stores and logs, the clients' journals
    keep = directory is not None or bool(found["broken_promises"])
    found["kept"] = str(root) if keep else None
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    if as_json:
        typer.echo(json.dumps(found))  # one object on one line, as every --json prints
    else:
        print_report(found)
    if found["broken_promises"]:
        raise typer.Exit(1)


def choose_clients(text: str | None) -> tuple[str, ...]:
    """The client kinds of the workload: those asked for (each must be installed), or each
    installed one (saying which are not)."""
    asked = tuple(c.strip() for c in (text or ",".join(CLIENTS)).split(",") if c.strip())
    unknown = [c for c in asked if c not in CLIENTS]
    if unknown or not asked:
        raise CliError(f"--clients must be a comma list of {', '.join(CLIENTS)}, not {text!r}")
    missing = missing_clients(asked)
    if text is not None and missing:
        raise CliError("; ".join(missing.values()))
    for why in missing.values():
        typer.echo(f"chaos: without that client: {why}", err=True)
    return tuple(c for c in asked if c not in missing)


def open_drill_lab(net: str, mode: str, kinds: tuple[str, ...]) -> Lab | None:
    """A lab for the drill, this process moved onto its client host (before any thread starts);
    None on loopback, said in one line when it is a fallback."""
    why = None if net == "loopback" else (unavailable() or nft_missing())
    if net == "lab" and why:
        raise CliError(f"--net lab: {why}")
    if net == "loopback" or why:
        if why:
            typer.echo(f"chaos: no lab here ({why}): the nodes run on loopback addresses, partitions and "
                       "delay go through fault proxies", err=True)
        needs_lab = [k for k in kinds if k not in LoopbackCluster.kinds]
        if needs_lab:
            raise CliError(f"{', '.join(needs_lab)} need a lab of network namespaces"
                           + (f" ({why})" if why else " (--net auto or lab)"))
        return None
    try:
        lab = create_lab([])
    except LabError as exc:
        raise CliError(f"the drill's lab could not be made: {exc}") from None
    try:
        for name, octet in lab_hosts(mode):
            lab.add_host(name, octet)
        enter(lab.host(CLIENT_HOST).namespace)
    except LabError as exc:
        lab.destroy()
        raise CliError(f"the drill's lab could not be made: {exc}") from None
    except BaseException:
        lab.destroy()
        raise
    return lab


@contextlib.contextmanager
def client_log(path: Path) -> Iterator[None]:
    """The drill's own warnings go to a file beside the nodes' logs, not into the report."""
    root = logging.getLogger()
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = root.handlers[:]
    root.handlers = [handler]
    try:
        yield
    finally:
        root.handlers = saved
        handler.close()
