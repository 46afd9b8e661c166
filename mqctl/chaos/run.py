"""A chaos drill's run on its cluster: start the nodes and the workload, inject the schedule's
faults one at a time while watching the master / leader, stop sending, drain, and judge
(mqctl/chaos/history.py, report.py)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from core.errors import RemotingError
from core.nursery import open_unwrapped_nursery
from core.remoting.codes import ResponseCode
from mqctl.admin.topic import create_topic_request
from mqctl.chaos.cluster import AUTO_RENEW_SLICE_MS, GROUP, START_TIMEOUT_S, DrillCluster
from mqctl.chaos.cpu import CpuMeter
from mqctl.chaos.history import FaultSpan, check_history
from mqctl.chaos.report import per_client, report, throughput
from mqctl.chaos.schedule import LEADER, PlannedFault, plan_faults
from mqctl.chaos.timeline import timeline, write_report
from mqctl.chaos.workload import QUEUES, TOPIC, TOPIC5, Endpoints, Workload, plan_workload
from mqctl.common import probe
from mqctl.common.errors import CliError
from mqctl.common.progress import Bar

DRAIN_TIMEOUT_S = 120.0
DRAIN_QUIET_S = 15.0  # no delivery for this long ends the drain early
# ... longer with a POP consumer: a message popped from a leader that died before answering
# comes back once its invisible time (the proxy's auto-renew slice for the 5.x push consumer) passed
DRAIN_QUIET_POP_S = AUTO_RENEW_SLICE_MS / 1000 + 20.0


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
                        bar.note(f"{spans[-1].started:7.2f} s  {spans[-1].kind} of {spans[-1].target}, "
                                 + (f"NOT healed: {spans[-1].heal_failed.splitlines()[0]}" if spans[-1].heal_failed
                                    else "healed"))
                    if spans[-1].heal_failed:
                        break  # no more faults on a broken cluster; the load runs its time
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
    found["throughput"] = throughput(rows, spans, seconds)
    found["cpu"] = meter.per_message(sum(int(r["acknowledged"]) for r in rows if r["t"] < seconds))
    found["clients_stopped_uncleanly"] = workload.unclean
    if died:
        found["broken_promises"].append("client process(es) died during the drill: " + "; ".join(died))
    if report_dir is not None:
        write_report(report_dir, {k: v for k, v in found.items() if k != "timeline"}, rows, spans, leaders,
                     [r.journal.path for r in workload.running])
    return found


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

    await do(hurt)
    began = round(time.time() - t0, 3)  # in force from here: an nft rule or a restart takes a moment
    await trio.sleep(fault.lasts)
    heal_began = round(time.time() - t0, 3)
    failed = None
    try:
        await do(heal)
    except CliError as exc:  # a node that does not come back is the drill's finding, not its end
        failed = str(exc)
    return FaultSpan(fault.kind, target, began, round(time.time() - t0, 3), heal_began=heal_began,
                     was_leader=target == current, heal_failed=failed)


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
