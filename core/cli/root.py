"""The root of the ``bakeoff`` command line, shared by ``main`` (lazy) and ``app`` (everything imported)."""

from __future__ import annotations

import typer

__all__ = ["HELP", "new_root"]

HELP = "Head-to-head speed of LLM engines with speculative decoding, from true token counts."


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"bakeoff {version('bakeoff')}")
        raise typer.Exit()


def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print bakeoff's version and exit.")) -> None:
    """Head-to-head speed of LLM engines with speculative decoding, from true token counts."""


def new_root(**kwargs: object) -> typer.Typer:
    """An empty ``bakeoff`` app with its --version option (``kwargs`` go to typer.Typer, e.g. ``cls``)."""
    root = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP, **kwargs)  # type: ignore[arg-type]
    root.callback()(_root)
    return root
