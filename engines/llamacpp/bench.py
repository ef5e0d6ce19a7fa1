"""The llama-bench reference: the same build's ``llama-bench`` on the same GGUF, beside an arm's decode rate.

Users quote ``llama-bench`` for llama.cpp speed; a server adds its HTTP, sampling and slot work on top (on the
lent H200 llama-bench read tg256 359.2 tok/s where llama-server gave 329.5). For a launched llama.cpp arm this
runs ``llama-bench`` from the same build as the arm's ``llama-server`` (beside it, or bakeoff's cached build of
the same version and backend: engines/llamacpp/build.py) on the arm's own model with its matching settings:

- threads ``-t``, GPU layers ``-ngl`` (``all``/``auto``: every layer, 999), flash attention ``-fa``, batch
  ``-b``/``-ub`` and KV type ``-ctk``/``-ctv``, where the arm sets them (else both tools use their defaults);
- depth ``-d``: the prompt tokens the arm's answers started from; ``-n``: the arm's answer length; ``-p 0``.

and reports llama-bench's tg at that depth next to the arm's decode rate, with the server's share of it
(server / llama-bench). A build mismatch (llama-bench's ``build_number`` against the server's ``--version``)
is refused, never compared. llama-bench has no speculation (ggml-org/llama.cpp #22947): the reference is the
target model's plain decode, so a speculative arm's share can exceed 100 %.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bakeoff.core import Arm, EngineUnavailable

__all__ = ["BenchResult", "bench_argv", "parse_bench_json", "reference", "server_build_number"]

ALL_LAYERS = 999  # llama-bench takes a layer count: more than any model has puts every layer on the GPU


@dataclass(frozen=True)
class BenchResult:
    """llama-bench's tg test: the mean and spread of its repetitions."""

    tg_tps: float
    stddev_tps: float
    n_gen: int
    depth: int
    build_number: int | None
    build_commit: str | None


def bench_argv(binary: Path, model: str, arm: Arm, depth: int, n_gen: int, reps: int = 3) -> list[str]:
    """The llama-bench command matching the arm's settings (only those the arm sets)."""
    s = arm.settings
    argv = [str(binary), "-m", model, "-p", "0", "-n", str(n_gen), "-d", str(depth), "-r", str(reps), "-o", "json"]
    if s.threads is not None:
        argv += ["-t", str(s.threads)]
    if s.gpu_layers is not None:
        argv += ["-ngl", str(ALL_LAYERS if s.gpu_layers in ("all", "auto") else s.gpu_layers)]
    if s.flash_attn is not None:
        argv += ["-fa", s.flash_attn]
    for flag, value in (("-b", s.batch), ("-ub", s.ubatch), ("-ctk", s.kv_type), ("-ctv", s.kv_type)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def parse_bench_json(text: str) -> BenchResult:
    """The tg record of ``llama-bench -o json`` (a list of test records; tg: n_prompt 0, n_gen > 0).

    :raises ValueError: no tg record, or one without a rate.
    """
    start = text.find("[")
    records = json.loads(text[start:]) if start >= 0 else None
    if not isinstance(records, list):
        raise ValueError("llama-bench printed no JSON list of tests")
    for r in records:
        if isinstance(r, dict) and r.get("n_prompt") == 0 and isinstance(r.get("n_gen"), int) and r["n_gen"] > 0:
            rate, spread = r.get("avg_ts"), r.get("stddev_ts")
            if not isinstance(rate, (int, float)) or rate <= 0:
                raise ValueError(f"llama-bench's tg test has no rate: avg_ts {rate!r}")
            number = r.get("build_number")
            commit = r.get("build_commit")
            return BenchResult(tg_tps=float(rate), stddev_tps=float(spread or 0.0), n_gen=r["n_gen"],
                               depth=int(r.get("n_depth") or 0), build_number=number if isinstance(number, int)
                               else None, build_commit=commit if isinstance(commit, str) else None)
    raise ValueError("llama-bench's JSON has no tg test (n_prompt 0, n_gen > 0)")


def server_build_number(server: Path, env: dict[str, str]) -> int | None:
    """The build number ``llama-server --version`` prints ("version: 11434 (abcdef0)"), or None."""
    try:
        done = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env}, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout + done.stderr  # b11434: "version: 0.6.0-dev (build 11434, commit unknown)"
    m = re.search(r"\(build (\d+)", text) or re.search(r"version:\s*(\d+)\b(?!\.)", text)
    return int(m[1]) if m else None


def _median(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def reference(adapter: Any, arm: Arm, depth: int, n_gen: int, server_tps: Sequence[float | None],
              log: Callable[[str], None] = lambda msg: None, timeout_s: float = 600) -> dict[str, Any]:
    """Run llama-bench for one launched arm and set its tg beside the arm's decode rate.

    :param adapter: the arm's LlamaCppAdapter (its installer locates the arm's llama-server).
    :param depth: prompt tokens the arm's answers started from; ``n_gen``: their length.
    :param server_tps: the arm's decode rates (bakeoff's, per answer); the median is compared.
    :returns: the reference as summary.json records it, its ``line`` the sentence the terminal prints; a
        reference that could not be made has ``error`` instead of ``tg_tps``.
    """
    from .build import cached_llama_bench

    out: dict[str, Any] = {"arm": arm.name, "depth": depth, "n_gen": n_gen}
    if arm.attached or arm.launch != "native":
        out["error"] = "only a launched (native) llama.cpp arm has a build and a GGUF to bench"
        out["line"] = f"llama-bench reference: n/a ({out['error']})"
        return out
    try:
        program = adapter.installer.locate(adapter.options(arm))
    except EngineUnavailable as exc:
        out["error"] = str(exc)
        out["line"] = f"llama-bench reference: n/a ({exc})"
        return out
    server = Path(program.argv[0])
    bench = cached_llama_bench(server)
    if bench is None:
        out["error"] = (f"no llama-bench of the same build as {server}: build it with `python -c 'from "
                        "bakeoff.engines.llamacpp.build import build_llama_bench; build_llama_bench()'` (about "
                        "10 minutes on 2 cores), or put llama-bench beside llama-server")
        out["line"] = f"llama-bench reference: n/a ({out['error']})"
        return out
    model = adapter.model_ref(arm.launched_model)  # the file the arm's llama-server loads
    argv = bench_argv(bench, model, arm, depth, n_gen)
    out["argv"] = argv
    log(f"{arm.name}: {' '.join(argv)}")
    env = {**os.environ, **program.env, "LD_LIBRARY_PATH": os.pathsep.join(
        filter(None, [str(bench.parent), program.env.get("LD_LIBRARY_PATH"), os.environ.get("LD_LIBRARY_PATH")]))}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
        result = parse_bench_json(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        tail = locals().get("done")
        why = f"{type(exc).__name__}: {exc}"
        if tail is not None:
            why += f" (exit {tail.returncode}; {tail.stderr.strip().splitlines()[-1:]})"
        out["error"] = why
        out["line"] = f"llama-bench reference: failed ({why})"
        return out
    server_build = server_build_number(server, program.env)
    out.update({k: v for k, v in asdict(result).items()}, server_build_number=server_build, llama_bench=str(bench))
    if server_build is not None and result.build_number is not None and server_build != result.build_number:
        out["error"] = f"llama-bench is build {result.build_number}, llama-server build {server_build}: not compared"
        out["line"] = f"llama-bench reference: refused ({out['error']})"
        return out
    tps = _median(server_tps)
    out["server_tps"] = tps
    out["share"] = tps / result.tg_tps if tps is not None else None
    share = f"{out['share']:.0%}" if out["share"] is not None else "n/a"
    server_text = f"{tps:.1f}" if tps is not None else "n/a"
    out["line"] = (f"decode {server_text} tok/s; llama-bench tg{n_gen} @ d{depth} {result.tg_tps:.1f} "
                   f"± {result.stddev_tps:.1f} tok/s (build {result.build_number}); server share {share}")
    return out
