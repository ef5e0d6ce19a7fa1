"""``bakeoff engines``: list registered engines with capabilities; install one.

Two questions, two columns: whether bakeoff's adapter for the engine loads ("adapter"), and whether the engine's
own program is on this machine ("installed": where, or "no" with how to install it). One column for both read
vLLM as "available" while ``bakeoff check`` said it was not installed (USER-3 #5).
"""

from __future__ import annotations

import typer
from rich.markup import escape

from ..common.errors import CapabilityNotSupported, ConfigError
from ..engine.contract import EngineAdapter
from ..engine.launch import install_hint
from ..engine.registry import list_engines, load_engine
from ..reports.layout import print_rows
from .console import make_console

app = typer.Typer(invoke_without_command=True, add_completion=False, help="List engines, or install one.")
console = make_console()


@app.callback()
def engines_command(ctx: typer.Context) -> None:
    """List every engine registered in the bakeoff.engines entry-point group."""
    if ctx.invoked_subcommand is not None:
        return
    rows = []
    for info in list_engines():
        if info.adapter is None:
            rows.append([info.name, f"[red]unavailable[/red]: {escape(str(info.error))}", "", "", "", "",
                         info.distribution or ""])
            continue
        caps = info.adapter.capabilities
        rows.append([info.name, "[green]available[/green]", ", ".join(caps.speculative_methods),
                     caps.token_counts, escape(caps.acceptance_source), escape(_installed(info.adapter)),
                     info.distribution or ""])
    print_rows(console, "bakeoff engines", ("engine", "adapter", "speculative methods", "token counts",
                                            "acceptance from", "installed", "from"), rows)


def _installed(adapter_class: type[EngineAdapter]) -> str:
    """Which program the engine would run (llama.cpp: its backend and where it was found), "no" and how to install
    it, or '' for an engine with no program of its own to install (sim runs in-process, openai attaches)."""
    installer = adapter_class.installer
    if installer is None:
        return ""
    try:
        found = installer.installed()
    except Exception as exc:
        return f"could not tell: {exc}"
    return found or f"no: {installer.hint()}"


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
