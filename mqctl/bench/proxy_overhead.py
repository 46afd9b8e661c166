"""``mqctl bench produce --compare-proxy``: what the proxy costs a producer, measured against
sending directly in the same run.

Rounds alternate (direct then proxied, then proxied then direct, ...) so the host's drift
cancels; the verdict is the median of the rounds' proxied/direct ratios, beside each kind's
median run and the CPU per message of every process (the proxy's included), the mean of the
rounds.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import typer

from core.config import Config
from mqctl.bench.runs import machine
from mqctl.common.context import namesrv_addresses
from mqctl.common.progress import progress_bar

Run = dict[str, object]


def compare_through_proxy(config: Config, proxy: str, rounds: int, as_json: bool,
                          produce: Callable[[list[str]], Run]) -> Run:
    """Run ``produce`` (given the name server addresses to use) ``rounds`` times each way."""
    ways = {"direct": namesrv_addresses(config), "proxied": namesrv_addresses(config, proxy)}
    runs: dict[str, list[Run]] = {"direct": [], "proxied": []}
    with progress_bar("bench produce: runs", 2 * rounds, quiet=as_json) as bar:
        for r in range(rounds):
            for way in (("direct", "proxied") if r % 2 == 0 else ("proxied", "direct")):
                run = produce(ways[way])
                runs[way].append(run)
                bar.advance()
                if not as_json:
                    bar.note(f"round {r + 1} {way:<7}: {run['msgs_per_s']:>7,} msgs/s, p50 {run['p50_ms']} ms, "
                             f"p99 {run['p99_ms']} ms")
    ratios = [_rate(p) / _rate(d) if _rate(d) else 0.0 for d, p in zip(runs["direct"], runs["proxied"], strict=True)]
    result: Run = {
        "machine": machine(), "date": time.strftime("%Y-%m-%d"), "rounds": rounds, "proxy": proxy,
        "ratio": round(statistics.median(ratios), 3), "round_ratios": [round(x, 3) for x in ratios],
        **{way: {"msgs_per_s": round(statistics.median(_rate(x) for x in got)),
                 "p50_ms": statistics.median(float(x["p50_ms"]) for x in got),  # type: ignore[arg-type]
                 "p99_ms": statistics.median(float(x["p99_ms"]) for x in got),  # type: ignore[arg-type]
                 "cpu_us_per_msg": _mean_cpu(got)} for way, got in runs.items()},
    }
    if as_json:
        typer.echo(json.dumps(result))
    else:
        for way in ("direct", "proxied"):
            part = result[way]
            assert isinstance(part, dict)
            cpu = ", ".join(f"{name} {us} us" for name, us in part["cpu_us_per_msg"].items())
            typer.echo(f"{way:<8} {part['msgs_per_s']:>7,} msgs/s (median), p50 {part['p50_ms']} ms, "
                       f"p99 {part['p99_ms']} ms; CPU per message: {cpu}")
        typer.echo(f"through {proxy}: {result['ratio']:.2f} of direct (median of the rounds' ratios "
                   f"{', '.join(f'{x:.2f}' for x in ratios)})")
    return result


def _rate(run: Run) -> float:
    return float(run["msgs_per_s"])  # type: ignore[arg-type]


def _mean_cpu(runs: list[Run]) -> dict[str, float | None]:
    per_process: dict[str, list[float]] = {}
    for run in runs:
        for name, us in dict(run.get("cpu_us_per_msg") or {}).items():  # type: ignore[call-overload]
            if us is not None:
                per_process.setdefault(name, []).append(float(us))
    return {name: round(statistics.mean(values), 1) for name, values in per_process.items()}
