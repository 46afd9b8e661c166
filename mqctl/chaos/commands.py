"""``mqctl chaos``: a fault drill under load that proves, on this machine, what a replication
mode keeps.

```
 place:  a lab of network namespaces when the machine allows one (a host per node, the drill
         on the client host: mqctl/chaos/lab_cluster.py), else loopback addresses behind fault
         proxies (mqctl/chaos/cluster.py), said in one line
 start:  name server, one broker group (async/sync: master and slave; dledger: 3 members), a
         proxy with its 4.x and gRPC doors
 run:    client processes of mqctl's client, the stock C++ 4.x client and the official 5.x
         client offer --rate messages a second, each writing its sends and deliveries to a
         journal (mqctl/chaos/workload.py); faults from a seeded schedule, one at a time
         (mqctl/chaos/schedule.py); the master / leader watched
 drain:  stop sending, wait until every acknowledged message is delivered (or nothing more comes)
 judge:  lost, phantom, moved, duplicated, reordered, FIFO order, per queue; unavailability,
         recovery per fault, throughput and latency over time (mqctl/chaos/history.py,
         timeline.py); exit 1 on a broken promise: loss or reordering in sync or dledger mode,
         and in any mode a message delivered that was never sent or away from its acknowledged place
```
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from core.errors import RemotingError
from core.nursery import open_unwrapped_nursery
from core.remoting.codes import ResponseCode
from mqctl.admin.topic import create_topic_request
from mqctl.chaos.cluster import (
    AUTO_RENEW_SLICE_MS,
    GROUP,
    MEMBERS,
    START_TIMEOUT_S,
    DrillCluster,
    LoopbackCluster,
)
from mqctl.chaos.cpu import CpuMeter
from mqctl.chaos.history import FaultSpan, Verdict, check_history
from mqctl.chaos.lab_cluster import LabCluster, lab_hosts
from mqctl.chaos.schedule import (
    FAULT_KINDS,
    LEADER,
    NEEDS_THREE,
    WARMUP_SECONDS,
    PlannedFault,
    parse_faults,
    plan_faults,
)
from mqctl.chaos.timeline import timeline, write_report
from mqctl.chaos.workload import (
    CLIENTS,
    QUEUES,
    TOPIC,
    TOPIC5,
    Endpoints,
    WorkerSpec,
    Workload,
    missing_clients,
    plan_workload,
)
from mqctl.common import probe
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.progress import Bar, progress_bar
from mqctl.hosts.faults import nft_missing
from mqctl.hosts.lab import Lab, create_lab, enter, unavailable
from mqctl.hosts.placement import CLIENT_HOST

DRAIN_TIMEOUT_S = 120.0
DRAIN_QUIET_S = 15.0  # no delivery for this long ends the drain early
# ... longer with a POP consumer: a message popped from a leader that died before answering
# comes back once its invisible time (the proxy's auto-renew slice for the 5.x push consumer) passed
DRAIN_QUIET_POP_S = AUTO_RENEW_SLICE_MS / 1000 + 20.0
LOSS_ALLOWED = {"async": True, "sync": False, "dledger": False}
REASONS_SHOWN = 5  # the most frequent reasons a report prints (--json has them all)


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m)?", text.strip())
    if not match:
        raise CliError(f"--duration must be seconds or minutes, such as 60s or 10m, not {text!r}")
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


NETS = ("auto", "lab", "loopback")


def chaos(
    mode: Annotated[str, typer.Option(help="Replication mode to drill: async, sync or dledger.")] = "dledger",
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
    """Run a fault drill on a cluster of its own under load and check what the mode promises."""
    if mode not in LOSS_ALLOWED:
        raise CliError(f"--mode must be async, sync or dledger, not {mode!r}")
    if net not in NETS:
        raise CliError(f"--net must be auto, lab or loopback, not {net!r}")
    try:
        kinds = parse_faults(faults)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if MEMBERS[mode] < 3 and (few := [k for k in kinds if k in NEEDS_THREE]):
        raise CliError(f"{', '.join(few)} set members against each other: {mode} mode has two; drop "
                       f"{', '.join(few)} or drill dledger")
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
    lab = create_lab([])
    try:
        for name, octet in lab_hosts(mode):
            lab.add_host(name, octet)
        enter(lab.host(CLIENT_HOST).namespace)
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


async def drill(cluster: DrillCluster, kinds: tuple[str, ...], seconds: float, seed: int, rate: int,
                clients: tuple[str, ...], report_dir: Path | None, bar: Bar | None = None) -> dict[str, Any]:
    plan = plan_faults(seed, kinds, [LEADER, *(m.node for m in cluster.members)], seconds)
    spans: list[FaultSpan] = []
    leaders: list[tuple[float, str]] = []
    proxy_door, grpc_door = cluster.proxy_doors
    endpoints = Endpoints(cluster.namesrv, proxy_door, grpc_door, GROUP)
    specs = plan_workload(rate, clients, endpoints)
    (cluster.path.parent / "clients").mkdir(exist_ok=True)
    workload: Workload | None = None
    meter = CpuMeter()
    async with open_unwrapped_nursery() as proxies:
        proxies.start_soon(_stop_on_sigterm)
        try:
            if "disk-full" in kinds:
                cluster.mount_disks()
            await cluster.serve_proxies(proxies)
            await trio.to_thread.run_sync(cluster.start)
            await create_topics(cluster.namesrv)
            t0 = time.time()
            workload = Workload(specs, endpoints, cluster.path.parent / "clients", t0)
            await trio.to_thread.run_sync(workload.start, "consume")
            await trio.to_thread.run_sync(workload.start, "produce")
            started = trio.current_time() - (time.time() - t0)  # the journals' zero on trio's clock
            meter.begin(cluster.pids() | workload.pids())
            async with trio.open_nursery() as watchers:
                watchers.start_soon(_collect, workload)
                watchers.start_soon(_watch_leader, cluster, t0, leaders)
                if bar is not None:
                    watchers.start_soon(_show_time, bar, started, seconds)
                for fault in plan:
                    await trio.sleep_until(started + fault.at)
                    spans.append(await inject(cluster, fault, t0, leaders))
                    if bar is not None:
                        bar.note(f"{spans[-1].started:7.2f} s  {spans[-1].kind} of {spans[-1].target}, healed")
                await trio.sleep_until(started + seconds)
                meter.end(cluster.pids() | workload.pids())
                await trio.to_thread.run_sync(workload.stop, "produce")
                if bar is not None:
                    bar.update(description="draining: every acknowledged message delivered?")
                await drain(workload, DRAIN_QUIET_POP_S if "rmq5" in clients else DRAIN_QUIET_S)
                await trio.to_thread.run_sync(workload.stop, "consume")
                watchers.cancel_scope.cancel()
            died = workload.died()
        finally:
            with trio.CancelScope(shield=True):  # also when the drill was cancelled (Ctrl-C, an error)
                if workload is not None:
                    await trio.to_thread.run_sync(workload.close)
                await trio.to_thread.run_sync(cluster.stop)
            proxies.cancel_scope.cancel()
    fifo = [s.name for s in specs if s.fifo]
    verdict = check_history(workload.attempts, workload.deliveries, spans, fifo)
    found = report(cluster, seed, kinds, seconds, rate, specs, spans, verdict, leaders)
    found["per_client"] = per_client(workload, specs)
    found["timeline"] = rows = timeline(workload.attempts, seconds)
    found["throughput"] = _throughput(rows, spans, seconds)
    found["cpu"] = meter.per_message(sum(int(r["acknowledged"]) for r in rows if r["t"] < seconds))
    if died:
        found["broken_promises"].append("client process(es) died: " + "; ".join(died))
    if report_dir is not None:
        write_report(report_dir, {k: v for k, v in found.items() if k != "timeline"}, rows, spans, leaders,
                     [r.journal.path for r in workload.running])
    return found


def per_client(workload: Workload, specs: list[WorkerSpec]) -> dict[str, dict[str, int]]:
    """Each producer's sends and acknowledgements, each consumer's deliveries."""
    out: dict[str, dict[str, int]] = {s.name: {} for s in specs}
    for a in workload.attempts:
        row = out.setdefault(a.producer, {})
        row["attempted"] = row.get("attempted", 0) + 1
        row["acknowledged"] = row.get("acknowledged", 0) + (a.outcome == "ok")
    for d in workload.deliveries:
        row = out.setdefault(d.consumer, {})
        row["delivered"] = row.get("delivered", 0) + 1
    return out


async def create_topics(namesrv: list[str]) -> None:
    """The workload's topics on the group's master, known to the name server."""
    deadline = trio.current_time() + START_TIMEOUT_S
    for topic in (TOPIC, TOPIC5):
        while True:
            info = await probe.cluster_info(namesrv)
            master = ((info or {}).get("brokerAddrTable", {}).get(GROUP, {}).get("brokerAddrs", {}).get("0"))
            if master is not None:
                with contextlib.suppress(OSError, RemotingError, trio.TooSlowError):
                    done = await probe.call(master, create_topic_request(topic, QUEUES))
                    if done.code == ResponseCode.SUCCESS:
                        break
            if trio.current_time() > deadline:
                raise CliError(f"the drill could not create topic {topic} on {GROUP}'s master")
            await trio.sleep(0.5)


async def _collect(workload: Workload) -> None:
    while True:
        workload.collect()
        await trio.sleep(0.5)


async def _watch_leader(cluster: DrillCluster, t0: float, leaders: list[tuple[float, str]]) -> None:
    """The group's master (raft leader) as the name server names it, each change with its time."""
    by_address = {m.advertise: m.node for m in cluster.members} | {m.listen: m.node for m in cluster.members}
    while True:
        with contextlib.suppress(OSError, RemotingError, trio.TooSlowError):
            info = await probe.cluster_info(cluster.namesrv)
            address = (info or {}).get("brokerAddrTable", {}).get(GROUP, {}).get("brokerAddrs", {}).get("0")
            node = by_address.get(address, address) if address else "none"
            if not leaders or leaders[-1][1] != node:
                leaders.append((round(time.time() - t0, 3), node))
        await trio.sleep(1.0)


async def _show_time(bar: Bar, started: float, seconds: float) -> None:
    """The drill's elapsed seconds on its bar, until the faults end."""
    while (elapsed := trio.current_time() - started) < seconds:
        bar.update(completed=elapsed)
        await trio.sleep(0.5)
    bar.update(completed=seconds)


async def _stop_on_sigterm() -> None:
    """SIGTERM ends the drill like Ctrl-C does: its nodes are stopped and its disks unmounted."""
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            raise CliError("the drill was stopped (SIGTERM)")


async def inject(cluster: DrillCluster, fault: PlannedFault, t0: float, leaders: list[tuple[float, str]]) -> FaultSpan:
    """Inject ``fault``, hold it for its time, heal it; the span as it happened. A fault of the
    LEADER hits the member the name server last named master (the first member when none)."""
    hurt, heal = cluster.actions()[fault.kind]
    nodes = [m.node for m in cluster.members]
    current = next((node for _, node in reversed(leaders) if node in nodes), None)
    target = (current or nodes[0]) if fault.target == LEADER else fault.target

    async def do(step: Callable[[str], None]) -> None:
        if fault.kind in cluster.in_loop:
            step(target)
        else:
            await trio.to_thread.run_sync(step, target)

    began = round(time.time() - t0, 3)
    await do(hurt)
    await trio.sleep(fault.lasts)
    await do(heal)
    return FaultSpan(fault.kind, target, began, round(time.time() - t0, 3), was_leader=target == current)


async def drain(workload: Workload, quiet_s: float) -> None:
    """Wait until every acknowledged message was delivered, or nothing arrived for a while."""
    deadline = trio.current_time() + DRAIN_TIMEOUT_S
    last_count, last_change = -1, trio.current_time()
    while trio.current_time() < deadline:
        workload.collect()
        acked = {a.key for a in workload.attempts if a.outcome == "ok"}
        if acked <= {d.key for d in workload.deliveries}:
            return
        if len(workload.deliveries) != last_count:
            last_count, last_change = len(workload.deliveries), trio.current_time()
        elif trio.current_time() - last_change > quiet_s:
            return
        await trio.sleep(0.5)


def _throughput(rows: list[dict[str, float]], spans: list[FaultSpan], seconds: float) -> dict[str, float]:
    """Acknowledged sends a second over the drill, outside the faults and during them, and
    the acknowledged sends' latency quantiles over the drill."""
    inside = [r for r in rows if r["t"] < seconds and any(s.started - 1 <= r["t"] <= s.healed for s in spans)]
    outside = [r for r in rows if r["t"] < seconds and r not in inside and r["t"] >= WARMUP_SECONDS]
    def mean(rs: list[dict[str, float]]) -> float:
        return round(sum(r["acknowledged"] for r in rs) / len(rs), 1) if rs else 0.0
    return {"acked_per_s": mean([r for r in rows if WARMUP_SECONDS <= r["t"] < seconds]),
            "acked_per_s_between_faults": mean(outside), "acked_per_s_during_faults": mean(inside)}


def report(cluster: DrillCluster, seed: int, kinds: tuple[str, ...], seconds: float, rate: int,
           specs: list[WorkerSpec], spans: list[FaultSpan], verdict: Verdict,
           leaders: list[tuple[float, str]]) -> dict[str, Any]:
    loss_allowed = LOSS_ALLOWED[cluster.mode]
    return {"mode": cluster.mode, "seed": seed, "faults": list(kinds), "duration_s": seconds, "net": cluster.where,
            "rate_offered": rate,
            "clients": [{"name": s.name, "client": s.client, "role": s.role, "topic": s.topic, "group": s.group,
                         "rate": round(s.rate, 1)} for s in specs],
            "injected": [{"kind": s.kind, "target": s.target, "was_leader": s.was_leader, "started": s.started,
                          "healed": s.healed} for s in spans],
            "leaders": [{"at": t, "node": n} for t, n in leaders],
            **verdict.summary(), "loss_allowed": loss_allowed,
            "broken_promises": verdict.broken_promises(loss_allowed)}


def print_report(r: dict[str, Any]) -> None:
    echo = typer.echo
    echo(f"chaos drill: mode {r['mode']}, seed {r['seed']}, faults {','.join(r['faults'])}, {r['duration_s']:.0f} s, "
         f"{r['rate_offered']} msgs/s offered")
    echo(f"  nodes {r['net']}")
    for c in r["clients"]:
        got = r["per_client"].get(c["name"], {})
        did = (f"offered {c['rate']:.0f}/s, {got.get('attempted', 0)} sent, {got.get('acknowledged', 0)} acknowledged"
               if c["role"] == "produce" else f"{got.get('delivered', 0)} delivered")
        echo(f"  client {c['name']:<8} {c['client']:<4} {c['role']:<7} {c['topic']:<11} {c['group']:<10} {did}")
    for s in r["injected"]:
        leader = " (master/leader)" if s["was_leader"] else ""
        echo(f"  {s['started']:7.2f} s  {s['kind']:<9} {s['target'] + leader:<28} healed at {s['healed']:.2f} s")
    echo(f"sends: {r['attempts']} attempted, {r['acknowledged']} acknowledged, {r['unknown']} unknown, "
         f"{r['failed']} refused; deliveries: {r['delivered']}")
    t = r["throughput"]
    echo(f"  acknowledged a second: {t['acked_per_s']} over the drill, {t['acked_per_s_between_faults']} between "
         f"faults, {t['acked_per_s_during_faults']} during them")
    ok = [row for row in r["timeline"] if row["acknowledged"]]
    if ok:
        worst = max(ok, key=lambda row: row["p99_ms"])
        echo(f"  latency of acknowledged sends, per second: p50 {sorted(x['p50_ms'] for x in ok)[len(ok) // 2]} ms "
             f"(median second), worst p99 {worst['p99_ms']} ms at {worst['t']:.0f} s")
    if r["cpu"]:
        echo("  CPU over the load, us per acknowledged message: "
             + ", ".join(f"{name} {c['us_per_ack']}" for name, c in r["cpu"].items()))
    if r["leaders"]:
        echo("  master / leader: " + ", ".join(f"{x['node']} from {x['at']:.1f} s" for x in r["leaders"]))
    if r["reasons"]:
        echo("  not acknowledged, by what the producer was told:")
        for why, count in list(r["reasons"].items())[:REASONS_SHOWN]:
            echo(f"  {count:>8}  {why}")
    for name in ("lost", "phantom", "moved", "duplicated", "reordered", "fifo_broken"):
        finding = r[name]
        examples = f"  e.g. {', '.join(finding['examples'][:5])}" if finding["count"] else ""
        echo(f"  {name:<11} {finding['count']}{examples}")
    if r["loss_window"]:
        first, last = r["loss_window"]
        echo(f"  loss window: messages acknowledged from {first:.2f} s to {last:.2f} s were lost"
             f"{' (allowed in async mode)' if r['loss_allowed'] else ''}")
    echo("  per queue: acknowledged / delivered (findings)")
    for queue, row in r["per_queue"].items():
        found = ", ".join(f"{k} {v}" for k, v in row.items() if k not in ("acknowledged", "delivered") and v)
        echo(f"    {queue:<24} {row.get('acknowledged', 0):>8} / {row.get('delivered', 0):<8} {found}")
    for w in r["unavailable"]:
        until = f"{w['ended']:.2f} s ({w['seconds']:.2f} s)" if w["ended"] is not None else "the end"
        top = next(iter(w["reasons"].items()), None)
        mostly = f" (mostly: {top[0]}, {top[1]})" if top else ""
        echo(f"  unavailable from {w['started']:.2f} s to {until}: {w['attempts']} sends not acknowledged{mostly}")
    for rec in r["recoveries"]:
        after = f"{rec['first_ack_after_heal_s']:.2f} s" if rec["first_ack_after_heal_s"] is not None else "never"
        echo(f"  {rec['fault']} of {rec['target']}: {rec['acked_during']} sends acknowledged during it, "
             f"the first acknowledgement {after} after the heal")
    echo("verdict: " + ("; ".join(r["broken_promises"]) if r["broken_promises"] else "every promise kept"))
    if r.get("kept"):
        echo(f"the drill's cluster, stores and logs: {r['kept']}")
