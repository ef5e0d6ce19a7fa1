"""The answer first: one short verdict block per run, the first thing the terminal and the HTML show.

Each arm against the baseline (median decode rate, paired ratio with its interval and verdict, acceptance), the
recommendation, what an event-counting client would have read, and every warning once (an identical caveat for
several arms is one line naming them). It fits 80 columns: the table folds long cells instead of cutting them.
The full set of tables stays one flag away (``--tables``) and in every report file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis.calibration import BreakEven
from ..analysis.gates import NOT_INFORMATIVE
from ..analysis.stats import MIN_PAIRS, TOO_FEW, ArmStats, Comparison, margin_text, undecided
from ..analysis.structured import StructuredArm
from ..common.textfmt import DASH
from .completeness import passes_design
from .layout import print_rows
from .model import RunSummary
from .tables import count_said, fmt_bands

__all__ = ["VerdictBlock", "VerdictRow", "merge_warnings", "print_verdict", "verdict_of"]

# The one colour per outcome, shared by the terminal and the HTML (a CSS class of the same name).
STYLE = {"faster": "green", "slower": "red", "equivalent": "cyan", "not separable": "yellow", "too few pairs": "yellow",
         "not comparable": "red",
         "gate failed": "red", "baseline": "", "no data": ""}


@dataclass
class VerdictRow:
    arm: str
    decode: str  # median with its interval
    vs: str  # the paired ratio with its interval and verdict, "baseline", or why there is no ratio
    outcome: str  # a key of STYLE
    acceptance: str


@dataclass
class VerdictBlock:
    title: str
    design: str
    incomplete: str | None  # the warning that leads the block when the run did less than it planned
    baseline: str | None
    rows: list[VerdictRow]
    recommendation: list[str] = field(default_factory=list)
    ratio_note: str | None = None  # the ratio is paired, where it differs from the ratio of the medians shown
    sessions: list[str] = field(default_factory=list)  # a sessions workload's headline, one line per arm
    accounting: str | None = None
    notes: list[str] = field(default_factory=list)  # neutral facts (gates that say nothing about this model)
    structured: list[str] = field(default_factory=list)  # per arm: valid answers, drafting under the grammar, stalls
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # arms that failed a pass, one line per distinct failure


def _interval(a: ArmStats) -> str:
    m = a.median
    return DASH if m is None else f"{m.estimate:.1f} ({m.lo:.1f}–{m.hi:.1f})"


def _vs(s: RunSummary, a: ArmStats) -> tuple[str, str]:
    if a.arm == s.baseline:
        return "baseline", "baseline"
    c: Comparison | None = s.comparison(a.arm)
    if a.failed_gates:
        return f"GATE FAILED ({', '.join(a.failed_gates)})", "gate failed"
    if c is not None and c.comparable and not c.comparable["ok"]:
        return f"not comparable: {'; '.join(c.comparable['reasons'])}{fmt_bands(c)}", "not comparable"
    if c is None:
        return DASH, "no data"
    r = c.ratio
    return f"{r.ratio_text()} {c.verdict}{_what_decides(s, a, c)}", c.verdict


def _what_decides(s: RunSummary, a: ArmStats, c: Comparison) -> str:
    """For a ratio the interval cannot tell: what would decide it (the machine's load, when it was busy; about how
    many passes at the spread observed); for too few pairs, how many a verdict needs."""
    if c.verdict == TOO_FEW:
        return f" ({c.ratio.n} of the {MIN_PAIRS} paired requests a verdict needs)"
    if c.verdict != "not separable":
        return ""
    base = next((b for b in s.arms if b.arm == c.reference), None)
    busy, n = a.busy + (base.busy if base else 0), a.n + (base.n if base else 0)
    why = [f"busy machine on {busy} of {n} samples"] if busy else []
    if c.passes_to_decide is not None:
        why.append(f"~{c.passes_to_decide} passes would decide")
    return f" ({'; '.join(why)})" if why else ""


def _acceptance(a: ArmStats) -> str:
    if a.acceptance is not None:
        return f"{a.acceptance:.0%}"
    return "0 drafted" if a.has_draft_counts else DASH


def _too_few(pairs: dict[str, int]) -> str:
    """'keep the baseline' is a decision too: none from arms with too few pairs to tell."""
    shown = ", ".join(f"{arm}: {n}" for arm, n in pairs.items())
    return f"no recommendation: too few pairs ({shown} paired request(s); a verdict needs {MIN_PAIRS})"


def _recommendation(s: RunSummary) -> list[str]:
    """A capacity search's paired boundaries; the decision map's line per category over all its requests; a
    calibration's break-even acceptances; else the fastest separable arm, or none."""
    if s.capacity is not None:  # a capacity search's answer is its boundaries: the pooled decode rates are not it
        return ([c.text for c in s.capacity.comparisons]
                or ["no recommendation: no paired capacity boundary (the capacity table says why)"])
    if s.calibration is not None and s.calibration.break_even:
        return [f"{b.engine} {b.method} n_max {b.n_max}: {_break_even(b)}" for b in s.calibration.break_even]
    if s.sessions is not None and s.baseline:  # a sessions workload is judged on session time
        won = {a: c for a, c in s.sessions.comparisons.items() if c.verdict == "faster"}
        few = {a: c.pairs for a, c in s.sessions.comparisons.items() if c.verdict == TOO_FEW}
        if not won and few:
            return [_too_few(few)]
        if not won:
            return [f"keep {s.baseline}: no arm finishes sessions separably faster"] if s.sessions.comparisons else []
        arm, c = max(won.items(), key=lambda kv: kv[1].session_time_ratio)
        return [f"{arm}: sessions {c.session_time_ratio:.2f}× ({c.ci_low:.2f}–{c.ci_high:.2f}) faster than "
                f"{s.baseline}"]
    lines = [r.line for r in s.recommendations if r.depth is None and r.streams is None]
    if lines or not s.baseline:
        return lines
    faster = [c for c in s.comparisons if c.reference == s.baseline and c.verdict == "faster"
              and not ((a := s.arm(c.arm)) and a.failed_gates)
              and not (c.comparable and not c.comparable["ok"])]
    few = {c.arm: c.ratio.n for c in s.comparisons if c.reference == s.baseline and c.verdict == TOO_FEW}
    if not faster and few:
        return [_too_few(few)]
    if not faster:
        bimodal = [c.arm for c in s.comparisons if c.reference == s.baseline and c.bands]
        why = f" ({', '.join(bimodal)}: bimodal across launches, judged per band above)" if bimodal else ""
        open_ = [c for c in s.comparisons if c.reference == s.baseline and not c.bands
                 and undecided(c.ratio, c.margin) and not (c.comparable and not c.comparable["ok"])]
        if open_:  # "keep the baseline" is a decision too: only when no interval fits a real gain
            shown = ", ".join(f"{c.arm} {c.ratio.ratio_text()}" for c in open_)
            its = "each interval fits" if len(open_) > 1 else "its interval fits"
            return [f"no recommendation: inconclusive ({shown}: {its} both a gain beyond "
                    f"{margin_text(s.equivalence_margin)} and none){why}; more passes or --until-ci would decide"]
        return [f"keep {s.baseline}: no arm is separably faster{why}"] if s.comparisons else []
    best = max(faster, key=lambda c: c.ratio.estimate)
    r = best.ratio
    return [f"{best.arm}: {r.ratio_text()} over {best.reference}"]  # in a merge, its own bundle's baseline


def _break_even(b: BreakEven) -> str:
    if b.acceptance is None:
        return "no break-even measured"
    if b.acceptance > 1:
        return f"never pays ({b.source})"
    if b.acceptance < 0:
        return f"pays at any acceptance ({b.source})"
    lo = "below grid" if b.ci_low is None else f"{b.ci_low:.2f}"
    hi = "above grid" if b.ci_high is None else f"{b.ci_high:.2f}"
    return f"pays above acceptance {b.acceptance:.2f} ({lo}–{hi}, {b.source})"


def _ratio_note(s: RunSummary) -> str | None:
    """Where a paired ratio reads otherwise than the ratio of the two medians in its row (USER-3 #10: 13.9 against
    14.6 read 1.06×), one line (it fits the block's 80 columns) saying that it is the median of per-request
    ratios."""
    base = s.arm(s.baseline) if s.baseline else None
    if base is None or base.median is None or base.median.estimate <= 0:
        return None
    for c in s.comparisons:
        a = s.arm(c.arm)
        if c.reference != s.baseline or a is None or a.median is None or c.bands or c.verdict == TOO_FEW \
                or (c.comparable and not c.comparable["ok"]):
            continue  # a row without a ratio, or one judged per band
        if round(a.median.estimate / base.median.estimate, 2) != round(c.ratio.estimate, 2):
            return "median of paired per-request ratios, not of the medians above"
    return None


def _accounting(s: RunSummary) -> str | None:
    """True tokens against what a client counting SSE events would have read, for the arm where they differ most."""
    pairs = [(a, a.median.estimate, a.event_count_median) for a in s.arms
             if a.median is not None and a.event_count_median is not None and a.median.estimate > 0]
    if not pairs:
        return None
    arm, true, events = max(pairs, key=lambda p: abs(p[2] - p[1]) / p[1])
    if abs(events - true) / true > 0.01:
        packed = f", up to {arm.max_tokens_per_event} tokens per event" if arm.max_tokens_per_event else ""
        return (f"{arm.arm} decodes {true:.1f} tok/s counted in true tokens; a client counting SSE events would "
                f"read {events:.1f} ({events / true - 1:+.0%}{packed})")
    most = max((a.max_tokens_per_event or 1) for a, _, _ in pairs)
    return (f"{'one token' if most == 1 else f'at most {most} tokens'} per SSE event here, so a client counting "
            "events reads the same rates as bakeoff's true token counts")


def _gate_notes(s: RunSummary) -> list[str]:
    base = s.arm(s.baseline) if s.baseline else None
    quiet = [name for name, g in (base.gates.items() if base else []) if g.get("status") == NOT_INFORMATIVE]
    if not quiet:
        return []
    several = len(quiet) > 1
    return [f"gate{'s' if several else ''} {', '.join(quiet)}: not informative for this model (the baseline fails "
            f"{'them' if several else 'it'} too, and every arm is compared with it)"]


def _draft_tokens(a: StructuredArm) -> str:
    """Draft tokens under the grammar, against free text where none drafted, else with their acceptance."""
    tokens = f"{a.drafts_structured or 0} draft tokens under the grammar"
    if a.drafting == "disengaged":
        return f"{tokens}, {a.drafts_free_text or 0} on free text"
    return tokens + (f" at {a.acceptance_structured:.0%} acceptance" if a.acceptance_structured is not None else "")


def _structured(s: RunSummary) -> list[str]:
    """One line per arm of the structured requests: valid answers with their interval, drafting, stalls."""
    if s.structured is None:
        return []
    out = []
    for name, a in s.structured.arms.items():
        line = f"{name}: {a.valid}/{a.requests} valid ({a.ci_low or 0:.0%}–{a.ci_high or 0:.0%})"
        if words := a.drafting_words():
            line += f", drafting {words}; {_draft_tokens(a)}"
        if a.stalls:
            line += f", {a.stalls} stall(s) up to {a.max_gap_s or 0:.1f} s"
        if a.less_valid_than_baseline:
            line += "; less valid than the baseline: not recommended"
        out.append(line)
    return out


def merge_warnings(warnings: list[str], arms: list[str]) -> list[str]:
    """Each warning once; the same caveat for several arms ("a: X", "b: X") as one line ("a, b: X")."""
    groups: dict[str, list[str]] = {}
    names = sorted(arms, key=len, reverse=True)  # "ngram-n_max2" before "ngram"
    for w in dict.fromkeys(warnings):
        arm = next((n for n in names if w.startswith(f"{n}: ")), None)
        rest = w[len(arm) + 2:] if arm else w
        groups.setdefault(rest, [])
        if arm:
            groups[rest].append(arm)
    return [f"{', '.join(dict.fromkeys(who))}: {rest}" if who else rest for rest, who in groups.items()]


def _session_lines(s: RunSummary) -> list[str]:
    """Per arm: "session 0.80× (0.74–0.86) slower, decode 1.60×: cache-hit ratio 40 % against ...". """
    if s.sessions is None:
        return []
    out = []
    for arm, c in s.sessions.comparisons.items():
        decode = f", decode {c.decode_ratio:.2f}×" if c.decode_ratio is not None else ""
        out.append(f"{arm}: session {c.session_time_ratio:.2f}× ({c.ci_low:.2f}–{c.ci_high:.2f}) {c.verdict}"
                   f"{decode}" + (f"; {c.note}" if c.note else ""))
    return out


def _failure_lines(s: RunSummary) -> list[str]:
    """One line per arm and error: the same failure in several passes is said once, with its passes."""
    passes: dict[tuple[str, str], list[int]] = {}
    for f in s.failures:
        passes.setdefault((f.arm, f.error), []).append(f.pass_index + 1)
    return [f"{arm}: failed in pass {p[0]}: {error}" if len(p) == 1 else
            f"{arm}: failed in passes {', '.join(map(str, p))}: {error}" for (arm, error), p in passes.items()]


def verdict_of(s: RunSummary) -> VerdictBlock:
    modes = f" × {len(s.modes)} modes" if len(s.modes) > 1 else ""
    what = "session turn(s)" if s.sessions is not None else "prompt(s)"
    per_pass = s.requests_per_pass or f"{count_said(s.reps, 'rep(s)')} × {len(s.prompts)} {what}{modes}"
    design = (f"{passes_design(s.passes, s.progress)} {per_pass}, {count_said(s.max_tokens, 'output tokens')}; "
              f"paired per request, {s.bootstrap.level:.0%} bootstrap intervals")
    if s.launches is not None and s.launches.extra is not None and s.launches.extra.passes:
        drawn = ", ".join(f"{arm} ×{n}" for arm, n in s.launches.extra.drawn.items())
        design += f"; {len(s.launches.extra.passes)} of the passes are extra launches ({drawn}) for launch states"
    rows = []
    for a in s.arms:
        vs, outcome = _vs(s, a)
        rows.append(VerdictRow(a.arm, _interval(a), vs, outcome, _acceptance(a)))
    failures = _failure_lines(s)
    shown = {f"{r.arm} vs {s.baseline}: {r.vs}" for r in rows}  # a row's "not comparable: ..." is said there
    lead = s.progress.warning if s.progress else None
    shown |= {lead} if lead else set()  # said first, above the table
    names = [a.arm for a in s.arms] + [f.arm for f in s.failures]
    warnings = merge_warnings([w for w in s.warnings if w not in shown], names)
    against = s.baseline if len({c.reference for c in s.comparisons}) <= 1 else "its own run's baseline"  # a merge
    return VerdictBlock(title=f"{s.name}: each arm against {against}" if s.baseline else s.name, design=design,
                        incomplete=lead,
                        baseline=s.baseline, rows=rows, recommendation=_recommendation(s), ratio_note=_ratio_note(s),
                        sessions=_session_lines(s),
                        accounting=_accounting(s), notes=_gate_notes(s), structured=_structured(s),
                        warnings=warnings, failures=merge_warnings(failures, names))


def print_verdict(v: VerdictBlock, out: Console, *, more: str | None = None) -> None:
    """The block, as rich markup; ``more`` is the closing pointer to the full tables and report files."""
    out.print(f"[bold]{escape(v.title)}[/bold]", highlight=False)
    if v.incomplete:
        out.print(f"[bold yellow]{escape(v.incomplete)}[/bold yellow]", highlight=False)
    out.print(f"[dim]{escape(v.design)}[/dim]", highlight=False)
    if not v.rows:
        out.print("no valid sample: nothing to compare", highlight=False)
    else:
        rows = []
        for r in v.rows:
            style = STYLE[r.outcome]
            vs = f"[{style}]{escape(r.vs)}[/{style}]" if style else escape(r.vs)
            rows.append([escape(r.arm), r.decode, vs, r.acceptance])
        print_rows(out, None, ["arm", "decode tok/s", f"vs {v.baseline}" if v.baseline else "vs baseline", "accepted"],
                   rows, right=[False, True, False, True], box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    lines = Table.grid(padding=(0, 1))  # a label column, so wrapped text keeps its indent
    lines.add_column(no_wrap=True)
    lines.add_column(overflow="fold")
    if v.ratio_note:
        lines.add_row("[bold]ratio[/bold]", escape(v.ratio_note))
    for i, line in enumerate(v.sessions):
        lines.add_row("[bold]session time[/bold]" if i == 0 else "", escape(line))
    for i, line in enumerate(v.recommendation):
        lines.add_row("[bold]recommendation[/bold]" if i == 0 else "", escape(line))
    for i, line in enumerate(v.structured):
        lines.add_row("[bold]structured[/bold]" if i == 0 else "", escape(line))
    if v.accounting:
        lines.add_row("[bold]accounting[/bold]", escape(v.accounting))
    for note in v.notes:
        lines.add_row("[dim]note[/dim]", f"[dim]{escape(note)}[/dim]")
    if lines.row_count:
        out.print(lines)
    listed = Table.grid(padding=(0, 1))
    listed.add_column(no_wrap=True)
    listed.add_column(overflow="fold")
    for f in v.failures:
        listed.add_row(" [red]•[/red]", escape(f))
    for w in v.warnings:
        listed.add_row(" [yellow]•[/yellow]", escape(w))
    if listed.row_count:
        failed = f"[red]{len(v.failures)} failure(s)[/red], " if v.failures else ""
        out.print(f"{failed}[yellow]{len(v.warnings)} warning(s)[/yellow]", highlight=False)
        out.print(listed)
    if more:
        out.print(f"[dim]{escape(more)}[/dim]", highlight=False)
