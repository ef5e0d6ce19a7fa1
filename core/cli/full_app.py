"""``bakeoff`` with every command imported: what tests drive (``CliRunner().invoke(app, ...)``).

``main`` (core/cli/__init__.py) runs the same commands from the same table, importing each only when it runs.
"""

from __future__ import annotations

import importlib

import typer

from .boundary import guard_commands
from .commands import AFTER_STOP, COMMANDS
from .root import new_root

__all__ = ["app"]

app = new_root()
for _name, _spec in COMMANDS.items():
    _target = getattr(importlib.import_module(f"{__package__}.{_spec.module}"), _spec.attr)
    if isinstance(_target, typer.Typer):
        app.add_typer(_target, name=_name)
    else:
        app.command(_name)(_target)
guard_commands(app, AFTER_STOP)
