"""The one error boundary of the ``bakeoff`` command line.

Every command is wrapped once (core/cli/full_app.py and core/cli/lazy.py): a :class:`BakeoffError` or a Ctrl-C
becomes one message on stderr (one line per problem) and the exit code :func:`exit_code_for` picks, never a
traceback. A closed output pipe (``bakeoff report RUN | head``) ends the command quietly. Anything else is a
bakeoff bug and keeps its traceback (exit 1). Commands themselves raise; they do not print errors.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ..common.errors import BakeoffError, RunDirError
from .exit_codes import ExitCode, exit_code_for

__all__ = ["RUN_DIR", "guard_commands", "guarded", "is_guarded", "name_run_dir", "stop_message"]

# Errors and interruptions go to stderr, so a command's stdout (JSON, markdown) stays parseable.
_stderr = Console(stderr=True)
_guarded: set[Callable[..., Any]] = set()

RUN_DIR = "RUN_DIR"  # where an after-stop line names the run directory; the real path replaces it once known
_RUN_DIR_ATTR = "_bakeoff_run_dir"
StopT = TypeVar("StopT", bound=BaseException)


def name_run_dir(exc: StopT, run_dir: Path | None) -> StopT:
    """``exc`` marked with the run directory it stopped, so the boundary's line names the real path to resume
    (the command only knows it once the run has made it); ``None`` leaves the placeholder."""
    if run_dir is not None:
        setattr(exc, _RUN_DIR_ATTR, run_dir)
    return exc


def _naming_run_dir(after_stop: str | None, exc: BaseException) -> str | None:
    run_dir = getattr(exc, _RUN_DIR_ATTR, None)
    if after_stop is None or not isinstance(run_dir, Path):
        return after_stop
    return after_stop.replace(RUN_DIR, shlex.quote(str(run_dir)))  # quoted: the command is copied into a shell


def stop_message(exc: BaseException, after_stop: str | None = None) -> str:
    """The one line a user sees, as plain text (no markup).

    :param after_stop: what still holds after an interruption or a write failure, and what to do next
        (``bakeoff run``: the stored samples are kept and ``--resume`` finishes the run); its ``RUN_DIR`` is the
        directory :func:`name_run_dir` marked ``exc`` with, where one was.
    """
    after_stop = _naming_run_dir(after_stop, exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted" + (f": {after_stop}" if after_stop else "")
    # one problem per line (a validation error names each bad field on its own line), each line's spaces folded
    text = "\n  ".join(" ".join(line.split()) for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    if isinstance(exc, RunDirError) and after_stop:
        return f"error: {text}; {after_stop}"
    return f"error: {text}"


def guarded(command: Callable[..., Any], after_stop: str | None = None) -> Callable[..., Any]:
    """``command`` with the boundary around it; typer still reads its signature (``functools.wraps``)."""

    @functools.wraps(command)
    def boundary(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BrokenPipeError:  # the reader went away: nothing to say, and nothing more can be said
            _silence_stdout()
            raise typer.Exit(ExitCode.BROKEN_PIPE) from None
        except (BakeoffError, KeyboardInterrupt) as exc:
            code = exit_code_for(exc)
            line = escape(stop_message(exc, after_stop))
            style = "yellow" if code is ExitCode.INTERRUPTED else "red"
            _stderr.print(f"[{style}]{line}[/{style}]", highlight=False, soft_wrap=True)
            raise typer.Exit(code) from None

    _guarded.add(boundary)
    return boundary


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not hit the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (a test runner's stream)
        pass


def is_guarded(command: Callable[..., Any]) -> bool:
    return command in _guarded


def guard_commands(app: typer.Typer, after_stop: dict[str, str]) -> None:
    """Wrap every command registered on ``app`` and its sub-apps, once.

    :param after_stop: per command name, what :func:`stop_message` adds after an interruption.
    """
    for info in app.registered_commands:
        if info.callback is not None and not is_guarded(info.callback):
            name = info.name or info.callback.__name__
            info.callback = guarded(info.callback, after_stop.get(name))
    callback = app.registered_callback
    if callback is not None and callback.callback is not None and not is_guarded(callback.callback):
        callback.callback = guarded(callback.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            guard_commands(group.typer_instance, after_stop)
