"""``mqctl dump``: print the records of a CommitLog directory, a segment, a ``.zst`` archive or
a ConsumeQueue file, and verify them. Reads files only (read-only maps): safe on a live store."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from mqctl.common.errors import DamageFound
from mqctl.common.options import JsonOutput
from mqctl.common.progress import Bar, progress_bar
from mqctl.dump.source import SourceKind, classify, commitlog_rows, consume_queue_rows

Columns = tuple[tuple[str, int], ...]
TABLE_COLUMNS: Columns = (
    ("offset", 12), ("size", 6), ("topic", 18), ("queue_id", 3), ("queue_offset", 8),
    ("store_time", 23), ("tags", 10), ("keys", 16), ("body_size", 7),
)
CQ_COLUMNS: Columns = (("queue_offset", 10), ("phys_offset", 14), ("size", 6), ("tags_code", 12))


def dump(
    path: Annotated[Path, typer.Argument(help="CommitLog dir, node dir, segment, .zst archive or ConsumeQueue file.")],
    from_offset: Annotated[int, typer.Option("--from", help="Physical offset (CommitLog) or queue offset (ConsumeQueue) to start at.")] = 0,
    topic: Annotated[str | None, typer.Option(help="Only records of this topic.")] = None,
    limit: Annotated[int | None, typer.Option(help="Print at most this many records.")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Check CRCs and structure; summary; exit 1 on damage.")] = False,
    body: Annotated[bool, typer.Option("--body", help="Include bodies (decompressed) in --json output.")] = False,
    archive: Annotated[list[Path] | None, typer.Option(help="Extra directory of .zst archived segments.")] = None,
    as_json: JsonOutput = False,
) -> None:
    """Print stored records, or check them with --verify."""
    kind, source = classify(path)
    if kind is SourceKind.CONSUME_QUEUE:
        rows = consume_queue_rows(source, from_offset, verify=verify)
        columns = CQ_COLUMNS
    else:
        archive_dirs = tuple(archive) if archive else None
        rows = commitlog_rows(source, from_offset, verify=verify, with_body=body,
                              archive_dirs=archive_dirs)
        columns = TABLE_COLUMNS
    records = damaged = damaged_bytes = printed = 0
    first_damage: dict[str, Any] | None = None
    if not as_json and not verify:
        typer.echo(_header(columns))
    # --verify prints nothing until its summary: meanwhile a bar over the bytes read
    with progress_bar(f"verifying {path.name}", _bytes_in(source), quiet=as_json or not verify) as bar:
        rows = _advancing(rows, bar)
        for row in rows:
            if "damage" in row:
                damaged += 1
                damaged_bytes += row["length"]
                first_damage = first_damage or row
                if as_json:
                    typer.echo(json.dumps(row))
                else:
                    where = f"offset {row['offset']}"
                    tail = " (torn tail: recovery will cut it)" if row.get("at_tail") else ""
                    typer.echo(f"DAMAGE at {where}: {row['damage']}, {row['length']} bytes in {row['segment']}{tail}", err=verify)
                continue
            if topic is not None and row.get("topic", topic) != topic:
                continue
            records += 1
            if verify:
                continue
            if limit is not None and printed >= limit:
                break
            printed += 1
            typer.echo(json.dumps(row) if as_json else _line(row, columns))
    if verify:
        summary: dict[str, Any] = {"records": records, "damaged_ranges": damaged, "damaged_bytes": damaged_bytes,
                   "ok": damaged == 0}
        if first_damage is not None:
            summary["first_damage"] = first_damage
        typer.echo(json.dumps(summary) if as_json else
                   f"verified {records} records: " + ("OK" if damaged == 0 else
                   f"{damaged} damaged range(s), {damaged_bytes} bytes, first at offset "
                   f"{first_damage['offset']} ({first_damage['damage']})"))  # type: ignore[index]
        if damaged:
            raise DamageFound(f"{damaged} damaged range(s) in {path}")


def _header(columns: tuple[tuple[str, int], ...]) -> str:
    return "  ".join(name.upper()[:w].ljust(w) for name, w in columns)


def _line(row: dict[str, Any], columns: tuple[tuple[str, int], ...]) -> str:
    cells = []
    for name, width in columns:
        value: str
        if name == "store_time":
            value = dt.datetime.fromtimestamp(row["store_timestamp"] / 1000).isoformat(sep=" ", timespec="milliseconds")
        elif name == "keys":
            value = " ".join(row["keys"])
        else:
            raw = row.get(name)
            value = "" if raw is None else str(raw)
        if len(value) > width:
            value = value[: width - 1] + "…"
        cells.append(value.ljust(width))
    return "  ".join(cells).rstrip()


CQ_ENTRY_BYTES = 20


def _bytes_in(source: Path) -> int | None:
    """The bytes --verify reads: the file, or every file under the directory (None for an
    archive: its records inflate beyond its size)."""
    if source.suffix == ".zst":
        return None
    if source.is_file():
        return source.stat().st_size
    return sum(p.stat().st_size for p in source.rglob("*") if p.is_file())


def _advancing(rows: Iterator[dict[str, Any]], bar: Bar) -> Iterator[dict[str, Any]]:
    for row in rows:
        bar.advance(row.get("size") or row.get("length") or CQ_ENTRY_BYTES)
        yield row
