"""One CLI grammar: every command takes ``-c/--config`` and ``-v`` after its name as well as
before it, and README's command list is the command tree ``mqctl --help`` shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import typer

from mqctl.main import app

REPO = Path(__file__).resolve().parents[2]


def leaf_commands() -> dict[str, object]:
    """Every runnable command of the app, by its words (``topic list``)."""
    found: dict[str, object] = {}

    def walk(command: object, words: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, [*words, name])
        else:
            found[" ".join(words)] = command

    walk(typer.main.get_command(app), [])
    return found


def placeholder_arguments(command: object) -> list[str]:
    return ["1" for p in command.params if p.param_type_name == "argument" and p.required]  # type: ignore[attr-defined]


def test_every_command_takes_config_and_verbose_after_its_name(tmp_path):
    commands = leaf_commands()
    assert len(commands) >= 27 and "topic list" in commands and "bench consume" in commands
    config = tmp_path / "elsewhere.toml"
    for words, command in commands.items():
        for spelling in (["--config", str(config), "-v"], ["-c", str(config), "--verbose"]):
            ctx = command.make_context(words, [*placeholder_arguments(command), *spelling])  # type: ignore[attr-defined]
            assert ctx.params["root_config"] == config and ctx.params["root_verbose"] is True, (words, spelling)


def test_config_after_the_command_is_the_one_used_and_wins_over_the_root(tmp_path, subprocess_env):
    def mqctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mqctl", *args], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path, env=subprocess_env, check=False)

    after = mqctl("topic", "list", "--config", str(tmp_path / "after.toml"))
    assert after.returncode == 2 and f"config file {tmp_path / 'after.toml'} not found" in after.stderr
    both = mqctl("-c", str(tmp_path / "root.toml"), "consumer", "list", "G", "-c", str(tmp_path / "own.toml"))
    assert both.returncode == 2 and "own.toml not found" in both.stderr, both.stderr
    before = mqctl("--config", str(tmp_path / "before.toml"), "status")
    assert before.returncode == 2 and "before.toml not found" in before.stderr



def test_the_node_process_takes_the_same_spellings_and_its_old_module_name_still_works(tmp_path, subprocess_env):
    missing = tmp_path / "missing.toml"
    for module in ("mqctl.nodes.node", "mqctl.node"):  # the second: the old spelling, kept
        for spelling in (["--config", str(missing), "-v"], ["-c", str(missing), "--verbose"]):
            node = subprocess.run([sys.executable, "-m", module, "--node", "ns1", *spelling], capture_output=True,
                                  text=True, timeout=60, cwd=tmp_path, env=subprocess_env, check=False)
            assert node.returncode == 2, (module, spelling, node.stderr)
            assert f"config file {missing} not found" in node.stderr and "Traceback" not in node.stderr

def readme_commands() -> set[str]:
    """The commands README's "Commands" block lists (``topic create|list|route`` is three,
    ``config get KEY | set KEY VALUE`` two)."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    groups = {words.split()[0] for words in leaf_commands() if " " in words}
    listed = set()
    for line in block.splitlines():
        tokens = line.split("#", 1)[0].split()
        if not tokens or tokens[0] != "mqctl":
            continue
        noun = tokens[1]
        if noun not in groups:
            listed.add(noun)
            continue
        verbs = tokens[2].split("|") + [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "|"]
        listed.update(f"{noun} {verb}" for verb in verbs if re.fullmatch(r"[a-z][a-z-]*", verb))
    return listed


def test_readme_lists_exactly_the_commands_mqctl_has():
    assert readme_commands() == set(leaf_commands())


def test_help_shows_toml_tables_and_brackets_as_written():
    """Rich reads ``[proxies]`` in ``[[proxies]]`` as markup and drops it: every bracketed word
    of every option's help must reach the screen."""
    from typer.testing import CliRunner

    runner = CliRunner()
    checked = 0
    for words, command in leaf_commands().items():
        helps = [getattr(p, "help", None) or "" for p in command.params]  # type: ignore[attr-defined]
        wanted = {t for h in helps for t in re.findall(r"\S*\[\S*", h.replace("\\[", "["))}
        if not wanted:
            continue
        shown = runner.invoke(app, [*words.split(), "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"}).output
        missing = [t for t in wanted if t.strip(".,;:()") not in shown]
        assert not missing, f"mqctl {words} --help lost {missing}"
        checked += 1
    assert checked >= 3  # --proxy of send, tail and bench grpc at least


def command_groups() -> dict[str, object]:
    """Every command that lists subcommands, by its words (``""`` is mqctl itself)."""
    found: dict[str, object] = {}

    def walk(command: object, words: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            found[" ".join(words)] = command
            for name, sub in subcommands.items():
                walk(sub, [*words, name])

    walk(typer.main.get_command(app), [])
    return found


def test_every_command_summary_fits_one_line_at_100_columns():
    """The commands table of ``mqctl --help`` and of every group: one row per command. A
    summary that wraps leaves a row whose name column is blank. Rendered in a fresh process:
    typer reads the terminal width once, at import."""
    groups = command_groups()
    render = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from mqctl.main import app\n"
        "runner = CliRunner()\n"
        "words = json.loads(sys.argv[1])\n"
        "print(json.dumps([runner.invoke(app, [*w.split(), '--help']).output for w in words]))\n"
    )
    env = {**os.environ, "COLUMNS": "100", "TERMINAL_WIDTH": "100"}
    done = subprocess.run([sys.executable, "-c", render, json.dumps(list(groups))], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    rows_seen = 0
    for (words, group), shown in zip(groups.items(), json.loads(done.stdout), strict=True):
        assert max(len(line) for line in shown.splitlines()) <= 100
        panel = shown.split("─ Commands ", 1)[1].split("╰", 1)[0].splitlines()[1:]
        listed = {n for n, c in group.commands.items() if not c.hidden}  # type: ignore[attr-defined]
        for row in panel:
            cells = row.strip("│ ").split(maxsplit=1)
            assert cells and cells[0] in listed, f"mqctl {words} --help wraps a summary: {row!r}"
        assert len(panel) == len(listed), f"mqctl {words} --help: {panel}"
        rows_seen += len(panel)
    assert rows_seen >= 40
