"""``bakeoff`` with each command imported only when it runs (core/cli/commands.py lists them).

The group shows every command in ``--help`` from the table, and swaps in the real command (its module
imported, its boundary around it) when the command line names it.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from .boundary import guard_commands, guarded
from .commands import AFTER_STOP, COMMANDS
from .root import new_root

__all__ = ["LazyGroup", "lazy_command", "load_command"]


def load_command(name: str) -> Any:
    """The click command of ``name``, its module imported and its boundary around it."""
    spec = COMMANDS[name]
    target = getattr(importlib.import_module(f"{__package__}.{spec.module}"), spec.attr)
    if isinstance(target, typer.Typer):  # a command group (engines)
        guard_commands(target, AFTER_STOP)
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(guarded(target, AFTER_STOP.get(name)))
        command = typer.main.get_command(single)
    command.name = name
    return command


class _Listed(TyperCommand):
    """A command as ``--help`` lists it, before its module is imported."""


class LazyGroup(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, spec in COMMANDS.items():
            self.commands.setdefault(name, _Listed(name=name, help=spec.help))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and isinstance(self.commands.get(args[0]), _Listed):
            self.commands[args[0]] = load_command(args[0])
        return super().resolve_command(ctx, args)


def lazy_command() -> Any:
    """The ``bakeoff`` click group (a callable: calling it runs the command line)."""
    return typer.main.get_command(new_root(cls=LazyGroup))
