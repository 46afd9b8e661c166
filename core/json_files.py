"""Small JSON files under ``config/``, replaced atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson


def load_json(path: Path) -> Any | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return orjson.loads(raw) if raw.strip() else None


def save_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
