"""``-c/--config`` and ``-v/--verbose`` on every command, before or after its name: one grammar.

The root callback takes them before the command (``mqctl --config x.toml topic list``); this
module gives every command the same two options (``mqctl topic list --config x.toml``), so a
user never has to know where they belong. A command's own value wins over the root's.
"""

from __future__ import annotations

import functools
import inspect
import logging
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", show_default=False,
                                                   help="The cluster's conf.toml (here or before the command).")]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Log more (here or before the command).")]

_CONFIG, _VERBOSE, _CTX = "root_config", "root_verbose", "root_ctx"


def apply_root(ctx: typer.Context, config: Path | None, verbose: bool) -> None:
    """Record ``--config`` where every command looks for it, and turn on ``--verbose``."""
    root = ctx.find_root()
    if root.obj is None:
        root.obj = {}
    if config is not None:
        root.obj["config"] = config
    if verbose:
        logging.getLogger().setLevel(logging.DEBUG)


def with_root_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` as a command that also takes ``--config`` and ``--verbose``."""
    hints = typing.get_type_hints(func, include_extras=True)
    signature = inspect.signature(func)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
    ctx_name = next((p.name for p in params if p.annotation is typer.Context), None)
    extra = [inspect.Parameter(_CONFIG, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigOption),
             inspect.Parameter(_VERBOSE, inspect.Parameter.KEYWORD_ONLY, default=False, annotation=VerboseOption)]
    if ctx_name is None:
        extra.append(inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context))

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        ctx = kwargs[ctx_name] if ctx_name is not None else kwargs.pop(_CTX)
        apply_root(ctx, kwargs.pop(_CONFIG), kwargs.pop(_VERBOSE))
        return func(*args, **kwargs)

    positional = [p for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    command.__signature__ = signature.replace(parameters=positional + keyword + extra)  # type: ignore[attr-defined]
    command.__annotations__ = {**hints, _CONFIG: ConfigOption, _VERBOSE: VerboseOption,
                               **({} if ctx_name else {_CTX: typer.Context})}
    del command.__wrapped__  # typer must read the signature above, not func's
    return command


def commands_of(app: typer.Typer) -> Iterator[Any]:
    """Every command registered on ``app`` and its sub-apps (typer's CommandInfo records)."""
    yield from app.registered_commands
    for group in app.registered_groups:
        if group.typer_instance is not None:
            yield from commands_of(group.typer_instance)


def give_every_command_root_options(app: typer.Typer) -> None:
    for info in commands_of(app):
        if info.callback is not None and not getattr(info.callback, "has_root_options", False):
            info.callback = with_root_options(info.callback)
            info.callback.has_root_options = True
