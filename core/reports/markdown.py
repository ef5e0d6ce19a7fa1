"""Markdown in the community format, ready to paste into a forum post or a README."""

from __future__ import annotations

import json

from ..analysis.racing import TuneResult
from ..analysis.stats import Interval, ratio_text
from .calibration import (
    break_even_rows,
    calibration_rows,
    heatmap_grids,
    timing_agreement_line,
    timing_agreement_rows,
)
from .capacity import capacity_markdown
from .model import RunSummary
from .reference import reference_markdown
from .tables import (
    audit_table,
    community_table,
    correctness_table,
    footnotes,
    gpu_table,
    phase_rows,
    roofline_note,
    roofline_table,
    sections,
)

__all__ = ["render_markdown", "markdown_table"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---" if i == 0 or h in ("vs baseline", "Acceptance", "tok/J vs baseline") else "---:"
             for i, h in enumerate(header)]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def calibration_markdown(s: RunSummary) -> list[str]:
    """Speedup grids (acceptance x n_max), the break-even table and every calibration point."""
    c = s.calibration
    if c is None:
        return []
    parts = ["**Calibration** (forced acceptance; speedup over spec-off, paired, 95 % CI)", ""]
    for name, (accs, ns, grid) in heatmap_grids(c).items():
        rows = [[f"{a:.2f}", *("–" if v is None else f"{v:.2f}×" for v in row)]
                for a, row in zip(accs, grid, strict=True)]
        parts += [f"{name}: speedup by acceptance (rows) and n_max (columns)", "",
                  markdown_table(["acceptance", *(f"n_max {n}" for n in ns)], rows), ""]
    parts += ["Break-even acceptance per n_max", "", markdown_table(*break_even_rows(c)), ""]
    if (agreement := timing_agreement_line(c)) is not None:
        parts += [f"**Timing agreement**: {agreement}", "", markdown_table(*timing_agreement_rows(c)), ""]
    parts += [markdown_table(*calibration_rows(c))]
    parts += [f"- {f}" for f in c.flags]
    return parts


def _ratio(estimate: float | None, lo: float | None, hi: float | None) -> str:
    return "–" if estimate is None or lo is None or hi is None else ratio_text(estimate, lo, hi, "x")


def _interval(ci: Interval | None) -> str:
    return "–" if ci is None else _ratio(ci.estimate, ci.lo, ci.hi)


def tune_markdown(t: TuneResult) -> list[str]:
    """The tune section: the race's candidates, the named setting and its engine flags, the verification."""
    rows = [[f"`{c.arm}`", ", ".join(f"{k}={v}" for k, v in c.settings.items()), c.status,
             "" if c.dropped_after_requests is None else f"{c.dropped_after_requests} (vs `{c.dropped_vs}`)",
             _ratio(c.ratio, c.ci_low, c.ci_high), c.verdict or ""] for c in t.candidates]
    w = t.winner
    parts = [f"**Tune** ({t.passes} of at most {t.max_passes} passes, {t.spent_s:.0f} s of {t.budget_s:.0f} s; "
             f"stopped: {t.stopped}; decode ratios vs `{t.baseline}`, paired, 95 % CI)", "",
             markdown_table(["candidate", "settings", "status", "dropped after requests", "vs spec-off", "verdict"],
                            rows), "",
             f"- **{t.decision}**: {t.decision_why}" if t.decision == "decided"
             else f"- **no recommendation: {t.decision}**: {t.decision_why}"]
    if w.get("spec_off"):
        parts.append(f"- named: `{t.baseline}` (spec-off, nothing to deploy): {w.get('chosen_by')}")
    else:
        parts.append(f"- named: `{w.get('arm')}` ({w.get('chosen_by')}); plateau: "
                     + ", ".join(f"`{a}`" for a in w.get("plateau", [])))
        config = w.get("engine_config") or {}
        if config.get("flags"):
            parts.append(f"- {config.get('engine')} flags: `{' '.join(config['flags'])}`")
        for key, value in config.items():
            if key not in ("engine", "flags", "note"):
                parts.append(f"- {config.get('engine')} {key}: `{json.dumps(value)}`")
        if w.get("winner_file"):
            parts.append(f"- re-check it: `bakeoff run {w['winner_file']}`")
        if sched := w.get("n_max_schedule"):
            levels = ", ".join(f"{lv['streams']} stream(s): {lv['n_max']} ({lv['why']})" for lv in sched["levels"])
            parts.append(f"- n_max by stream count: {levels}; " + (
                f"compiled as a per-batch-size schedule `{json.dumps(sched['schedule'])}`" if sched["compiled"]
                else f"not compiled as a schedule: {sched.get('reason')}"))
    if t.undecided:
        parts.append("- undecided when the budget ran out: " + ", ".join(f"`{a}`" for a in t.undecided))
    if t.verify is not None:
        arms = t.verify.arms[1:]
        vrows = [[str(p.streams), *[_interval(p.ratios.get(a)) for a in arms], "**collapse**" if p.collapse else ""]
                 for p in t.verify.points]
        parts += ["", f"**Tune verification** (streams in replay order; per-stream decode vs `{t.verify.arms[0]}`; "
                  f"run {t.verify.run_dir})", "",
                  markdown_table(["streams", *[f"`{a}`" for a in arms], ""], vrows)]
        if (nd := t.verify.nothing_drafted) is not None:
            parts += ["", f"- speculation on with nothing drafted (`{t.verify.arms[1]}`'s requests that drafted "
                      f"0 tokens, paired with `{t.verify.arms[0]}`'s same requests): "
                      + (f"{_ratio(nd.ratio, nd.ci_low, nd.ci_high)} over {nd.requests} requests"
                         if nd.ratio is not None else f"not measured: {nd.reason}")]
    if t.promoted is not None:
        parts.append(f"- promoted: {t.promoted.get('status')} on port {t.promoted.get('port')}")
    return parts


def render_markdown(s: RunSummary, *, audit: bool = True) -> str:
    lead = s.progress.warning if s.progress else None
    parts = [f"## {s.name}", ""] + ([f"> **{lead}**", ""] if lead else [])  # before any number it qualifies
    parts += [markdown_table(*community_table(s)), ""]
    parts += [f"- {note}" for note in footnotes(s)]
    if s.recommendations:  # the answer, right under the table it is drawn from
        parts += ["", "**Recommendation per use case** (paired vs the baseline, 95 % CI)", ""]
        parts += [f"- {r.line}" for r in s.recommendations]
    for section in sections(s):
        parts += ["", f"**{section.title}**" + (f" ({section.note})" if section.note else ""), "",
                  markdown_table(section.header, section.rows)]
    if (correct := correctness_table(s)) is not None:
        parts += ["", "**Correctness** (quality gates, greedy outputs vs baseline, equal work)", "",
                  markdown_table(*correct)]
    if s.phases:
        parts += ["", "**Phases** (each knob against its neighbouring baselines, paired, 95 % CI)", "",
                  markdown_table(*phase_rows(s.phases))]
    if s.calibration is not None:
        parts += ["", *calibration_markdown(s)]
    if s.tune is not None:
        parts += ["", *tune_markdown(s.tune)]
    if s.capacity is not None:
        parts += ["", *capacity_markdown(s.capacity)]
    if s.references:
        parts += ["", *reference_markdown(s.references)]
    if (roof := roofline_table(s)) is not None:
        parts += ["", "**Roofline** (how close each arm decodes to the memory-bandwidth limit)", "",
                  markdown_table(*roof), "", f"- {roofline_note(s)}"]
    if (gpu := gpu_table(s)) is not None:
        parts += ["", "**GPU telemetry** (NVML, per request; energy includes prefill)", "", markdown_table(*gpu)]
    if rest := [w for w in s.warnings if w != lead]:
        parts += ["", "**Warnings**", ""] + [f"- {w}" for w in rest]
    if s.failures:
        parts += [""] + [f"- arm `{f.arm}` failed in pass {f.pass_index + 1}: {f.error}" for f in s.failures]
    if audit:
        parts += ["", "<details><summary>Token accounting and timing</summary>", "",
                  markdown_table(*audit_table(s)), "", "</details>"]
    tool = s.tool.get("version")
    parts += ["", f"<sub>bakeoff {tool or ''} · run {s.run_id} · summary schema {s.schema_version}</sub>", ""]
    return "\n".join(parts)
