"""docs/seed-concepts.md names a module for each RocketMQ/DLedger concept: every module it
names exists (a bare file name is beside the path before it on its line, else inside the folder
its section's heading names)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_module_the_concept_map_names_exists():
    folder = ""
    named = []
    for line in (REPO / "docs" / "seed-concepts.md").read_text().splitlines():
        if line.startswith("## "):
            heading_folder = re.search(r"`([\w/]+/)`", line)
            folder = heading_folder.group(1) if heading_folder else ""
        beside = folder
        for path in re.findall(r"`([\w/.]+\.py)`", line):
            if "/" in path:
                beside = path.rsplit("/", 1)[0] + "/"
                named.append(path)
            else:
                named.append(beside + path)
    assert len(named) > 50
    missing = [p for p in named if not (REPO / p).is_file()]
    assert not missing, f"docs/seed-concepts.md names modules that do not exist: {missing}"
