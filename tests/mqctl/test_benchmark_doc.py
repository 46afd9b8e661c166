"""docs/benchmarks.md promises that its tables come from commands in this repository: every
`mqctl bench ...` it shows in a shell block must be a command that takes the options given."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from mqctl.main import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
_SHELL_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


def bench_invocations() -> list[list[str]]:
    """The words after `mqctl` of each bench command in the doc's shell blocks."""
    found = []
    for block in _SHELL_BLOCK.findall(DOC.read_text()):
        for line in block.splitlines():
            for command in re.split(r";|&&", line.split("#", 1)[0]):
                words = shlex.split(command.replace("$", "X"))
                if "bench" in words and any(w.endswith("mqctl") for w in words):
                    found.append(words[next(i for i, w in enumerate(words) if w.endswith("mqctl")) + 1:])
    return found


def test_every_bench_command_in_the_benchmarks_doc_exists_with_its_options():
    invocations = bench_invocations()
    assert len(invocations) >= 15
    runner = CliRunner()
    for words in invocations:
        args = words[2:] if words[0] == "-c" else words  # -c conf.toml before the command
        sub = args[1]
        shown = runner.invoke(app, ["bench", sub, "--help"], terminal_width=200)
        assert shown.exit_code == 0, (words, shown.output)
        for option in (w for w in args[2:] if w.startswith("--")):
            assert option in shown.output, f"`mqctl {' '.join(words)}`: bench {sub} has no {option}"
