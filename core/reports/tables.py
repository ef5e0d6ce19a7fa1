"""The tables every report format shares, as plain strings: the community table and the audit table.

Community format (what people paste into forum posts): arm | Overall median | Overall mean | one column
per prompt | Acceptance | vs baseline. The overall median carries its 95 % interval and the last column
the paired ratio to the baseline with its interval and verdict.
"""

from __future__ import annotations

from ..stats import ArmStats, Comparison, Interval
from ..textfmt import DASH, fmt
from .model import RunSummary

__all__ = ["fmt", "fmt_interval", "fmt_ratio", "fmt_acceptance", "community_table", "audit_table", "footnotes"]



def fmt_interval(ci: Interval | None, digits: int = 1) -> str:
    """``110.2 (108.1–112.0)``."""
    if ci is None:
        return DASH
    return f"{ci.estimate:.{digits}f} ({ci.lo:.{digits}f}–{ci.hi:.{digits}f})"


def fmt_ratio(c: Comparison | None) -> str:
    """``1.09× (1.05–1.13) faster``."""
    if c is None:
        return DASH
    r = c.ratio
    return f"{r.estimate:.3f}× ({r.lo:.3f}–{r.hi:.3f}) {c.verdict}"


def fmt_acceptance(a: ArmStats) -> str:
    if a.acceptance is not None:
        text = f"{a.acceptance:.1%} ({a.accepted}/{a.drafted})"
        if a.acceptance_range and a.acceptance_range[0] != a.acceptance_range[1]:
            text += f" range {a.acceptance_range[0]:.0%}–{a.acceptance_range[1]:.0%}"
        return text
    return "0 drafted" if a.has_draft_counts else DASH


def community_table(s: RunSummary) -> tuple[list[str], list[list[str]]]:
    header = ["arm", "Overall median", "Overall mean", *s.prompts, "Acceptance", "vs baseline"]
    rows = []
    for a in s.arms:
        per_prompt = [fmt(ps.median.estimate) if (ps := a.prompt(name)) and ps.median else DASH for name in s.prompts]
        vs = "baseline" if a.arm == s.baseline else fmt_ratio(s.comparison(a.arm))
        rows.append([a.arm, fmt_interval(a.median), fmt(a.mean), *per_prompt, fmt_acceptance(a), vs])
    return header, rows


def audit_table(s: RunSummary) -> tuple[list[str], list[list[str]]]:
    header = ["arm", "n", "passes", "errors", "flagged", "min", "max", "combined", "decode (true tokens)",
              "server decode", "event-counting client", "max tokens/event", "TTFT s", "prefill tok/s", "boot s"]
    rows = [[a.arm, str(a.n), str(a.passes), str(a.errors), str(a.flagged), fmt(a.min), fmt(a.max), fmt(a.combined),
             fmt(a.median.estimate if a.median else None),  # side by side with what an event counter reads
             fmt(a.server_median), fmt(a.event_count_median), str(a.max_tokens_per_event or DASH),
             fmt(a.ttft_median, 3), fmt(a.prefill_median), fmt(a.boot_s_median)] for a in s.arms]
    return header, rows


def footnotes(s: RunSummary) -> list[str]:
    """What a reader needs to judge the table: units, method, design, engines."""
    level = f"{s.bootstrap.level:.0%}"
    notes = [f"decode tok/s = (completion tokens − first-event tokens) / (last − first token event), per request; "
             f"medians with {level} bootstrap intervals in parentheses; per-prompt columns are medians.",
             f"vs baseline ({s.baseline}): median of per-request ratios paired on prompt, mode, rep and pass, with its "
             f"{level} interval; 'faster'/'slower' only when the interval excludes 1, else 'not separable'.",
             f"{s.passes} pass(es) × {s.reps} rep(s) × {len(s.prompts)} prompt(s) × {len(s.modes)} mode(s) "
             f"({', '.join(s.modes)}), {s.max_tokens} output tokens; bootstrap {s.bootstrap.n_boot} resamples, "
             f"seed {s.bootstrap.seed}, passes then requests."]
    engines = sorted({f"{e.get('engine')} {e.get('version') or ''}".strip() for e in s.engines.values()})
    if engines:
        notes.append("engines: " + ", ".join(engines))
    return notes
