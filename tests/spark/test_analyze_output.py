"""mqctl.analyze.output: report tables as JSON lines, CSV and Parquet files, and the charts."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest

from mqctl.analyze.output import write_charts, write_table

COLUMNS = ["topic", "messages", "p99_ms", "keys", "first_differing"]
ROWS = [
    {"topic": "Orders", "messages": 3, "p99_ms": 12.5, "keys": ["a", "b,c"], "first_differing": None},
    {"topic": "订单", "messages": 1, "p99_ms": None, "keys": [], "first_differing": 4096},
]


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
def test_every_format_keeps_every_row_and_column(tmp_path, fmt):
    path = write_table("latency", ROWS, COLUMNS, tmp_path, fmt)
    assert path == tmp_path / f"latency.{fmt}"
    if fmt == "json":
        back = [json.loads(line) for line in path.read_text().splitlines()]
    elif fmt == "parquet":
        back = pq.read_table(path).to_pylist()
    else:
        with path.open(newline="") as fh:
            raw = list(csv.DictReader(fh))
        assert list(raw[0]) == COLUMNS
        back = [{"topic": r["topic"], "messages": int(r["messages"]),
                 "p99_ms": float(r["p99_ms"]) if r["p99_ms"] else None, "keys": json.loads(r["keys"]),
                 "first_differing": int(r["first_differing"]) if r["first_differing"] else None} for r in raw]
    assert back == ROWS


def test_an_empty_table_still_writes_its_header(tmp_path):
    path = write_table("dup", [], COLUMNS, tmp_path, "csv")
    assert path.read_text().splitlines() == [",".join(f'"{c}"' for c in COLUMNS)]


def test_charts_are_pngs_for_time_and_sizes_only(tmp_path):
    png = write_charts("sizes", [{"upper": 1024, "messages": 4}, {"upper": 2048, "messages": 1}], tmp_path)
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert write_charts("topics", [{"topic": "x"}], tmp_path) is None
