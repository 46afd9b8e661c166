"""Progress of long work, drawn by rich on stderr: one bar (or spinner, when the total is not
known) per piece of work, redrawn in place, and lines printed above it. Off when stderr is not
a terminal or the command prints --json, so logs and pipes get no control characters."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class Bar:
    """One task of a rich Progress; a no-op when progress is off."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress, self._task = progress, task

    def advance(self, amount: float = 1.0) -> None:
        self._progress.advance(self._task, amount)

    def update(self, *, completed: float | None = None, total: float | None = None, description: str | None = None) -> None:
        self._progress.update(self._task, completed=completed, total=total, description=description)

    def note(self, text: str) -> None:
        """A line above the bar (on stderr), as the work reports it."""
        self._progress.console.print(text, markup=False, highlight=False)


def shown(quiet: bool = False) -> bool:
    return not quiet and sys.stderr.isatty()


@contextmanager
def progress_bar(description: str, total: float | None, *, quiet: bool = False) -> Iterator[Bar]:
    """A bar for ``total`` steps (None: a spinner) while the block runs; ``quiet`` (--json)
    or a stderr that is not a terminal: nothing is drawn."""
    console = Console(stderr=True)
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=True, disable=not shown(quiet)) as progress:
        yield Bar(progress, progress.add_task(description, total=total))
