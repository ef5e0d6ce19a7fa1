"""The decision map: per use case (prompt category, and the depth and concurrency it ran at), which
setting to run, which settings tie with it, and where speculation loses.

For each use case every speculating arm is compared with the baseline on that use case's requests only
(paired, bootstrap interval). The best arm whose interval lies above 1 is recommended; arms not separable
from it (paired against it, not against the baseline) form its plateau; arms whose interval lies below 1
are where speculation loses. An arm that failed a quality gate or the equal-work guard is never
recommended. "off" is drawn only when every interval excludes a gain beyond the equivalence margin (3 %); an
interval that reaches past it, with none above 1, is "no recommendation: inconclusive", with the arm that
leaves it open, so a wide interval on a busy machine is never read as "speculation does not pay". Each use
case keeps every arm's paired ratio and verdict (``cells``), which the reports show as one decision-map table
per category.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..config.schema import Speculative
from ..results.sample import Sample
from .stats import (
    EQUIVALENCE_MARGIN,
    LEVEL,
    MIN_PAIRS,
    N_BOOT,
    ArmStats,
    Comparison,
    Interval,
    Verdict,
    margin_text,
    paired_ratio,
    too_few_pairs,
    undecided,
    verdict,
)

__all__ = ["DecisionCell", "Recommendation", "condition_label", "plateau_text", "recommend", "setting_label"]

Role = Literal["best", "plateau", "loses", ""]


class DecisionCell(BaseModel):
    """One arm in one use case: its paired ratio over the baseline and what the map makes of it."""

    arm: str
    setting: str
    ratio: Interval | None = None
    verdict: Verdict | None = Field(None, description=f"None with fewer than {MIN_PAIRS} paired requests.")
    role: Role = Field("", description="best: recommended; plateau: not separable from the best; loses: "
                                       "slower than the baseline.")


class Recommendation(BaseModel):
    category: str
    use_case: str = Field("", description="The category with its depth and streams when the run swept them.")
    depth: int | None = None
    streams: int | None = None
    prompts: list[str] = Field(default_factory=list)
    arm: str | None = Field(None, description="The arm to run (None: speculation off, the baseline).")
    setting: str = Field("off", description="The setting to run; 'inconclusive' when no comparison decided.")
    decided: bool = Field(True, description="False: an interval fits a gain beyond the equivalence margin and "
                                            "none is shown, so nothing is recommended (more passes would tell).")
    ratio: Interval | None = Field(None, description="The recommended arm vs the baseline on this use case.")
    plateau: list[str] = Field(default_factory=list, description="Arms not separable from the recommended one.")
    losses: list[str] = Field(default_factory=list, description="Arms slower than the baseline on this use case.")
    cells: list[DecisionCell] = Field(default_factory=list, description="Every speculating arm on this use case.")
    excluded: list[str] = Field(default_factory=list, description="Speculating arms left out of the map, with "
                                "why (a failed quality gate, or not equal work: e.g. nothing drafted).")
    line: str = ""


def setting_label(spec: Speculative | None) -> str:
    """'draft n-max 3', 'ngram', 'mtp n-max 2 p-min 0.75'; 'off' without speculation."""
    if spec is None or not spec.enabled:
        return "off"
    parts = [spec.method, *([spec.variant] if spec.variant else [])]
    parts += [f"{name} {value}" for name, value in (("n-max", spec.n_max), ("p-min", spec.p_min)) if value is not None]
    return " ".join(parts)


def condition_label(depth: int | None, streams: int | None) -> str:
    """'depth 512, 2 streams'; '' for plain requests."""
    parts = [f"depth {depth}" if depth is not None else "",
             f"{streams} stream{'s' if streams != 1 else ''}" if streams is not None else ""]
    return ", ".join(p for p in parts if p)


def _is_number(word: str) -> bool:
    return re.fullmatch(r"-?\d+(?:\.\d+)?", word) is not None


def plateau_text(labels: Sequence[str]) -> str:
    """Settings that tie, written the way people say it: labels differing only in one number are merged,
    so 'draft n-max 2', 'draft n-max 3', 'draft n-max 4' read 'draft n-max 2, 3, 4'."""
    left = list(dict.fromkeys(labels))
    parts: list[str] = []
    while left:
        groups: dict[tuple[int, tuple[str, ...]], list[str]] = {}
        for label in left:
            words = label.split(" ")
            for i, w in enumerate(words):
                if _is_number(w):
                    groups.setdefault((i, tuple([*words[:i], "#", *words[i + 1:]])), []).append(w)
        (i, template), values = max(groups.items(), key=lambda kv: len(kv[1]), default=((0, ()), []))
        if len(values) < 2:
            parts += left
            break
        merged = " ".join(", ".join(sorted(values, key=float)) if k == i else w for k, w in enumerate(template))
        parts.append(merged)
        left = [lab for lab in left if not (len(lab.split(" ")) == len(template) and all(
            k == i or w == t for k, (w, t) in enumerate(zip(lab.split(" "), template, strict=True))))]
    return "; ".join(parts)


def _exclusion(arm: str, stats: dict[str, ArmStats], comparisons: dict[str, Comparison]) -> str | None:
    """Why an arm cannot be recommended (None: it can)."""
    a, c = stats.get(arm), comparisons.get(arm)
    if a is None or c is None:
        return "not measured"
    if a.failed_gates:
        return f"failed gates: {', '.join(a.failed_gates)}"
    if c.comparable is not None and c.comparable.get("ok") is False:
        reasons = [str(r).removeprefix(f"{arm}: ") for r in c.comparable.get("reasons") or []]
        return "; ".join(reasons) or "not equal work"
    return None


def _decide(rec: Recommendation, candidates: Sequence[str], within: Callable[[str], list[Sample]], ref: list[Sample],
            specs: dict[str, Speculative], baseline: str, boot: dict[str, Any], margin: float) -> Recommendation:
    """Fill one use case: every arm's paired ratio, the best arm, its plateau, the losses and the line."""
    measured: dict[str, Interval] = {}
    for arm in candidates:
        r = paired_ratio(within(arm), ref, **boot)
        if r is not None:
            measured[arm] = r
    ratios = {a: r for a, r in measured.items() if not too_few_pairs(r)}  # only these get a verdict
    label = {a: setting_label(specs.get(a)) for a in candidates}
    rec.cells = [DecisionCell(arm=a, setting=label[a], ratio=measured.get(a),
                              verdict=verdict(ratios[a], margin) if a in ratios else None) for a in candidates]
    rec.losses = [a for a, r in ratios.items() if r.hi < 1]
    winners = sorted((a for a, r in ratios.items() if r.lo > 1), key=lambda a: -ratios[a].estimate)
    head = rec.use_case
    if winners:
        best = winners[0]
        rec.arm, rec.setting, rec.ratio = best, label[best], ratios[best]
        for other in ratios:
            if other == best:
                continue
            vs = paired_ratio(within(other), within(best), **boot)
            if vs is not None and vs.lo <= 1 <= vs.hi:
                rec.plateau.append(other)
        r = ratios[best]  # the line names arms as the verdict table does (USER-3 #10); cells keep the settings
        rec.line = f"{head}: {best}, {r.ratio_text()}"
        if rec.plateau:
            rec.line += f"; plateau: {', '.join([best, *rec.plateau])} not separable"
    elif not candidates:
        rec.line = f"{head}: off (no speculating setting could be compared)"
    elif not ratios:
        rec.line = f"{head}: no verdict (fewer than {MIN_PAIRS} paired requests per setting)"
    elif open_ := sorted((a for a, r in ratios.items() if undecided(r, margin)), key=lambda a: -ratios[a].hi):
        rec.setting, rec.decided = "inconclusive", False
        shown = ", ".join(f"{a} {ratios[a].ratio_text()}" for a in open_)
        its = "each interval fits" if len(open_) > 1 else "its interval fits"
        rec.line = (f"{head}: no recommendation: inconclusive ({shown}: {its} both a gain beyond "
                    f"{margin_text(margin)} and none); more passes or --until-ci would decide")
    elif level := [a for a, r in ratios.items() if r.lo <= 1 < r.hi]:  # within the margin: equivalent
        rec.line = (f"{head}: off (no setting is faster than {baseline} by more than {margin_text(margin)}: "
                    f"{', '.join(level)} within it)")
    else:
        rec.line = f"{head}: off (no setting is faster than {baseline})"
    if rec.losses:
        rec.line += f"; slower: {', '.join(rec.losses)}"
    roles: dict[str, Role] = {**dict.fromkeys(rec.losses, "loses"), **dict.fromkeys(rec.plateau, "plateau")}
    if rec.arm:
        roles[rec.arm] = "best"
    for cell in rec.cells:
        cell.role = roles.get(cell.arm, "")
    return rec


def recommend(samples: Sequence[Sample], baseline: str, arms: Sequence[ArmStats], comparisons: Sequence[Comparison],
              kinds: dict[str, str], specs: dict[str, Speculative], *, n_boot: int = N_BOOT,
              level: float = LEVEL, seed: int = 0, also_excluded: dict[str, str] | None = None,
              margin: float = EQUIVALENCE_MARGIN) -> list[Recommendation]:
    """One recommendation per use case (category x depth x streams, as the run swept them); [] when no
    arm speculates. An invalid structured answer (``Sample.valid`` False) is never paired: speed is compared
    on valid answers only.

    :param kinds: prompt name -> category; :param specs: arm -> its speculative settings.
    :param also_excluded: arm -> why it may not be recommended, beyond the gates and equal work (e.g. fewer
        valid structured answers than the baseline).
    """
    samples = [s for s in samples if s.rate is None]  # open-loop points: the load section's crossover says it
    stats = {a.arm: a for a in arms}
    by_arm = {c.arm: c for c in comparisons if c.reference == baseline}
    speculating = [a for a in by_arm if setting_label(specs.get(a)) != "off"]
    why_not = {a: w for a in speculating
               if (w := _exclusion(a, stats, by_arm) or (also_excluded or {}).get(a)) is not None}
    candidates = [a for a in speculating if a not in why_not]
    if not speculating:
        return []
    by_reason: dict[str, list[str]] = {}
    for a, w in why_not.items():
        by_reason.setdefault(w, []).append(a)
    excluded = [f"{', '.join(names)} ({w})" for w, names in by_reason.items()]
    categories: dict[str, list[str]] = {}
    for prompt in dict.fromkeys(s.prompt for s in samples):
        categories.setdefault(kinds.get(prompt, prompt), []).append(prompt)
    conditions = sorted({(s.depth, s.concurrency) for s in samples if s.arm == baseline},
                        key=lambda c: (c[0] or 0, c[1] or 0))
    pooled = len(conditions) > 1  # the category over every depth and stream count first: the most pairs
    boot: dict[str, Any] = {"n_boot": n_boot, "level": level, "seed": seed}
    out = []
    for category, prompts in categories.items():
        points: list[tuple[int | None, int | None] | None] = [*([None] if pooled else []), *conditions]
        for point in points:
            def within(arm: str, prompts: list[str] = prompts,
                       point: tuple[int | None, int | None] | None = point) -> list[Sample]:
                return [s for s in samples if s.arm == arm and s.prompt in prompts and s.valid is not False
                        and (point is None or (s.depth, s.concurrency) == point)]

            depth, streams = point or (None, None)
            condition = "all points" if point is None else condition_label(depth, streams)
            rec = Recommendation(category=category, depth=depth, streams=streams, prompts=prompts,
                                 use_case=f"{category}, {condition}" if condition else category)
            rec = _decide(rec, candidates, within, within(baseline), specs, baseline, boot, margin)
            if excluded:
                rec.excluded = excluded
                rec.line += f"; left out: {'; '.join(excluded)}"
            out.append(rec)
    return out
