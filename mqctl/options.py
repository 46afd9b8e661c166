"""Option aliases shared by the CLI's commands."""

from __future__ import annotations

from typing import Annotated

import typer

JsonOutput = Annotated[bool, typer.Option("--json", help="Print JSON (one object per line).")]
