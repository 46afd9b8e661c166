"""``mqctl config get | set``: read and edit one key of ``conf.toml``.

``set`` edits the file with tomlkit, so comments, key order and formatting survive; the edited
document is validated with ``core.config.parse_config`` before it replaces the file (atomically),
so a bad value never reaches the disk. Keys are ``section.field`` of the plain tables
(``[store]``, ``[replication]``, ...); the arrays of tables (``[[brokers]]``) are edited by hand.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import tomllib
import typing
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

import tomlkit
import tomlkit.exceptions
import typer

from core.config import Config, is_secret, parse_config
from core.errors import ConfigError
from mqctl.admin.controller_switch import leaving_controller_problem
from mqctl.common.context import config_path, load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput

config_app = typer.Typer(help="Read and edit the cluster's conf.toml, keeping its comments.", no_args_is_help=True)

RESTART_HINT = "restart the nodes to apply: mqctl restart"

# Values conf.toml accepts but this version cannot run yet; remove an entry once it ships.
NOT_YET_AVAILABLE: Mapping[tuple[str, str, object], str] = MappingProxyType({})

_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def _config_parts() -> tuple[Mapping[str, type], tuple[str, ...]]:
    """The plain tables of ``Config`` (name -> settings dataclass) and its arrays of tables."""
    hints = typing.get_type_hints(Config)
    tables = {f.name: hints[f.name] for f in dataclasses.fields(Config) if dataclasses.is_dataclass(hints[f.name])}
    arrays = tuple(f.name for f in dataclasses.fields(Config) if typing.get_origin(hints[f.name]) is tuple)
    return MappingProxyType(tables), arrays


SECTIONS, ARRAYS = _config_parts()


SECRET_SHOWN = "********"


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """One ``section.field`` of conf.toml, with the field's type and default."""

    section: str
    field: str
    type: Any
    default: Any
    secret: bool = False  # never printed: shown as SECRET_SHOWN

    def __str__(self) -> str:
        return f"{self.section}.{self.field}"


def parse_key(text: str) -> Key:
    """``"replication.mode"`` -> its Key; a clear error naming the valid keys otherwise."""
    section, _, field = text.partition(".")
    if section in ARRAYS:
        raise CliError(f"[[{section}]] is an array of tables, which mqctl config does not edit; "
                       f"change it in the file by hand")
    cls = SECTIONS.get(section)
    if cls is None:
        raise CliError(f"unknown section {section!r} in {text!r}; the sections are: {', '.join(SECTIONS)} "
                       f"(keys look like replication.mode)")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if field not in fields:
        valid = ", ".join(f"{section}.{name}" for name in fields)
        raise CliError(f"unknown key {text!r}; the keys of [{section}] are: {valid}")
    return Key(section, field, typing.get_type_hints(cls)[field], fields[field].default, is_secret(fields[field]))


def convert(key: Key, text: str) -> Any:
    """The command-line ``text`` as a value of the key's type (int, float, bool or str)."""
    kind = key.type
    if typing.get_origin(kind) is typing.Literal:  # FlushMode, ReplicationMode: parse_config checks the choice
        kind = str
    if kind is bool:
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise CliError(f"{key} takes true or false (or yes/no, 1/0), not {text!r}")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise CliError(f"{key} takes an integer, not {text!r}") from None
    if kind is float:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise CliError(f"{key} takes a number, not {text!r}")
        return number
    if kind is str:
        return text
    raise CliError(f"{key} has a type mqctl config cannot set ({kind!r}); edit the file by hand")


def refuse_not_yet_available(key: Key, value: Any) -> None:
    reason = NOT_YET_AVAILABLE.get((key.section, key.field, value))
    if reason is not None:
        raise CliError(f"{key} {value}: {reason}")


def show(value: Any, key: Key | None = None) -> str:
    """A value as conf.toml spells it (true, not True); a secret key's value masked."""
    if key is not None and key.secret:
        return SECRET_SHOWN
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode()  # bytes, so CRLF line ends are kept as they are
    except FileNotFoundError:
        raise CliError(f"config file {path} not found") from None


def _file_value(raw: dict[str, Any], key: Key) -> tuple[bool, Any]:
    """(present, value) of ``key`` in a parsed document; the default when absent."""
    table = raw.get(key.section)
    if isinstance(table, dict) and key.field in table:
        return True, table[key.field]
    return False, key.default


def _validate(text: str, path: Path) -> Config:
    try:
        return parse_config(tomllib.loads(text), source=path)
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{path}: {exc}") from None


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename: readers see the old file or the new one."""
    target = path.resolve()  # through a symlink, replace the file it points to
    mode = target.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode())
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def set_value(path: Path, key: Key, value: Any) -> tuple[Any, bool]:
    """Set ``key`` to ``value`` in the file at ``path``: (the old effective value, whether the file
    changed). Refuses, leaving the file as it was, when the edited document is not a valid config."""
    text = _read(path)
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise CliError(f"{path}: {exc}") from None
    present, old = _file_value(tomllib.loads(text), key)
    if present and old == value and type(old) is type(value):
        return old, False
    table = doc.get(key.section)
    if table is None:
        table = tomlkit.table()
        doc.add(key.section, table)
    if not isinstance(table, MutableMapping):
        raise CliError(f"{path}: {key.section} is not a table ([{key.section}])")
    table[key.field] = value
    new_text = tomlkit.dumps(doc)
    try:
        _validate(new_text, path)
    except ConfigError as exc:
        raise CliError(f"{path} not changed: {exc}") from None
    _write_atomically(path, new_text)
    return old, True


@config_app.command("get")
def get(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="section.field, e.g. replication.mode")],
    as_json: JsonOutput = False,
) -> None:
    """Print KEY's effective value: the file's or the default.

    Print the effective value of KEY: the file's, or the default when the file does not set it."""
    parsed = parse_key(key)
    path = config_path(ctx)
    text = _read(path)
    try:
        config = _validate(text, path)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    value = getattr(getattr(config, parsed.section), parsed.field)
    present, _ = _file_value(tomllib.loads(text), parsed)
    if as_json:
        doc = {"key": str(parsed), "value": shown_json(value, parsed), "source": "file" if present else "default"}
        typer.echo(json.dumps(doc | ({"secret": True} if parsed.secret else {}), default=str))
    else:
        typer.echo(show(value, parsed))


@config_app.command("set")
def set_cmd(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="section.field, e.g. replication.mode")],
    value: Annotated[str, typer.Argument(help="The new value, converted to the key's type.")],
    as_json: JsonOutput = False,
) -> None:
    """Set KEY to VALUE in conf.toml, keeping comments and layout.

    Set KEY to VALUE in conf.toml, keeping comments and layout; nodes pick it up on restart."""
    parsed = parse_key(key)
    new = convert(parsed, value)
    refuse_not_yet_available(parsed, new)
    if (parsed.section, parsed.field, new) == ("replication", "controller", False):
        current = load(ctx)
        if current.replication.controller and (problem := leaving_controller_problem(current)) is not None:
            raise CliError(f"replication.controller not changed: {problem}")
    old, changed = set_value(config_path(ctx), parsed, new)
    if as_json:
        doc = {"key": str(parsed), "old": shown_json(old, parsed), "new": shown_json(new, parsed), "changed": changed}
        typer.echo(json.dumps(doc | ({"secret": True} if parsed.secret else {}), default=str))
    elif changed:
        typer.echo(f"{parsed}: {show(old, parsed)} -> {show(new, parsed)} ({RESTART_HINT})")
    else:
        typer.echo(f"{parsed}: already {show(new, parsed)} (file not changed)")


def shown_json(value: Any, key: Key) -> Any:
    """``value`` for a JSON document: itself, or masked for a secret key."""
    return SECRET_SHOWN if key.secret else value
