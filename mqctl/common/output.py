"""Printing rows as an aligned table or as JSON lines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import typer


def print_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, as_json: bool) -> None:
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    cells = [[("" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    typer.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
