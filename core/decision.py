"""The decision map's recommendation line: per prompt category, which setting to run, or "off".

For each category (the built-in suite's prompt kinds: code, prose, math, ...) every arm is compared
with the baseline on that category's requests only (paired, bootstrap interval). The best arm whose
interval lies above 1 is recommended; arms not separable from it (paired against it) form its plateau;
arms whose interval lies below 1 are where speculation loses. An arm that failed a quality gate or the
equal-work guard is never recommended. Nothing faster than the baseline: "off".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from .sample import Sample
from .stats import LEVEL, N_BOOT, ArmStats, Comparison, Interval, paired_ratio

__all__ = ["Recommendation", "recommend", "setting_label"]


class Recommendation(BaseModel):
    category: str
    prompts: list[str] = Field(default_factory=list)
    arm: str | None = Field(None, description="The arm to run (None: speculation off, the baseline).")
    setting: str = "off"
    ratio: Interval | None = Field(None, description="The recommended arm vs the baseline on this category.")
    plateau: list[str] = Field(default_factory=list, description="Arms not separable from the recommended one.")
    losses: list[str] = Field(default_factory=list, description="Arms slower than the baseline on this category.")
    line: str = ""


def setting_label(spec: dict[str, Any] | None) -> str:
    """'draft n-max 3', 'ngram', 'mtp n-max 2 p-min 0.75'; 'off' without speculation."""
    spec = spec or {}
    method = spec.get("method") or "none"
    if method == "none":
        return "off"
    parts = [str(method)]
    if spec.get("variant"):
        parts.append(str(spec["variant"]))
    for key, name in (("n_max", "n-max"), ("p_min", "p-min")):
        if spec.get(key) is not None:
            parts.append(f"{name} {spec[key]}")
    return " ".join(parts)


def _eligible(arm: str, stats: dict[str, ArmStats], comparisons: dict[str, Comparison]) -> bool:
    a, c = stats.get(arm), comparisons.get(arm)
    if a is None or c is None or a.failed_gates:
        return False
    return not (c.comparable is not None and c.comparable.get("ok") is False)


def recommend(samples: Sequence[Sample], baseline: str, arms: Sequence[ArmStats], comparisons: Sequence[Comparison],
              kinds: dict[str, str], specs: dict[str, dict[str, Any]], *, n_boot: int = N_BOOT,
              level: float = LEVEL, seed: int = 0) -> list[Recommendation]:
    """One recommendation per prompt category; [] when no arm speculates.

    :param kinds: prompt name -> category; :param specs: arm -> its speculative settings.
    """
    stats = {a.arm: a for a in arms}
    by_arm = {c.arm: c for c in comparisons if c.reference == baseline}
    candidates = [a for a in by_arm if _eligible(a, stats, by_arm) and setting_label(specs.get(a)) != "off"]
    if not candidates:
        return []
    categories: dict[str, list[str]] = {}
    for prompt in dict.fromkeys(s.prompt for s in samples):
        categories.setdefault(kinds.get(prompt, prompt), []).append(prompt)
    ref = [s for s in samples if s.arm == baseline]
    out = []
    for category, prompts in categories.items():
        def within(arm: str, prompts: list[str] = prompts) -> list[Sample]:
            return [s for s in samples if s.arm == arm and s.prompt in prompts]

        ratios: dict[str, Interval] = {}
        for arm in candidates:
            r = paired_ratio(within(arm), [s for s in ref if s.prompt in prompts], n_boot=n_boot, level=level,
                             seed=seed, key=f"decision/{category}/{arm}")
            if r is not None:
                ratios[arm] = r
        rec = Recommendation(category=category, prompts=prompts)
        rec.losses = [a for a, r in ratios.items() if r.hi < 1]
        winners = sorted((a for a, r in ratios.items() if r.lo > 1), key=lambda a: -ratios[a].estimate)
        if winners:
            best = winners[0]
            rec.arm, rec.setting, rec.ratio = best, setting_label(specs.get(best)), ratios[best]
            for other in ratios:
                if other == best:
                    continue
                vs = paired_ratio(within(other), within(best), n_boot=n_boot, level=level, seed=seed,
                                  key=f"decision/{category}/{other}/vs/{best}")
                if vs is not None and vs.lo <= 1 <= vs.hi:
                    rec.plateau.append(other)
            r = ratios[best]
            rec.line = f"{category}: {rec.setting}, {r.estimate:.2f}× ({r.lo:.2f}–{r.hi:.2f})"
            if rec.plateau:
                rec.line += f"; not separable from it: {', '.join(setting_label(specs.get(a)) for a in rec.plateau)}"
        else:
            rec.line = f"{category}: off (no setting is faster than {baseline})"
        if rec.losses:
            rec.line += f"; slower: {', '.join(setting_label(specs.get(a)) for a in rec.losses)}"
        out.append(rec)
    return out
