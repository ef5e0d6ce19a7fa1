"""``bakeoff bundle RUN`` and ``bakeoff verify BUNDLE``: a run as one file to share, and its check."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ..common.errors import BundleError
from ..results.bundle import bundle_run, verify_bundle
from .console import make_console

__all__ = ["bundle_command", "verify_command"]

console = make_console()


def bundle_command(
    run_dir: Path = typer.Argument(help="A run directory made by `bakeoff run` (or gate, calibrate)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="The bundle file (default: RUN_DIR.bakeoff.tar.gz "
                                    "beside the run directory)"),
) -> None:
    """Pack a run into one file: the run directory, a manifest of SHA-256 hashes, each arm's configuration
    fingerprint and engine build, and the rig report of the machine that ran it. Secrets are masked."""
    target = out or run_dir.parent / f"{run_dir.resolve().name}.bakeoff.tar.gz"
    path, sha, manifest = bundle_run(run_dir, target)
    console.print(f"bundle: [bold]{path}[/bold] ({len(manifest.files)} files, {manifest.samples} samples)",
                  highlight=False, soft_wrap=True)
    console.print(f"sha256: {sha}", highlight=False)
    for rel in manifest.masked:
        console.print(f"[bold yellow]WARNING[/bold yellow] secrets masked in {escape(rel)} (the bundle holds the "
                      "masked copy)", highlight=False)
    for arm, fp in manifest.fingerprints.items():
        console.print(f"  {arm}: fingerprint {fp.id}", highlight=False)
    if not manifest.fingerprints:
        console.print("[yellow]this run recorded no configuration fingerprints (made before them): merge cannot "
                      "match its arms with other bundles'[/yellow]", highlight=False)
    absent = manifest.rig.get("absent") or {}
    if absent:
        console.print(escape(f"rig report ({manifest.rig_source}); not known: " + "; ".join(
            f"{k} ({why})" for k, why in absent.items())), highlight=False, soft_wrap=True)


def verify_command(
    bundle: Path = typer.Argument(help="A bundle made by `bakeoff bundle`"),
) -> None:
    """Check a bundle: every file against the manifest's SHA-256, no file added or missing, run.json, the
    samples, fingerprints and builds consistent, no credential-shaped text. Exit 0 when it verifies."""
    result = verify_bundle(bundle)
    console.print(f"sha256: {result.sha256}", highlight=False)
    if result.ok and result.manifest is not None:
        m = result.manifest
        console.print(f"[green]verified[/green]: run {m.run_id} ({m.name}), {len(m.files)} files, {m.samples} "
                      f"samples, {len(m.fingerprints)} fingerprinted arm(s)", highlight=False)
        return
    for problem in result.problems:
        console.print(f"[red]problem:[/red] {escape(problem)}", highlight=False, soft_wrap=True)
    raise BundleError(f"{bundle} does not verify ({len(result.problems)} problem(s))")
