"""``bakeoff engines``: list registered engines with capabilities; install one."""

from __future__ import annotations

import typer
from rich.table import Table

from ..common.errors import CapabilityNotSupported, ConfigError
from ..engine.adapter import EngineAdapter, install_hint
from ..engine.registry import list_engines, load_engine
from .console import make_console

app = typer.Typer(invoke_without_command=True, add_completion=False, help="List engines, or install one.")
console = make_console()


@app.callback()
def engines_command(ctx: typer.Context) -> None:
    """List every engine registered in the bakeoff.engines entry-point group."""
    if ctx.invoked_subcommand is not None:
        return
    table = Table(title="bakeoff engines")
    for col in ("engine", "status", "speculative methods", "token counts", "acceptance from", "installed", "from"):
        table.add_column(col, overflow="fold")
    for info in list_engines():
        if info.adapter is None:
            table.add_row(info.name, f"[red]unavailable[/red]: {info.error}", "", "", "", "", info.distribution or "")
            continue
        caps = info.adapter.capabilities
        table.add_row(info.name, "[green]available[/green]", ", ".join(caps.speculative_methods),
                      caps.token_counts, caps.acceptance_source,
                      _installed(info.adapter), info.distribution or "")
    console.print(table)


def _installed(adapter_class: type[EngineAdapter]) -> str:
    """Which program the engine would run (llama.cpp: its backend and where it was found), or ''."""
    installer = adapter_class.installer
    try:
        return (installer.installed() if installer is not None else None) or ""
    except Exception as exc:
        return f"could not tell: {exc}"


@app.command("install")
def install_command(
    name: str = typer.Argument(help="Engine to install, e.g. llamacpp"),
    backend: str | None = typer.Option(None, "--backend", help="llamacpp: cpu, cuda or auto (default: cuda where "
                                       "nvcc and a GPU are present, else cpu)"),
) -> None:
    """Build or install an engine into bakeoff's cache (outside the repository), through its installer."""
    adapter = load_engine(name)
    installer = adapter.installer
    if installer is None:
        raise CapabilityNotSupported(f"{name} has no installer; {install_hint(adapter)}")
    if backend is not None and backend not in installer.backends:
        raise ConfigError(f"--backend {backend!r}: {name} builds " + (
            f"for {', '.join(installer.backends)}" if installer.backends else "no backends to choose from"))
    log = lambda msg: console.print(f"[dim]{msg}[/dim]", highlight=False)  # noqa: E731
    where = installer.install(log, backend=backend)
    console.print(f"{name}: installed at {where}")
