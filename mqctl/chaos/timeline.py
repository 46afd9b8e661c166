"""A drill over time: acknowledged sends and their latency second by second (sans-IO), and the
picture ``mqctl chaos --report DIR`` draws of it.

```
 DIR/timeline.png   throughput (acknowledged and unanswered sends a second) above p50/p99
                    latency, fault windows shaded and named, leader changes marked
 DIR/history.json   the report, the timeline rows, the faults and the leaders seen
 DIR/journals/      every client process's own history, a row per send and per delivery
```

The picture is drawn with matplotlib (already the project's for ``mqctl analyze`` charts) on
its Agg backend: a file, no display.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqctl.chaos.history import FaultSpan, SendAttempt

BUCKET_S = 1.0


def quantile(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def timeline(attempts: Sequence[SendAttempt], seconds: float) -> list[dict[str, float]]:
    """A row a second to ``seconds`` (and on while sends were answered): acknowledged sends
    (by when they were answered), sends not acknowledged, and the acknowledged ones' p50 and
    p99 latency in ms (0 when none)."""
    acked: dict[int, list[float]] = defaultdict(list)
    not_acked: dict[int, int] = defaultdict(int)
    for a in attempts:
        second = int(a.ended // BUCKET_S)
        if a.outcome == "ok":
            acked[second].append((a.ended - a.started) * 1000)
        else:
            not_acked[second] += 1
    end = max([int(seconds), *acked, *not_acked]) + 1
    rows = []
    for second in range(end):
        latencies = sorted(acked.get(second, ()))
        rows.append({"t": second * BUCKET_S, "acknowledged": len(latencies), "not_acknowledged": not_acked.get(second, 0),
                     "p50_ms": round(quantile(latencies, 0.5), 2) if latencies else 0.0,
                     "p99_ms": round(quantile(latencies, 0.99), 2) if latencies else 0.0})
    return rows


def write_report(directory: Path, report: dict[str, Any], rows: list[dict[str, float]], spans: Sequence[FaultSpan],
                 leaders: Sequence[tuple[float, str]], journals: Sequence[Path]) -> None:
    """The files of ``--report DIR`` (the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "journals").mkdir(exist_ok=True)
    for path in journals:
        if path.exists():
            shutil.copyfile(path, directory / "journals" / path.name)
    (directory / "history.json").write_text(json.dumps(
        {"report": report, "timeline": rows, "leaders": [{"at": t, "node": n} for t, n in leaders],
         "faults": [dataclasses.asdict(s) for s in spans]},
        indent=1))
    draw(directory / "timeline.png", report, rows, spans, leaders)


def draw(path: Path, report: dict[str, Any], rows: list[dict[str, float]], spans: Sequence[FaultSpan],
         leaders: Sequence[tuple[float, str]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(12, 6.5), height_ratios=(3, 2))
    top.plot(t, [r["acknowledged"] for r in rows], color="tab:blue", label="acknowledged / s")
    top.plot(t, [r["not_acknowledged"] for r in rows], color="tab:red", label="not acknowledged / s")
    top.set_ylabel("sends a second")
    bottom.plot(t, [r["p99_ms"] or None for r in rows], color="tab:purple", label="p99")
    bottom.plot(t, [r["p50_ms"] or None for r in rows], color="tab:green", label="p50")
    bottom.set_yscale("log")
    bottom.set_ylabel("latency, ms")
    bottom.set_xlabel("seconds since the drill started")
    for ax in (top, bottom):
        for s in spans:
            ax.axvspan(s.started, s.healed, color="tab:orange", alpha=0.18, lw=0)
        for at, _ in leaders[1:]:
            ax.axvline(at, color="black", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    ymax = top.get_ylim()[1]
    for s in spans:
        top.text(s.started, ymax * 0.97, f"{s.kind}\n{s.target}", fontsize=7, va="top")
    for at, node in leaders:
        bottom.text(at, bottom.get_ylim()[0], f" {node}", fontsize=7, rotation=90, va="bottom")
    verdict = "; ".join(report["broken_promises"]) or "every promise kept"
    top.set_title(f"mqctl chaos: {report['mode']}, seed {report['seed']}, {report['acknowledged']} acknowledged, "
                  f"{report['lost']['count']} lost, {report['phantom']['count']} phantom - {verdict}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
