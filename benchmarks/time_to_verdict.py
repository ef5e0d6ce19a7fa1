"""How long does ``--until-ci`` take to reach the verdict that a fixed 3 passes × 3 reps run gives?

Two steps, so that hundreds of trials cost one real run:

1. ``collect``: one long ``bakeoff run`` of three llama.cpp arms on the same model, interleaved pass by
   pass as every run is: ``base``, ``twin`` (the same server, started separately: an identical pair)
   and ``other`` (a different thread count: a pair with a real ratio). Its run directory is the pool.
2. ``replay RUN_DIR``: each trial draws whole passes from the pool (without replacement, as a run's
   passes are separate engine starts) and keeps the first R reps of each prompt, so a trial sees exactly
   the samples a run of that design would have stored, and costs the wall time those requests, engine
   starts and warm-ups really took. Fixed designs keep P passes × R reps (3 × 3 is the reference); the
   adaptive ones start from one planned pass, as ``bakeoff run --until-ci`` does, and ask bakeoff's own
   rule (:func:`bakeoff.core.analysis.stats.needs_more_passes`, imported, not re-implemented) after every pass
   whether to add one. Every trial's paired ratio interval
   (:func:`bakeoff.core.analysis.stats.paired_ratio`, what the reports print) is checked against the truth: the
   pool's long-run paired ratio (all passes; trials resample the pool, so they centre on it, also for the
   identical pair, whose pool ratio is 1 only up to its launch noise). For the identical pair any verdict
   other than "not separable" is a false alarm.

Costs: the wall time of a pass for a pair is, for each of its two arms, the gap from the end of the
previous arm's last request to this arm's first request (stopping the previous engine, starting this one,
its warm-up), plus the time from the start of each request used to the start of the next (the request and
bakeoff's bookkeeping), the last one to its last token.

Usage::

    python benchmarks/time_to_verdict.py collect --model M.gguf --passes 40 --out runs/ttv
    python benchmarks/time_to_verdict.py replay runs/ttv/<run> [more pools] --trials 400 [--json FILE]
    python benchmarks/time_to_verdict.py validate --model M.gguf --out runs/ttv-validate --turns 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.core.analysis.stats import (
    Interval,
    needs_more_passes,
    paired_ratio,
    ratio_half_widths,
    verdict,
)
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir

__all__ = ["Pool", "Design", "load_pool", "replay", "main"]

BASE, TWIN, OTHER = "base", "twin", "other"


def collect_config(model: str, passes: int, reps: int, max_tokens: int, threads: tuple[int, int],
                   prompts: list[str], warmup: int = 1) -> str:
    """The pool's bakeoff file: base and twin identical (the twin's env only makes it a separate start)."""
    t_base, t_other = threads
    settings = f"{{ctx: 1024, parallel: 1, threads: {t_base}}}"
    return f"""name: time-to-verdict-pool
baseline: {BASE}
arms:
  - {{name: {BASE}, engine: llamacpp, model: "{model}", settings: {settings}}}
  - {{name: {TWIN}, engine: llamacpp, model: "{model}", settings: {settings}, env: {{BAKEOFF_TWIN: "1"}}}}
  - {{name: {OTHER}, engine: llamacpp, model: "{model}", settings: {{ctx: 1024, parallel: 1, threads: {t_other}}}}}
workload: {{prompts: {json.dumps(prompts)}, max_tokens: {max_tokens}, reps: {reps}, passes: {passes}, warmup: {warmup},
            modes: [greedy], request_timeout_s: 60}}
"""


# random-weight llama models (bakeoff's synthesizer, SmolLM2's tokenizer): speed depends on shapes only
SHAPES = {"small": {"hidden": 256, "layers": 4, "heads": 4, "kv_heads": 2, "ffn": 512},
          "medium": {"hidden": 512, "layers": 8, "heads": 8, "kv_heads": 4, "ffn": 1536}}


def synth_model(shape: str, tokenizer: Path) -> Path:
    """A random-weight llama GGUF of ``shape`` (for machines without a downloaded model)."""
    from bakeoff.engines.llamacpp.synth import Dims, SynthSpec, synthesize, tokenizer_from_dump

    dims = Dims(**SHAPES[shape], vocab_dtype="f16", scale=0.01)  # type: ignore[arg-type]
    return synthesize(SynthSpec("target", dims=dims), tokenizer_from_dump(tokenizer))


def bakeoff_command() -> list[str]:
    """The console script beside this Python, or the CLI through ``python -P`` (``pip install --target``)."""
    script = Path(sys.executable).with_name("bakeoff")
    return [str(script)] if script.exists() else [sys.executable, "-P", "-c",
                                                  "from bakeoff.core.cli import main; main()"]


def _model(args: argparse.Namespace) -> str:
    if not args.model.startswith("synth:"):
        return str(args.model)
    t0 = time.perf_counter()
    model = synth_model(args.model.split(":", 1)[1], Path(args.tokenizer))
    print(f"model {model} ({model.stat().st_size / 1e6:.0f} MB, {time.perf_counter() - t0:.0f} s)", flush=True)
    return str(model)


def collect(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = _model(args)
    config = out / "pool.yaml"
    config.write_text(collect_config(model, args.passes, args.reps, args.max_tokens,
                                     (args.threads_base, args.threads_other), args.prompts.split(","), args.warmup))
    cmd = bakeoff_command()
    argv = [*cmd, "run", str(config), "--out", str(out)]
    print("collecting the pool:", " ".join(argv), flush=True)
    # a run stopped by its deadline keeps every stored sample; replay uses complete passes only
    if not _bounded(argv, args.deadline_s):
        print(f"deadline {args.deadline_s} s reached; the passes done are the pool", flush=True)


def _bounded(cmd: list[str], timeout: float | None, quiet: bool = False) -> bool:
    """Run ``cmd``; at ``timeout`` stop it as Ctrl-C would (SIGTERM: bakeoff stops its engine, keeps its
    samples). False when it had to be stopped."""
    out = subprocess.DEVNULL if quiet else None
    with subprocess.Popen(cmd, stdout=out, stderr=out) as proc:
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            return False


def _run(config: Path, out: Path, extra: list[str], timeout: float) -> tuple[float, Path | None]:
    """One real ``bakeoff run``: its wall time (launches, warm-ups, report included) and run directory."""
    before = set(out.glob("*/")) if out.exists() else set()
    t0 = time.perf_counter()
    if timeout <= 0 or not _bounded([*bakeoff_command(), "run", str(config), "--out", str(out), *extra], timeout,
                                    quiet=True):
        return time.perf_counter() - t0, None
    new = sorted(set(out.glob("*/")) - before)
    return time.perf_counter() - t0, new[-1] if new else None


def validate(args: argparse.Namespace) -> None:
    """Real end-to-end runs, in turns: a fixed 3 × 3 run, then ``--until-ci`` (reps 1, one planned pass) with
    the target set to the widest ratio half-width that 3 × 3 run reached."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = _model(args)
    prompts = args.prompts.split(",")
    fixed, adaptive = out / "fixed.yaml", out / "adaptive.yaml"
    threads = (args.threads_base, args.threads_other)
    fixed.write_text(collect_config(model, 3, 3, args.max_tokens, threads, prompts))
    adaptive.write_text(collect_config(model, 1, 1, args.max_tokens, threads, prompts))
    end = time.monotonic() + args.deadline_s
    rows = []
    for turn in range(args.turns):
        left = end - time.monotonic()
        wall, run = _run(fixed, out / "runs", [], left)
        if run is None:
            break
        samples = RunDir.open(run).samples()
        widths = ratio_half_widths(samples, BASE)
        target = max(widths.values())
        rows.append({"turn": turn, "design": "fixed 3 passes × 3 reps", "wall_s": wall, "run": str(run),
                     **_intervals(samples)})
        print(json.dumps(rows[-1]), flush=True)
        rule = ["--until-ci", f"{target:.4f}", "--max-passes", "10"] + (["--stop-on-verdict"] * args.stop_on_verdict)
        wall, run = _run(adaptive, out / "runs", rule, end - time.monotonic())
        if run is None:
            break
        samples = RunDir.open(run).samples()
        design = f"--until-ci {target:.2%}" + (" --stop-on-verdict" if args.stop_on_verdict else "") + " (reps 1)"
        rows.append({"turn": turn, "design": design, "wall_s": wall, "run": str(run),
                     **_intervals(samples)})
        print(json.dumps(rows[-1]), flush=True)
    (out / "validate.json").write_text(json.dumps(rows, indent=2))


def _intervals(samples: list[Sample]) -> dict[str, Any]:
    got: dict[str, Any] = {"passes": len({s.pass_index for s in samples})}
    for arm in (OTHER, TWIN):
        ci = paired_ratio([s for s in samples if s.arm == arm], [s for s in samples if s.arm == BASE],
                          key=f"ratio/{arm}/{BASE}")
        if ci is not None:
            got[arm] = {"estimate": ci.estimate, "lo": ci.lo, "hi": ci.hi, "verdict": verdict(ci)}
    return got


def warmup_effect(path: Path) -> str:
    """One line: the pool's warm-up setting, its median engine-change cost, and the first timed request of each
    arm-pass against the later requests of the same prompt in that pass (log ratio: 0 = no cold-start effect)."""
    pool = load_pool(path)
    config = RunDir.open(path).read_record().to_json().get("config") or {}
    warm = (config.get("workload") or {}).get("warmup", "?")
    firsts = []
    for p in pool.passes:
        for ap in p.values():
            first, rest = ap.samples[0], [s for s in ap.samples[1:] if s.prompt == ap.samples[0].prompt]
            if rest and first.decode_tps and all(s.decode_tps for s in rest):
                firsts.append(math.log(first.decode_tps / statistics.median(s.decode_tps or 1.0 for s in rest)))
    overhead = statistics.median(ap.overhead_s for p in pool.passes for ap in p.values())
    if not firsts:
        return f"{path}: warm-up {warm}: no arm-pass with a first and a later request of one prompt"
    q = np.quantile(firsts, [0.25, 0.5, 0.75])
    return (f"{path}: warm-up {warm}, {len(pool.passes)} passes: engine change {overhead:.2f} s (median); first timed "
            f"request vs the rest of its prompt: {math.expm1(q[1]):+.1%} (quartiles {math.expm1(q[0]):+.1%}, "
            f"{math.expm1(q[2]):+.1%}; n {len(firsts)})")


@dataclass
class ArmPass:
    """One arm's samples in one pass, with what they cost."""

    samples: list[Sample]  # in the order they were sent
    overhead_s: float  # previous engine stopped, this one started and warmed up
    cost_s: list[float]  # per sample: its start to the next one's start (the last: to its last token)


@dataclass
class Pool:
    passes: list[dict[str, ArmPass]]  # complete passes only
    reps: int
    prompts: list[str]
    source: str = ""

    def truth(self, arm: str) -> float:
        """The long-run paired ratio arm/base over the whole pool (the same statistic a run reports)."""
        ci = paired_ratio(_relabel([p[arm] for p in self.passes], 99), _relabel([p[BASE] for p in self.passes], 99),
                          n_boot=1)
        assert ci is not None
        return ci.estimate


def _end(s: Sample) -> float:
    return s.started_at + (s.ttft_s or 0.0) + (s.decode_s or 0.0)


def load_pool(path: Path) -> Pool:
    """The complete passes of a pool run, with each arm-pass's real costs."""
    run = RunDir.open(path)
    meta = run.read_record().to_json()
    orders: list[list[str]] = meta.get("orders") or []
    by: dict[tuple[int, str], list[Sample]] = defaultdict(list)
    for s in run.samples():
        by[(s.pass_index, s.arm)].append(s)
    reps = max(s.rep for s in run.samples()) + 1
    prompts = sorted({s.prompt for s in run.samples()})
    expected = reps * len(prompts)
    previous_end = float(meta.get("started_at") or 0.0)
    passes = []
    for p, order in enumerate(orders):
        got: dict[str, ArmPass] = {}
        for arm in order:
            group = sorted(by.get((p, arm), []), key=lambda s: s.started_at)
            if not group:
                break
            starts = [s.started_at for s in group]
            cost = [b - a for a, b in itertools.pairwise(starts)] + [_end(group[-1]) - starts[-1]]
            got[arm] = ArmPass(group, max(0.0, starts[0] - previous_end) if previous_end else 0.0, cost)
            previous_end = _end(group[-1])
        complete = all(len(ap.samples) == expected and all(s.status == "ok" for s in ap.samples)
                       for ap in got.values())
        if set(got) == {BASE, TWIN, OTHER} and complete:
            passes.append(got)
    first = passes[0][BASE].overhead_s if passes else 0.0
    if passes and first == 0.0:  # the first arm of the run has no previous end: use the median start-up
        passes[0][BASE].overhead_s = statistics.median(ap.overhead_s for p in passes for ap in p.values())
    return Pool(passes, reps, prompts, str(path))


def _relabel(arm_passes: list[ArmPass], reps: int) -> list[Sample]:
    """The samples of the drawn passes, numbered 0.. in draw order, first ``reps`` reps of each prompt."""
    return [s.model_copy(update={"pass_index": i}) for i, ap in enumerate(arm_passes) for s in ap.samples
            if s.rep < reps]


def _cost(arm_passes: list[ArmPass], reps: int) -> float:
    return sum(ap.overhead_s + sum(c for s, c in zip(ap.samples, ap.cost_s, strict=True) if s.rep < reps)
               for ap in arm_passes)


@dataclass(frozen=True)
class Design:
    name: str
    reps: int
    passes: int = 3  # fixed designs: this many; adaptive: the passes configured before the rule takes over
    target: float | None = None  # --until-ci target (None: fixed)
    max_passes: int = 10
    baseline: str | None = BASE  # what the rule is told: with the baseline it reads the ratio, without each median
    stop_on_verdict: bool = False  # --stop-on-verdict: also stop once every verdict is clear (alpha spending)


@dataclass
class Outcome:
    wall_s: list[float] = field(default_factory=list)
    width: list[float] = field(default_factory=list)  # relative width of the ratio interval (hi - lo) / truth
    covered: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    passes: list[int] = field(default_factory=list)


def _trial(pool: Pool, design: Design, arm: str, rng: np.random.Generator, seed: int) -> tuple[float, Interval, int]:
    order = rng.permutation(len(pool.passes))
    drawn = [pool.passes[i] for i in order]
    n = design.passes
    while True:
        a, b = _relabel([p[arm] for p in drawn[:n]], design.reps), _relabel([p[BASE] for p in drawn[:n]], design.reps)
        if design.target is None or n >= len(drawn):
            break
        more, _ = needs_more_passes(a + b, n, design.target, design.max_passes, baseline=design.baseline, seed=seed,
                                    stop_on_verdict=design.stop_on_verdict)
        if not more:
            break
        n += 1
    ci = paired_ratio(a, b, seed=seed, key=f"ratio/{arm}/{BASE}")
    assert ci is not None
    return _cost([p[arm] for p in drawn[:n]], design.reps) + _cost([p[BASE] for p in drawn[:n]], design.reps), ci, n


def replay(pool: Pool, designs: list[Design], trials: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per pair and design: median wall time, median relative width, coverage, verdict counts."""
    out: dict[str, dict[str, Any]] = {}
    for arm in (OTHER, TWIN):
        truth = pool.truth(arm)  # the twin's too: trials resample this pool, so they centre on its ratio
        for d in designs:
            rng = np.random.default_rng([seed, zlib_key(arm + d.name)])
            o = Outcome()
            for t in range(trials):
                wall, ci, n = _trial(pool, d, arm, rng, seed + t)
                o.wall_s.append(wall)
                o.width.append((ci.hi - ci.lo) / truth)
                o.covered += ci.lo <= truth <= ci.hi
                o.verdicts[verdict(ci)] += 1
                o.passes.append(n)
            p = o.covered / trials
            out[f"{arm}/{d.name}"] = {
                "pair": f"{arm} vs {BASE}", "design": d.name, "truth": truth, "trials": trials,
                "median_wall_s": statistics.median(o.wall_s), "median_width": statistics.median(o.width),
                "coverage": p, "coverage_se": math.sqrt(p * (1 - p) / trials), "verdicts": dict(o.verdicts),
                "median_passes": statistics.median(o.passes), "max_passes_used": max(o.passes)}
    return out


def zlib_key(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


def designs_for(targets: list[float], adaptive_reps: list[int], medians: bool = False,
                fixed: tuple[tuple[int, int], ...] = ((3, 3),), verdict_stop: bool = False) -> list[Design]:
    """Fixed designs (passes, reps; 3 × 3 first: the reference), and --until-ci at each target and reps (from
    one planned pass, as a user would run it; the rule adds the rest). ``medians``: also the rule reading
    each arm's median, as it did before it read the ratio; ``verdict_stop``: also with --stop-on-verdict."""
    out = [Design(f"fixed {p} passes × {r} reps", reps=r, passes=p) for p, r in fixed]
    for r in adaptive_reps:
        for t in targets:
            out.append(Design(f"--until-ci {t:.0%}, reps {r}", reps=r, passes=1, target=t))
            if medians:
                out.append(Design(f"--until-ci {t:.0%}, reps {r}, arm medians", reps=r, passes=1, target=t,
                                  baseline=None))
            if verdict_stop:
                out.append(Design(f"--until-ci {t:.0%} --stop-on-verdict, reps {r}", reps=r, passes=1, target=t,
                                  stop_on_verdict=True))
    return out


def print_table(pool: Pool, results: dict[str, dict[str, Any]]) -> None:
    print(f"\npool: {pool.source}: {len(pool.passes)} complete passes, {pool.reps} reps × {len(pool.prompts)} "
          f"prompts per arm-pass; truth (the pool's ratio) {OTHER}/{BASE} = {pool.truth(OTHER):.4f}, {TWIN}/{BASE} = "
          f"{pool.truth(TWIN):.4f}; for the identical pair any verdict but 'not separable' is a false alarm")
    fixed: dict[str, float] = {}
    for r in results.values():  # the first design of each pair is the reference
        fixed.setdefault(r["pair"], r["median_wall_s"])
    print("\n| pair | design | median wall s | vs 3×3 | median passes | median CI width | coverage | verdicts |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in results.values():
        v = ", ".join(f"{k} {n}" for k, n in sorted(r["verdicts"].items()))
        print(f"| {r['pair']} | {r['design']} | {r['median_wall_s']:.1f} | {r['median_wall_s'] / fixed[r['pair']]:.2f} "
              f"| {r['median_passes']:g} | {r['median_width']:.1%} | {r['coverage']:.3f} ± {r['coverage_se']:.3f} "
              f"| {v} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="one long interleaved run of base, twin and other: the pool")
    v = sub.add_parser("validate", help="real runs in turns: fixed 3 × 3, then --until-ci at its width")
    for p in (c, v):
        p.add_argument("--model", required=True, help="a GGUF path, a built-in name (smollm2), or synth:small / "
                       "synth:medium (random weights; needs --tokenizer)")
        p.add_argument("--tokenizer", help="gzipped tokenizer dump for synth: models (smollm2_tokenizer.json.gz)")
        p.add_argument("--out", required=True)
        p.add_argument("--max-tokens", type=int, default=64)
        p.add_argument("--prompts", default="code_python,prose")
        p.add_argument("--threads-base", type=int, default=2)
        p.add_argument("--threads-other", type=int, default=3)
        p.add_argument("--deadline-s", type=float, default=None if p is c else 600.0, help="stop after this long")
    c.add_argument("--passes", type=int, default=40)
    c.add_argument("--reps", type=int, default=3)
    c.add_argument("--warmup", type=int, default=1, help="untimed requests after each engine start (0: none)")
    v.add_argument("--turns", type=int, default=3)
    v.add_argument("--stop-on-verdict", action="store_true", help="the --until-ci runs also stop on a clear verdict")
    w = sub.add_parser("warmup", help="what a warm-up buys: the first timed request against the rest, and its cost")
    w.add_argument("run_dirs", type=Path, nargs="+", help="pool run directories (collected with and without)")
    m = sub.add_parser("model", help="write the random-weight model and print its path")
    m.add_argument("shape", choices=sorted(SHAPES))
    m.add_argument("--tokenizer", type=Path, required=True)
    r = sub.add_parser("replay", help="trials of the fixed and adaptive designs drawn from a pool")
    r.add_argument("run_dirs", type=Path, nargs="+", help="pool run directories (their passes are pooled)")
    r.add_argument("--trials", type=int, default=1000)
    r.add_argument("--targets", default="0.02,0.03,0.05", help="--until-ci targets to try")
    r.add_argument("--adaptive-reps", default="1,3")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", type=Path)
    r.add_argument("--fixed", default="3x3", help="fixed designs, PASSESxREPS, the first is the reference")
    r.add_argument("--medians", action="store_true", help="also the rule reading each arm's median")
    r.add_argument("--stop-on-verdict", action="store_true", help="also the rule with --stop-on-verdict")
    r.add_argument("--min-pool", type=int, default=10, help="fewest complete passes a pool may have")
    args = ap.parse_args()
    if args.cmd == "model":
        print(synth_model(args.shape, args.tokenizer))
        return
    if args.cmd in ("collect", "validate"):
        (collect if args.cmd == "collect" else validate)(args)
        return
    if args.cmd == "warmup":
        for d in args.run_dirs:
            print(warmup_effect(d))
        return
    pools = [load_pool(d) for d in args.run_dirs]
    pool = Pool([p for x in pools for p in x.passes], pools[0].reps, pools[0].prompts,
                " + ".join(x.source for x in pools))
    if len(pool.passes) < args.min_pool:
        sys.exit(f"{pool.source}: only {len(pool.passes)} complete passes; a pool needs at least {args.min_pool}")
    t0 = time.perf_counter()
    results = replay(pool, designs_for([float(x) for x in args.targets.split(",")],
                                       [int(x) for x in args.adaptive_reps.split(",")], args.medians,
                                       tuple((int(f.split("x")[0]), int(f.split("x")[1]))
                                             for f in args.fixed.split(",")), args.stop_on_verdict),
                     args.trials, args.seed)
    print_table(pool, results)
    print(f"\n({args.trials} trials per row, {time.perf_counter() - t0:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"pool": pool.source, "passes": len(pool.passes), "results": results},
                                        indent=2))


if __name__ == "__main__":
    main()
