"""``bakeoff calibrate``: forced-acceptance calibration from a file's ``calibrate:`` section or from flags.

Either way it becomes a bakeoff file holding only that section (``arms: []``), run exactly as ``bakeoff
run`` runs one (core/cli/running.py ``run_loaded``): the same arms, run directory, reports and exit codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml

from ..common.errors import ConfigError
from ..config.loader import load_bakeoff, parse_bakeoff
from .exit_codes import EXIT_CODES_HELP
from .running import TABLES_HELP, run_loaded

__all__ = ["calibrate_command", "calibration_file"]

# The workload of a calibration given by flags: one code prompt, enough tokens for a steady decode rate,
# no quality gates (synthesized models emit a counter walk, not answers).
_WORKLOAD: dict[str, Any] = {"prompts": ["code_python"], "max_tokens": 96, "reps": 3, "warmup": 1, "gates": []}


def _numbers(text: str, flag: str, kind: type[int] | type[float]) -> list[Any]:
    try:
        values = [kind(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: give comma-separated {'integers' if kind is int else 'numbers'}, "
                          f"e.g. {'1,2,3' if kind is int else '0.5,0.85,1.0'}") from None
    if not values:
        raise ConfigError(f"{flag}: give at least one value")
    return values


def _shape(text: str) -> str | dict[str, int]:
    """'tiny', or 'hidden=256,layers=4' -> {hidden: 256, layers: 4}."""
    if text == "tiny":
        return text
    out = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise ConfigError(f"--shape {text!r}: give tiny or key=integer pairs, e.g. hidden=256,layers=4") from None
        if not eq or not key.strip():
            raise ConfigError(f"--shape {text!r}: give tiny or key=integer pairs, e.g. hidden=256,layers=4")
    return out


def calibration_file(engine: str, method: str, n_max: str, acceptance: str, shape: str | None = None,
                     model: str | None = None, threads: int | None = None, max_tokens: int | None = None,
                     reps: int | None = None) -> str:
    """The bakeoff file (YAML text) a calibration given by flags stands for."""
    section: dict[str, Any] = {"engine": engine, "method": method, "n_max": _numbers(n_max, "--n-max", int),
                               "acceptance": _numbers(acceptance, "--acceptance", float),
                               "settings": {"ctx": 1024, **({"threads": threads} if threads else {})}}
    if shape is not None:
        section["shape"] = _shape(shape)
    if model is not None:
        section["model"] = model
    workload = {**_WORKLOAD, **({"max_tokens": max_tokens} if max_tokens else {}), **({"reps": reps} if reps else {})}
    data = {"name": f"calibrate-{engine}-{method}", "arms": [], "calibrate": [section], "workload": workload}
    return yaml.safe_dump(data, sort_keys=False)


def calibrate_command(
    file: Path | None = typer.Argument(None, help="Bakeoff YAML file with a calibrate: section (or give --engine)"),
    engine: str | None = typer.Option(None, "--engine", help="llamacpp (synthesized models) or vllm (synthetic "
                                      "rejection sampling)"),
    method: str | None = typer.Option(None, "--method", help="llamacpp: mtp or dflash; vllm: ngram or draft "
                                      "(default mtp on llamacpp, ngram on vllm)"),
    n_max: str = typer.Option("1,2,3", "--n-max", help="Draft lengths, comma-separated"),
    acceptance: str = typer.Option("0,0.5,0.85,1.0", "--acceptance", help="Forced acceptances, comma-separated"),
    shape: str | None = typer.Option(None, "--shape", help="llamacpp: the synthesized model's dimensions: tiny "
                                     "(default) or e.g. hidden=256,layers=4"),
    model: str | None = typer.Option(None, "--model", help="vllm: the model served (default smollm2)"),
    threads: int | None = typer.Option(None, "--threads", min=1, help="Engine threads"),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=2, help="Tokens per request (default 96)"),
    reps: int | None = typer.Option(None, "--reps", min=1, help="Requests per point (default 3)"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directory"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print every command the calibration would run, run none"),
    tables: bool = typer.Option(False, "--tables", "-v", help=TABLES_HELP),
) -> None:
    given = {"--engine": engine, "--method": method, "--shape": shape, "--model": model, "--threads": threads,
             "--max-tokens": max_tokens, "--reps": reps}
    if file is not None:
        flags = [f for f, v in given.items() if v is not None]
        if flags:
            raise ConfigError(f"{', '.join(flags)}: give either a FILE or flags, not both (the file's calibrate: "
                              "section says everything)")
        config = load_bakeoff(file)
        if not config.calibrate:
            raise ConfigError(f"{file}: no calibrate: section; `bakeoff run {file}` runs its arms")
    else:
        if engine is None:
            raise ConfigError("give a FILE with a calibrate: section, or --engine llamacpp|vllm")
        method = method or ("mtp" if engine == "llamacpp" else "ngram")
        text = calibration_file(engine, method, n_max, acceptance, shape, model, threads, max_tokens, reps)
        config = parse_bakeoff(text, "bakeoff calibrate")
    run_loaded(config, out, dry_run=dry_run, tables=tables)


calibrate_command.__doc__ = f"""Measure the speedup each forced acceptance gives per n_max, and the break-even \
acceptance.

From FILE's calibrate: section, or from --engine/--method/--n-max/--acceptance. Runs and reports
exactly like `bakeoff run` on a file holding only that section.

{EXIT_CODES_HELP}
"""
