"""Comparing two runs made at different times (``bakeoff compare RUN_A RUN_B``).

Requests of different runs cannot be paired, so each matched arm gets the ratio of its medians B/A with
an interval from resampling each run on its own (passes, then requests), restricted to the prompts and
modes both runs measured. Arms are matched by name unless a mapping says otherwise. Each run's own
speedup over its baseline is shown next to it: a change in hardware or load moves every arm, a real
change in one arm moves its speedup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field

from ..analysis.stats import LEVEL, N_BOOT, Comparison, unpaired_ratio, verdict
from ..common.errors import ConfigError
from ..config.fingerprint import fingerprint_differences
from ..host.rig import hardware_differences, hardware_key
from ..results.record import RunRecord
from ..results.sample import Sample
from ..results.store import RunDir, read_samples
from .markdown import markdown_table
from .model import REPORT_SCHEMA_VERSION, RunSummary, summarize_run
from .tables import fmt, fmt_interval

__all__ = ["ArmChange", "RunComparison", "compare_runs", "comparison_table", "render_comparison_markdown"]


class ArmChange(BaseModel):
    arm_a: str
    arm_b: str
    median_a: float | None
    median_b: float | None
    change: Comparison = Field(description="B over A: ratio of medians, unpaired.")
    speedup_a: float | None = Field(None, description="Run A: paired ratio of this arm to A's baseline.")
    speedup_b: float | None = None


class RunComparison(BaseModel):
    schema_version: int = REPORT_SCHEMA_VERSION
    kind: str = "bakeoff-run-comparison"
    run_a: str
    run_b: str
    prompts: list[str]
    arms: list[ArmChange]
    unmatched_a: list[str] = Field(default_factory=list)
    unmatched_b: list[str] = Field(default_factory=list)
    differences: list[str] = Field(default_factory=list, description="What differs between the runs' setups.")
    comparable: list[str] = Field(default_factory=list, description="Per matched arm: the same configuration "
                                  "fingerprint on the same hardware, or what differs (configuration, hardware).")
    bootstrap_seed: int = 0


def compare_runs(path_a: Path, path_b: Path, mapping: Mapping[str, str] | None = None, *, n_boot: int = N_BOOT,
                 level: float = LEVEL, seed: int = 0) -> RunComparison:
    """Match arms of two runs and compare each pair.

    :param mapping: arm of A -> arm of B, for arms renamed between runs; others match by name.
    :raises ConfigError: no arm matches, or a mapped arm does not exist.
    """
    sa, sb = summarize_run(path_a, n_boot=n_boot, level=level), summarize_run(path_b, n_boot=n_boot, level=level)
    xa, xb = _with_lengths(read_samples(path_a), sa), _with_lengths(read_samples(path_b), sb)
    names_a, names_b = [a.arm for a in sa.arms], [a.arm for a in sb.arms]
    pairs = {a: a for a in names_a if a in names_b}
    for a, b in (mapping or {}).items():
        if a not in names_a or b not in names_b:
            raise ConfigError(f"--pair {a}={b}: run A has arms {names_a}, run B has arms {names_b}")
        pairs[a] = b
    if not pairs:
        raise ConfigError(f"no arm of {path_a.name} ({', '.join(names_a)}) matches one of {path_b.name} "
                          f"({', '.join(names_b)}); map them with --pair A_ARM=B_ARM")
    margin = min(sa.equivalence_margin, sb.equivalence_margin)  # 'equivalent' only within both runs' margins
    changes, skipped = [], []
    for a, b in pairs.items():
        ratio = unpaired_ratio([s for s in xb if s.arm == b], [s for s in xa if s.arm == a], n_boot=n_boot,
                               level=level, seed=seed, key=f"compare/{a}/{b}")
        if ratio is None:
            skipped.append(f"{a}: no prompt, mode and length measured by both runs")
            continue
        ma, mb = sa.arm(a), sb.arm(b)
        ca, cb = sa.comparison(a), sb.comparison(b)
        changes.append(ArmChange(
            arm_a=a, arm_b=b, median_a=ma.median.estimate if ma and ma.median else None,
            median_b=mb.median.estimate if mb and mb.median else None,
            change=Comparison(arm=b, reference=a, ratio=ratio, verdict=verdict(ratio, margin), margin=margin,
                              paired=False),
            speedup_a=ca.ratio.estimate if ca else (1.0 if a == sa.baseline else None),
            speedup_b=cb.ratio.estimate if cb else (1.0 if b == sb.baseline else None)))
    return RunComparison(run_a=path_a.name, run_b=path_b.name, prompts=[p for p in sa.prompts if p in sb.prompts],
                         arms=changes, unmatched_a=[a for a in names_a if a not in pairs],
                         unmatched_b=[b for b in names_b if b not in pairs.values()],
                         differences=_differences(sa, sb, pairs) + skipped, bootstrap_seed=seed,
                         comparable=comparability(RunDir.open(path_a).read_record(strict=False),
                                                  RunDir.open(path_b).read_record(strict=False), pairs))


def comparability(a: RunRecord, b: RunRecord, pairs: Mapping[str, str]) -> list[str]:
    """Per matched arm: comparable (same configuration fingerprint, same hardware) or what differs."""
    hw = hardware_differences(hardware_key(a.host, a.gpus), hardware_key(b.host, b.gpus))
    out = []
    for arm_a, arm_b in pairs.items():
        name = arm_a if arm_a == arm_b else f"{arm_a} → {arm_b}"
        fa, fb = a.fingerprints.get(arm_a), b.fingerprints.get(arm_b)
        if fa is None or fb is None:
            out.append(f"{name}: no configuration fingerprint recorded in {'A' if fa is None else 'B'} (a run made "
                       "before fingerprints): cannot tell whether the configurations are the same")
            continue
        config = fingerprint_differences(fa.canonical, fb.canonical) if fa.id != fb.id else []
        if not config and not hw:
            out.append(f"{name}: comparable: the same configuration ({fa.id}) on the same hardware")
            continue
        parts = [f"configuration differs ({fa.id} → {fb.id}): {'; '.join(config)}"] if config else \
            [f"the same configuration ({fa.id})"]
        if hw:
            parts.append(f"hardware differs: {'; '.join(hw)}")
        out.append(f"{name}: not comparable as an arm effect: " + ", ".join(parts))
    return out


def _with_lengths(samples: list[Sample], s: RunSummary) -> list[Sample]:
    """Samples written before requests recorded their max_tokens get the run's, so old and new runs meet."""
    if s.max_tokens is None:
        return samples
    return [x if getattr(x, "max_tokens", None) is not None else x.model_copy(update={"max_tokens": s.max_tokens})
            for x in samples]


def _differences(a: RunSummary, b: RunSummary, pairs: Mapping[str, str]) -> list[str]:
    """Setup differences a reader must know before believing a change: workload, host, engine versions."""
    out = []
    for label, va, vb in (("max_tokens", a.max_tokens, b.max_tokens), ("modes", a.modes, b.modes),
                          ("prompts", a.prompts, b.prompts), ("cpu", a.host.get("cpu_model"), b.host.get("cpu_model")),
                          ("gpus", a.host.get("gpus"), b.host.get("gpus"))):
        if va != vb:
            out.append(f"{label}: {va} → {vb}")
    for arm_a, arm_b in pairs.items():
        ea, eb = a.engines.get(arm_a), b.engines.get(arm_b)
        for key in ("engine", "version", "model", "speculative"):
            va, vb = getattr(ea, key, None), getattr(eb, key, None)
            if va != vb:
                out.append(f"{arm_a}: {key} {_shown(va)} → {_shown(vb)}")
    return out


def _shown(value: object) -> object:
    """A recorded value as the change line prints it (speculative settings: only the knobs that were set)."""
    return value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value


def comparison_table(c: RunComparison) -> tuple[list[str], list[list[str]]]:
    header = ["arm", "A median", "B median", "B / A", "verdict", "A vs its baseline", "B vs its baseline"]
    rows = []
    for ch in c.arms:
        name = ch.arm_a if ch.arm_a == ch.arm_b else f"{ch.arm_a} → {ch.arm_b}"
        r = ch.change.ratio
        rows.append([name, fmt(ch.median_a), fmt(ch.median_b), fmt_interval(r, 3).replace(" (", "× ("),
                     ch.change.verdict, fmt(ch.speedup_a, 3), fmt(ch.speedup_b, 3)])
    return header, rows


def render_comparison_markdown(c: RunComparison) -> str:
    lines = [f"## {c.run_b} vs {c.run_a}", "", markdown_table(*comparison_table(c)), "",
             f"- B / A: ratio of median decode tok/s over the prompts both runs measured ({', '.join(c.prompts)}); "
             "runs cannot be paired request by request, so each run is resampled on its own; 'faster'/'slower' "
             "only when the interval excludes 1."]
    if c.unmatched_a or c.unmatched_b:
        lines.append(f"- not matched: A {c.unmatched_a or '–'}, B {c.unmatched_b or '–'}")
    lines += [f"- differs: {d}" for d in c.differences]
    lines += [f"- {line}" for line in c.comparable]
    return "\n".join(lines) + "\n"
