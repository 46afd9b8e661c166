"""``mqctl chaos``: a fault drill that proves, on this machine, what a replication mode keeps.

```
 start:  name server + one broker group (async/sync: master and slave; dledger: 3 members),
         every broker behind fault proxies (mqctl/chaos/cluster.py)
 run:    4 producers record every send attempt, a consumer group every delivery
         (mqctl/chaos/traffic.py); faults from a seeded schedule (mqctl/chaos/schedule.py):
         kill -> restart, pause -> resume, partition -> reconnect, disk-full -> free, one at a time
 drain:  stop sending, wait until every acknowledged message is delivered (or nothing more comes)
 judge:  lost, phantom, moved, duplicated, reordered, unavailability, recovery per fault
         (mqctl/chaos/history.py); exit 1 on a broken promise: loss in sync or dledger mode,
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from core.client.runtime import open_client
from core.nursery import open_unwrapped_nursery
from mqctl.chaos.cluster import GROUP, DrillCluster
from mqctl.chaos.history import FaultSpan, Verdict, check_history
from mqctl.chaos.schedule import PlannedFault, parse_faults, plan_faults
from mqctl.chaos.traffic import SENDERS, History, produce, start_consumer
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.progress import Bar, progress_bar

DRAIN_TIMEOUT_S = 60.0
DRAIN_QUIET_S = 15.0  # no delivery for this long ends the drain early
LOSS_ALLOWED = {"async": True, "sync": False, "dledger": False}
REASONS_SHOWN = 5  # the most frequent reasons a report prints (--json has them all)


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m)?", text.strip())
    if not match:
        raise CliError(f"--duration must be seconds or minutes, such as 60s or 10m, not {text!r}")
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


def chaos(
    mode: Annotated[str, typer.Option(help="Replication mode to drill: async, sync or dledger.")] = "dledger",
    faults: Annotated[str, typer.Option(help="Comma list of kill, pause, partition, disk-full "
                                        "(disk-full mounts a tmpfs per broker: root only).")] = "kill,pause,partition",
    duration: Annotated[str, typer.Option(help="How long faults are injected (then heal and drain): 60s, 10m.")] = "60s",
    seed: Annotated[int, typer.Option(help="Seed of the fault schedule (the same seed, the same schedule).")] = 1,
    directory: Annotated[Path | None, typer.Option("--dir", help="Where the drill's cluster lives "
                                                   "(default: a temporary folder, removed after).")] = None,
    as_json: JsonOutput = False,
) -> None:
    """Run a fault drill on a cluster of its own and check that no acknowledged message is lost."""
    if mode not in LOSS_ALLOWED:
        raise CliError(f"--mode must be async, sync or dledger, not {mode!r}")
    try:
        kinds = parse_faults(faults)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    seconds = parse_duration(duration)
    if directory is not None and directory.exists() and any(directory.iterdir()):
        raise CliError(f"--dir {directory} is not empty: a drill starts from nothing (its keys would "
                       "meet an earlier drill's messages)")
    root = directory or Path(tempfile.mkdtemp(prefix="mqctl-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        with client_log(root / "chaos.log"), \
                progress_bar(f"chaos drill, {mode}", seconds, quiet=as_json) as bar:
            found = trio.run(drill, root, mode, kinds, seconds, seed, bar)
    except BaseException:
        if directory is None:
            shutil.rmtree(root, ignore_errors=True)
        raise
    # the evidence stays when a promise was broken: the nodes' stores and logs, the client's log
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


@contextlib.contextmanager
def client_log(path: Path) -> Iterator[None]:
    """The drill's own client warnings (failed sends, rebalances during a partition) go to a
    file beside the nodes' logs, not into the report."""
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


async def drill(root: Path, mode: str, kinds: tuple[str, ...], seconds: float, seed: int,
                bar: Bar | None = None) -> dict[str, Any]:
    cluster = DrillCluster(root, mode)
    plan = plan_faults(seed, kinds, [m.node for m in cluster.members], seconds)
    spans: list[FaultSpan] = []
    async with open_unwrapped_nursery() as proxies:
        proxies.start_soon(_stop_on_sigterm)
        try:
            if "disk-full" in kinds:
                cluster.mount_disks()
            await cluster.serve_proxies(proxies)
            await trio.to_thread.run_sync(cluster.start)
            history = History(trio.current_time(), GROUP)
            async with open_client(cluster.namesrv, instance="chaos") as runtime:
                sending = trio.Event()
                async with trio.open_nursery() as traffic:
                    for sender in range(SENDERS):
                        traffic.start_soon(produce, runtime, history, sending, sender)
                    consumer = await start_consumer(runtime, history)
                    if bar is not None:
                        traffic.start_soon(_show_time, bar, history.t0, seconds)
                    for fault in plan:
                        await trio.sleep_until(history.t0 + fault.at)
                        spans.append(await inject(cluster, fault, history))
                        if bar is not None:
                            bar.note(f"{spans[-1].started:7.2f} s  {spans[-1].kind} of {spans[-1].target}, healed")
                    await trio.sleep_until(history.t0 + seconds)
                    sending.set()
                if bar is not None:
                    bar.update(description="draining: every acknowledged message delivered?")
                await drain(history)
                await consumer.stop()
        finally:
            with trio.CancelScope(shield=True):  # also when the drill was cancelled (Ctrl-C, an error)
                await trio.to_thread.run_sync(cluster.stop)
            proxies.cancel_scope.cancel()
    verdict = check_history(history.attempts, history.deliveries, spans)
    return report(mode, seed, kinds, seconds, spans, verdict)


async def _show_time(bar: Bar, t0: float, seconds: float) -> None:
    """The drill's elapsed seconds on its bar, until the faults end."""
    while (elapsed := trio.current_time() - t0) < seconds:
        bar.update(completed=elapsed)
        await trio.sleep(0.5)
    bar.update(completed=seconds)


async def _stop_on_sigterm() -> None:
    """SIGTERM ends the drill like Ctrl-C does: its nodes are stopped and its disks unmounted."""
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            raise CliError("the drill was stopped (SIGTERM)")


async def inject(cluster: DrillCluster, fault: PlannedFault, history: History) -> FaultSpan:
    """Inject ``fault``, hold it for its time, heal it; the span as it happened."""
    # per kind: inject, heal, and whether they block (process work runs in a thread; the
    # proxies belong to this loop)
    actions: dict[str, tuple[Callable[[str], None], Callable[[str], None], bool]] = {
        "kill": (cluster.kill, cluster.restart, True),
        "pause": (cluster.pause, cluster.resume, True),
        "disk-full": (cluster.fill_disk, cluster.free_disk, True),
        "partition": (cluster.isolate, cluster.reconnect, False),
    }
    hurt, heal, blocking = actions[fault.kind]

    async def do(step: Callable[[str], None]) -> None:
        if blocking:
            await trio.to_thread.run_sync(step, fault.target)
        else:
            step(fault.target)

    started = history.now()
    await do(hurt)
    await trio.sleep(fault.lasts)
    await do(heal)
    return FaultSpan(fault.kind, fault.target, started, history.now())


async def drain(history: History) -> None:
    """Wait until every acknowledged message was delivered, or nothing arrived for a while."""
    deadline = trio.current_time() + DRAIN_TIMEOUT_S
    last_count, last_change = -1, trio.current_time()
    while trio.current_time() < deadline:
        if history.acked_keys() <= history.delivered_keys:
            return
        if len(history.deliveries) != last_count:
            last_count, last_change = len(history.deliveries), trio.current_time()
        elif trio.current_time() - last_change > DRAIN_QUIET_S:
            return
        await trio.sleep(0.2)


def report(mode: str, seed: int, kinds: tuple[str, ...], seconds: float, spans: list[FaultSpan],
           verdict: Verdict) -> dict[str, Any]:
    return {"mode": mode, "seed": seed, "faults": list(kinds), "duration_s": seconds,
            "injected": [{"kind": s.kind, "target": s.target, "started": s.started, "healed": s.healed}
                         for s in spans],
            **verdict.summary(), "loss_allowed": LOSS_ALLOWED[mode],
            "broken_promises": verdict.broken_promises(LOSS_ALLOWED[mode])}


def print_report(r: dict[str, Any]) -> None:
    echo = typer.echo
    echo(f"chaos drill: mode {r['mode']}, seed {r['seed']}, faults {','.join(r['faults'])}, {r['duration_s']:.0f} s")
    for s in r["injected"]:
        echo(f"  {s['started']:7.2f} s  {s['kind']:<9} {s['target']:<12} healed at {s['healed']:.2f} s")
    echo(f"sends: {r['attempts']} attempted, {r['acknowledged']} acknowledged, {r['unknown']} unknown, "
         f"{r['failed']} refused; deliveries: {r['delivered']}")
    if r["reasons"]:
        echo("  not acknowledged, by what the producer was told:")
        for why, count in list(r["reasons"].items())[:REASONS_SHOWN]:
            echo(f"  {count:>8}  {why}")
    for name in ("lost", "phantom", "moved", "duplicated", "reordered"):
        finding = r[name]
        examples = f"  e.g. {', '.join(finding['examples'][:5])}" if finding["count"] else ""
        echo(f"  {name:<11} {finding['count']}{examples}")
    if r["loss_window"]:
        first, last = r["loss_window"]
        echo(f"  loss window: messages acknowledged from {first:.2f} s to {last:.2f} s were lost"
             f"{' (allowed in async mode)' if r['loss_allowed'] else ''}")
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
