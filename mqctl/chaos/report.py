"""A chaos drill's report: the figures and findings as one JSON-ready dict, and as text."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import typer

from mqctl.chaos.cluster import DrillCluster
from mqctl.chaos.history import FaultSpan, Verdict
from mqctl.chaos.schedule import WARMUP_SECONDS
from mqctl.chaos.workload import WorkerSpec, Workload

LOSS_ALLOWED = MappingProxyType({"async": True, "sync": False, "dledger": False, "controller": False})
REASONS_SHOWN = 5  # the most frequent reasons a report prints (--json has them all)


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


def throughput(rows: list[dict[str, float]], spans: list[FaultSpan], seconds: float) -> dict[str, float]:
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
            "injected": [dataclasses.asdict(s) for s in spans],
            "leaders": [{"at": t, "node": n} for t, n in leaders],
            **verdict.summary(), "loss_allowed": loss_allowed,
            "broken_promises": [f"{s.kind} of {s.target} never healed: {s.heal_failed.splitlines()[0]}" for s in spans
                                if s.heal_failed] + verdict.broken_promises(loss_allowed)}


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
        echo(f"  {s['started']:7.2f} s  {s['kind']:<9} {s['target'] + leader:<28} "
             + (f"NOT healed: {s['heal_failed']}" if s.get("heal_failed") else f"healed at {s['healed']:.2f} s"))
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
    for name, how in r.get("clients_stopped_uncleanly", {}).items():
        echo(f"  client {name} stopped uncleanly after the drill: {how}")
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
        since = rec.get("first_ack_after_fault_s")
        echo(f"  {rec['fault']} of {rec['target']}{' (master)' if rec.get('was_leader') else ''}: "
             f"{rec['acked_during']} sends acknowledged during it, the first of a send begun after it "
             f"{'never' if since is None else f'{since:.2f} s'} after the fault, the first after the heal {after} after it")
    echo("verdict: " + ("; ".join(r["broken_promises"]) if r["broken_promises"] else "every promise kept"))
    if r.get("kept"):
        echo(f"the drill's cluster, stores and logs: {r['kept']}")
