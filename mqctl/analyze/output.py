"""Files ``mqctl analyze --out`` writes: each report table as JSON lines, CSV or Parquet, and PNG
charts of the store-time histogram and the body-size distribution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_table(stem: str, rows: list[dict[str, Any]], columns: list[str], out: Path, fmt: str) -> Path:
    """``rows`` of a report table as ``out/<stem>.<fmt>``."""
    if fmt == "json":
        path = out / f"{stem}.json"
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
        return path
    import pyarrow as pa

    table = pa.Table.from_pylist(rows) if rows else pa.table({c: pa.array([], pa.null()) for c in columns})
    if fmt == "csv":
        from pyarrow import csv

        path = out / f"{stem}.csv"
        nested = [c for c in columns if not _flat(table.schema.field(c).type)]
        for c in nested:  # CSV has no lists or maps: those cells are written as JSON text
            cells = [None if r.get(c) is None else json.dumps(r[c], default=str) for r in rows]
            table = table.set_column(table.schema.get_field_index(c), c, pa.array(cells, pa.string()))
        csv.write_csv(table.select(columns), path)
        return path
    from pyarrow import parquet

    path = out / f"{stem}.parquet"
    parquet.write_table(table, path)
    return path


def _flat(kind: Any) -> bool:
    import pyarrow as pa

    return not (pa.types.is_list(kind) or pa.types.is_map(kind) or pa.types.is_struct(kind))


def write_charts(name: str, rows: list[dict[str, Any]], out: Path) -> Path | None:
    """A PNG bar chart for the time histogram and the size distribution (other reports: none)."""
    if name not in ("time", "sizes") or not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    if name == "time":
        import datetime as dt

        from matplotlib import dates

        starts = dates.date2num([dt.datetime.fromtimestamp(r["bucket_start"] / 1000, dt.UTC) for r in rows])
        width = float(starts[1] - starts[0]) if len(starts) > 1 else 1 / 1440  # in days
        ax.bar(starts, [r["messages"] for r in rows], width=width * 0.9, align="edge")
        ax.xaxis_date()
        ax.set_title("Messages by store time (UTC)")
        fig.autofmt_xdate()
    else:
        labels = [f"<{_size_text(r['upper'])}" for r in rows]
        ax.bar(labels, [r["messages"] for r in rows])
        ax.set_title("Body size distribution")
        ax.set_xlabel("body size")
    ax.set_ylabel("messages")
    path = out / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _size_text(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size}{unit}"
    return f"{n}B"
