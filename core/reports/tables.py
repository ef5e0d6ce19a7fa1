"""The tables every report format shares, as plain strings: the community table and the audit table.

Community format (what people paste into forum posts): arm | Overall median | Overall mean | one column
per prompt | Acceptance | vs baseline. The overall median carries its 95 % interval and the last column
the paired ratio to the baseline with its interval and verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..analysis.gates import gate_label
from ..analysis.launches import BandRatio
from ..analysis.phases import GPU_FIELDS, PhaseResult
from ..analysis.stats import MIN_PAIRS, ArmStats, Comparison, Interval, margin_text, ratio_text
from ..common.textfmt import DASH, fmt
from .completeness import passes_design
from .model import RunSummary
from .points import PointRow, PointTable

__all__ = ["fmt", "fmt_interval", "fmt_ratio", "fmt_acceptance", "community_table", "audit_table", "footnotes",
           "gpu_table", "roofline_table", "hardware_lines", "fmt_bands", "fmt_verdict", "correctness_table",
           "fingerprint_line"]



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


def fmt_bands(c: Comparison) -> str:
    """Launch states: "; fast band of X (3 launches): 1.93× (...) faster; slow band ..." for a bimodal pair (each
    verdict named with its band, never the pair's own), else ""."""
    return "".join(f"; {BandRatio.model_validate(b).line()}" for b in c.bands)


def fmt_verdict(c: Comparison | None) -> str:
    """The ratio and verdict, or "not comparable: REASON" when the equal-work guard found a difference."""
    if c is not None and c.comparable and not c.comparable["ok"]:
        reasons = c.comparable["reasons"]
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        return f"not comparable: {reasons[0]}{more}{fmt_bands(c)}"
    return fmt_ratio(c)


def correctness_table(s: RunSummary) -> tuple[list[str], list[list[str]]] | None:
    """Per arm: gates, greedy outputs identical to the reference, unexpected endings, equal work."""
    def endings(f: dict[str, Any]) -> int:  # a FinishCounts, dumped
        unexpected: dict[str, int] = f.get("unexpected") or {}
        return sum(unexpected.values()) + int(f.get("truncated") or 0) + int(f.get("empty") or 0)

    guarded = any(c.comparable and not c.comparable["ok"] for c in s.comparisons)
    if not guarded and not any(a.gates or a.spec_check or endings(a.finish or {}) for a in s.arms):
        return None
    header = ["arm", "gates", "identical to baseline", "unexpected endings", "equal work vs baseline"]
    rows = []
    for a in s.arms:
        gates = ", ".join(f"{n}: {gate_label(g['status'])}" for n, g in a.gates.items()) or DASH
        spec = DASH
        if a.spec_check:
            c = a.spec_check
            other = c.get("other") or "engine or model"  # a summary from before `other` was recorded
            spec = f"{c['identical']}/{c['compared']} vs {c['reference']}" + ("" if c["same_engine"]
                                                                                else f" (agreement, other {other})")
        cmp = s.comparison(a.arm)
        equal = "baseline" if a.arm == s.baseline else DASH if cmp is None or cmp.comparable is None else \
            "yes" if cmp.comparable["ok"] else "NO: " + "; ".join(cmp.comparable["reasons"])
        rows.append([a.arm, gates, spec, str(endings(a.finish or {})), equal])
    return header, rows


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
        cmp = s.comparison(a.arm)
        # a merge or a Ray run compares each block with its own baseline: those are baselines too
        own_baseline = cmp is None and any(c.reference == a.arm for c in s.comparisons)
        vs = "baseline" if a.arm == s.baseline or own_baseline else fmt_verdict(cmp)
        if a.failed_gates:  # never reported faster: the arm no longer answers correctly
            vs = f"GATE FAILED ({', '.join(a.failed_gates)}): " + vs.removesuffix(" faster")
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


def count_said(n: int | None, unit: str) -> str:
    """``8 rep(s)``; a merged summary whose bundles differ in it has none: ``rep(s) differing by bundle``."""
    return f"{n} {unit}" if n is not None else f"{unit} differing by bundle"


def baseline_said(s: RunSummary) -> str:
    """The baseline the ratios are against: the run's, or in a merge each bundle's own, every one named."""
    references = list(dict.fromkeys(c.reference for c in s.comparisons))
    if len(references) > 1:
        return f"each row against its own run's baseline: {', '.join(references)}"
    return str(references[0] if references else s.baseline)


def _per_pass(s: RunSummary) -> str:
    """An arm's requests per pass, every factor named: check's words where the run swept depths or streams."""
    if s.requests_per_pass:
        return f"{s.requests_per_pass} (mode(s): {', '.join(s.modes)})"
    return (f"{count_said(s.reps, 'rep(s)')} × {len(s.prompts)} prompt(s) × {len(s.modes)} mode(s) "
            f"({', '.join(s.modes)})")


def footnotes(s: RunSummary) -> list[str]:
    """What a reader needs to judge the table: units, method, design, engines."""
    level = f"{s.bootstrap.level:.0%}"
    notes = [f"decode tok/s = (completion tokens − first-event tokens) / (last − first token event), per request; "
             f"medians with {level} bootstrap intervals in parentheses; per-prompt columns are medians.",
             f"vs baseline ({baseline_said(s)}): median of per-request ratios paired on prompt, mode, rep and pass, "
             f"with its {level} interval; 'faster'/'slower' only when the interval excludes 1, 'equivalent' when it "
             f"lies within 1 ± {margin_text(s.equivalence_margin)}, else 'not separable'; 'too few pairs' below "
             f"{MIN_PAIRS} paired requests (fewer leave the interval their bare range).",
             f"{passes_design(s.passes, s.progress)} {_per_pass(s)}, {count_said(s.max_tokens, 'output tokens')}; "
             f"bootstrap {s.bootstrap.n_boot} resamples, seed {s.bootstrap.seed}, passes then requests."]
    engines = sorted({f"{e.engine} {e.version or ''}".strip() + _binary_note(e.binary) for e in s.engines.values()})
    if engines:
        notes.append("engines: " + ", ".join(engines))
    if line := fingerprint_line(s):
        notes.append(line)
    return notes + hardware_lines(s)


def fingerprint_line(s: RunSummary) -> str | None:
    """``configuration fingerprints: arm 1a2b…, …`` (core/config/fingerprint.py); None for a run made before
    fingerprints were recorded."""
    prints = [(arm, e.fingerprint) for arm, e in s.engines.items() if e.fingerprint]
    if not prints:
        return None
    return ("configuration fingerprints (equal: the same configuration, whatever the engine build): "
            + ", ".join(f"{arm} {fp}" for arm, fp in prints))


def _binary_note(binary: dict[str, object] | None) -> str:
    """`` (cuda sm_90 build, found in cache)`` for a llama-server whose build bakeoff knows."""
    if not binary:
        return ""
    arch = f" sm_{binary['cuda_architectures']}" if binary.get("cuda_architectures") else ""
    return f" ({binary.get('backend', 'unknown')}{arch} build, found in {binary.get('found_in', '?')})"


def hardware_lines(s: RunSummary) -> list[str]:
    """The GPUs and the bandwidth figures the roofline used (nothing on a run without them)."""
    out = []
    for g in s.gpus:
        limit = f", power limit {g['power_limit_w']:.0f} W" if g.get("power_limit_w") else ""
        clocks = (f", max clocks SM {g['sm_clock_max_mhz']} / memory {g['mem_clock_max_mhz']} MHz"
                  if g.get("sm_clock_max_mhz") else "")
        out.append(f"GPU {g.get('index')}: {g.get('name')}, driver {g.get('driver')}, CUDA {g.get('cuda')}{limit}"
                   f"{clocks}, PCIe gen {g.get('pcie_gen')} x{g.get('pcie_width')}")
    for device, bw in sorted(s.bandwidth.items()):
        parts = []
        if bw.get("gbs"):
            parts.append(f"{bw['gbs']:.0f} GB/s {bw.get('source', '')}".strip())
        if bw.get("theoretical_gbs"):
            parts.append(f"{bw['theoretical_gbs']:.0f} GB/s NVML theoretical (bus width × max memory clock × 2)")
        if parts:
            out.append(f"{device} memory bandwidth: " + "; ".join(parts))
    return out


def gpu_table(s: RunSummary) -> tuple[list[str], list[list[str]]] | None:
    """Tokens per joule with intervals and the paired ratio, power, clocks, temperature, VRAM; None without a GPU."""
    if not any(a.gpu for a in s.arms):
        return None
    header = ["arm", "tok/J", "tok/J vs baseline", "power mean W", "power max W", "idle W", "SM MHz", "mem MHz",
              "temp max °C", "VRAM peak MiB", "throttled"]
    rows = []
    for a in s.arms:
        g = a.gpu
        if g is None:
            rows.append([a.arm] + [DASH] * (len(header) - 1))
            continue
        energy = next((c for c in s.energy_comparisons if c.arm == a.arm), None)
        vs = "baseline" if a.arm == s.baseline else fmt_ratio(energy)
        rows.append([a.arm, fmt_interval(g.tokens_per_joule, 2), vs, fmt(g.power_mean_w, 0), fmt(g.power_max_w, 0),
                     fmt(g.idle_power_w, 0), fmt(g.sm_clock_mhz, 0), fmt(g.mem_clock_mhz, 0), fmt(g.temp_max_c, 0),
                     fmt(g.vram_peak_mib, 0), f"{g.throttled} ({', '.join(g.throttle_reasons)})" if g.throttled
                     else "0"])
    return header, rows


def _pct(x: float | None) -> str:
    return f"{x:.1%}" if x is not None else DASH


def roofline_table(s: RunSummary) -> tuple[list[str], list[list[str]]] | None:
    """Floor tok/s and efficiency per arm against memory bandwidth; None when no arm has a roofline."""
    if not any(a.roofline for a in s.arms):
        return None
    header = ["arm", "GB read/token", "bandwidth GB/s", "floor tok/s", "decode tok/s", "efficiency",
              "efficiency vs theoretical", "tokens/weight pass"]
    rows = []
    for a in s.arms:
        r = a.roofline
        if r is None:
            rows.append([a.arm] + [DASH] * (len(header) - 1))
            continue
        rows.append([a.arm, f"{r.bytes_per_token / 1e9:.3f}", f"{r.bandwidth_gbs:.0f}", fmt(r.floor_tps),
                     fmt(a.median.estimate if a.median else None), _pct(r.efficiency), _pct(r.theoretical_efficiency),
                     fmt(r.tokens_per_weight_pass, 2)])
    return header, rows


def roofline_note(s: RunSummary) -> str | None:
    source = next((a.roofline.bandwidth_source for a in s.arms if a.roofline), None)
    if source is None:
        return None
    return (f"roofline: floor tok/s = bandwidth ({source}) ÷ bytes one decoded token reads (the model's GGUF or "
            "safetensors weights, one embedding row, active experts only, no MTP block; KV cache at the median prompt "
            "depth + half the output); efficiency = median decode ÷ floor. Speculative arms can pass 100 %: they "
            "verify 'tokens/weight pass' tokens per read of the weights.")


__all__ += ["roofline_note"]


# -- sections of swept points (core/reports/points.py) ---------------------------------------------
def _point_value(v: object) -> str:
    return DASH if v is None else str(v)


def _vs(row: PointRow) -> str:
    return "baseline" if row.is_baseline else fmt_ratio(row.vs_baseline)


def _acceptance_cells(row: PointRow) -> list[str]:
    acc = row.acceptance
    if acc is None:
        return [DASH, DASH]
    rate = f"{acc.acceptance:.1%} ({acc.accepted}/{acc.drafted})" if acc.acceptance is not None else "0 drafted"
    return [rate, fmt(acc.mean_accepted_len, 2)]


def point_rows(t: PointTable) -> tuple[list[str], list[list[str]]]:
    """One sweep section as a table: the point's columns, the median with its interval, vs baseline."""
    keys = [k.split(".")[-1] for k in t.keys]
    if t.kind == "sweep":
        header = ["arm", *keys, "median decode tok/s", "Acceptance", "mean acc. len", "vs baseline", "n"]
        rows = [[r.arm, *(_point_value(r.point.get(k)) for k in t.keys), fmt_interval(r.decode),
                 *_acceptance_cells(r), _vs(r), str(r.n)] for r in t.rows]
    elif t.kind == "depth":
        needle = any(r.needle for r in t.rows)
        header = ["arm", "depth", "median decode tok/s", "vs baseline", "TTFT s", "prefill tok/s", "n",
                  "prompt tokens", *(["needle"] if needle else [])]
        rows = [[r.arm, _point_value(r.point.get("depth")), fmt_interval(r.decode), _vs(r), fmt(r.ttft_s, 3),
                 fmt(r.prefill_tps), str(r.n), ",".join(str(c) for c in r.prompt_tokens) or DASH,
                 *([f"{r.needle[0]}/{r.needle[1]}" if r.needle else DASH] if needle else [])] for r in t.rows]
    else:
        header = ["arm", "streams", "per-stream decode tok/s", "aggregate tok/s", "vs baseline", "TTFT s",
                  "batches", "errors"]
        rows = [[r.arm, _point_value(r.point.get("streams")), fmt_interval(r.decode), fmt_interval(r.aggregate),
                 _vs(r), fmt(r.ttft_s, 3), str(r.batches or 0), str(r.errors)] for r in t.rows]
    return header, rows


_POINT_NOTES = {
    "sweep": "median decode tok/s with its {level} interval; vs baseline: paired per-request ratio against the "
             "baseline arm, with its interval and verdict (depth and concurrency requests left out)",
    "depth": "depth = target prompt tokens (usage.prompt_tokens, chat template included); medians with {level} "
             "intervals; vs baseline: paired against the baseline arm at the same depth",
    "concurrency": "per-stream decode: median over streams with its {level} interval, paired against the baseline "
                   "arm at the same number of streams; aggregate: median over batches of all tokens / batch wall "
                   "time (prefill included)",
}


@dataclass
class Section:
    """A titled table a report shows after the main table; every format renders the same list."""

    id: str
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str | None = None


def _point_sections(s: RunSummary) -> list[Section]:
    out = []
    for table in (s.sweep, s.depth, s.concurrency):
        if table is None or not table.rows:
            continue
        header, rows = point_rows(table)
        out.append(Section(table.kind, table.title, header, rows,
                           _POINT_NOTES[table.kind].format(level=f"{s.bootstrap.level:.0%}")))
    return out


# -- acceptance per speculative arm (core/analysis/acceptance.py) -------------------------------------------
POSITIONS_SHOWN = 8  # per-position rates beyond this are in summary.json and the plot


def _positions_cell(rates: list[float] | None) -> str:
    if rates is None:
        return DASH
    last = max((i for i, r in enumerate(rates) if r > 0), default=0)
    shown = " ".join(f"{r:.2f}" for r in rates[:min(last + 1, POSITIONS_SHOWN)])
    return shown + (" …" if last + 1 > POSITIONS_SHOWN else "")


def _histogram_cell(hist: list[int] | None) -> str:
    """``0:4 1:14 2:2 3:3 4:26``: steps by accepted drafts, empty bins left out."""
    if hist is None:
        return DASH
    return " ".join(f"{k}:{n}" for k, n in enumerate(hist) if n) or "no steps"


def acceptance_rows(s: RunSummary) -> tuple[list[str], list[list[str]]] | None:
    """Per speculative arm: pooled acceptance, mean accepted length, per-position rates, step histogram."""
    if not s.acceptance:
        return None
    header = ["arm", "requests", "Acceptance", "draft steps", "mean acc. len", "per position (1, 2, …)",
              "steps by accepted drafts", "source"]
    rows = []
    for a in s.acceptance:
        rate = f"{a.acceptance:.1%} ({a.accepted}/{a.drafted})" if a.acceptance is not None else "0 drafted"
        rows.append([a.arm, str(a.requests), rate, DASH if a.drafts is None else str(a.drafts),
                     fmt(a.mean_accepted_len, 2), _positions_cell(a.acceptance_per_position),
                     _histogram_cell(a.accepted_histogram), ", ".join(a.sources) or DASH])
    return header, rows


def acceptance_notes(s: RunSummary) -> list[str]:
    """What each engine does not expose (and why), and which figures are computed rather than read."""
    arms: dict[str, list[str]] = {}  # one line per note, naming the arms it holds for
    for a in s.acceptance:
        for line in [f"{name} not available: {why}" for name, why in a.unavailable.items()] + \
                [f"{name} {why}" for name, why in a.derived.items()]:
            arms.setdefault(line, []).append(a.arm)
    return [f"{', '.join(names)}: {line}" for line, names in arms.items()]


def _acceptance_sections(s: RunSummary) -> list[Section]:
    table = acceptance_rows(s)
    if table is None:
        return []
    note = ("pooled over each arm's requests: Σ accepted / Σ drafted; mean accepted length 1 + Σ accepted / "
            "Σ draft steps; per position i: steps whose i-th draft token was accepted / steps; histogram: "
            "draft steps that accepted k drafts, as k:steps")
    notes = acceptance_notes(s)
    return [Section("acceptance", "Acceptance per speculative arm", *table,
                    note + (". " + "; ".join(notes) if notes else ""))]


_ROLE_MARK = {"best": "★ ", "plateau": "≈ ", "loses": "✗ ", "": ""}


def _decision_sections(s: RunSummary) -> list[Section]:
    """The decision map: one table per prompt category, a row per speculating setting, a column per depth
    and concurrency the run swept; each cell the paired ratio over the baseline with its verdict, marked
    ★ (recommended), ≈ (its plateau: not separable from ★) or ✗ (slower than the baseline)."""
    by_category: dict[str, list[Any]] = {}
    for r in s.recommendations:
        by_category.setdefault(r.category, []).append(r)
    out = []
    for category, recs in by_category.items():
        arms = list(dict.fromkeys(c.arm for r in recs for c in r.cells))
        settings = {c.arm: c.setting for r in recs for c in r.cells}
        header = ["setting", "arm", *(f"vs baseline, {r.use_case.partition(', ')[2] or 'all requests'}"
                                      for r in recs)]
        rows = []
        for arm in arms:
            row = [settings[arm], arm]
            for r in recs:
                cell = next((c for c in r.cells if c.arm == arm), None)
                if cell is None or cell.ratio is None:
                    row.append(DASH)
                    continue
                q = cell.ratio
                row.append(f"{_ROLE_MARK[cell.role]}{q.ratio_text()} {cell.verdict}"
                           if cell.verdict else f"{q.estimate:.2f}× (n={q.n}, too few for a verdict)")
            rows.append(row)
        note = (f"paired per-request ratio over {s.baseline} on this category's requests at each point, "
                f"{s.bootstrap.level:.0%} interval; ★ recommended, ≈ not separable from ★ (paired against it), "
                f"✗ slower than the baseline; a verdict needs {MIN_PAIRS} paired requests")
        out.append(Section(f"decision-map-{category}", f"decision map: {category}", header, rows, note))
    return out


def _hardware_sections(s: RunSummary) -> list[Section]:
    """The same configuration measured on other hardware (a Ray run's hosts, merged bundles): unpaired."""
    if not s.hardware:
        return []
    rows = [[c.arm, c.reference, fmt_interval(c.ratio, 3).replace(" (", "× ("), c.verdict, "; ".join(c.notes)]
            for c in s.hardware]
    note = ("machines cannot be paired request by request: each side is resampled on its own (passes, then "
            "requests) over the prompts and modes both measured; a difference here is the hardware's (or the "
            "build's), never an arm effect")
    return [Section("hardware", "Same configuration on other hardware (unpaired)",
                    ["arm", "against", "ratio", "verdict", "what differs"], rows, note)]


def _ratio(x: float | None, lo: float | None = None, hi: float | None = None) -> str:
    if x is None:
        return "-"
    return ratio_text(x, lo, hi) if lo is not None and hi is not None else f"{x:.2f}×"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _session_sections(s: RunSummary) -> list[Section]:
    """Sessions workload: the session-time verdict per arm (the headline), then each arm's turns."""
    ss = s.sessions
    if ss is None:
        return []
    rows = []
    for arm, a in ss.arms.items():
        t = a.session_time_s
        c = ss.comparisons.get(arm)
        vs = ("baseline" if arm == s.baseline else "-" if c is None
              else f"{_ratio(c.session_time_ratio, c.ci_low, c.ci_high)} {c.verdict}")
        decode = "-" if c is None else _ratio(c.decode_ratio, c.decode_ci_low, c.decode_ci_high)
        rows.append([arm, str(a.sessions),
                     "-" if t is None else f"{t['median']:.2f} ({t['ci_low']:.2f}–{t['ci_high']:.2f})", vs, decode,
                     _num(a.cache_hit_ratio, ".0%"), str(a.cache_misses), (c.note or "") if c else ""])
    note = ("session time = sum of a session's turn times; ratio = baseline time / arm time, paired per replay "
            "(above 1 faster); cache hit = cached / prompt tokens on turns after the first")
    out = [Section("sessions", "Sessions (the headline of a sessions workload)",
                   ["arm", "sessions", "session s (CI)", "session vs baseline", "decode vs baseline", "cache hit",
                    "cache-miss turns", "note"], rows, note)]
    turn_rows = [[arm, str(r.turn), _num(r.prompt_tokens, ".0f"), _num(r.cached_tokens, ".0f"),
                  _num(r.reprefill_tokens, ".0f"), _num(r.ttft_s, ".3f"), _num(r.decode_tps, ".1f"),
                  _num(r.e2e_s, ".3f"), str(r.cache_misses)]
                 for arm, a in ss.arms.items() for r in a.turns]
    out.append(Section("session-turns", "Session turns (medians over sessions)",
                       ["arm", "turn", "prompt tok", "cached tok", "re-prefilled", "TTFT s", "decode tok/s", "e2e s",
                        "cache-miss"], turn_rows))
    return out


def _structured_sections(s: RunSummary) -> list[Section]:
    """Structured requests per arm: validity with its interval, drafting under the grammar, stalls, speed."""
    if s.structured is None:
        return []
    header = ["arm", "valid", "validity (interval)", "by kind", "drafted free text / structured",
              "acceptance free text / structured", "drafting", "stalls (longest gap)", "decode tok/s (valid)",
              f"vs {s.baseline} (valid)"]
    rows = []
    for name, a in s.structured.arms.items():
        def pct(x: float | None) -> str:
            return DASH if x is None else f"{x:.0%}"
        drafting = a.drafting_words() or DASH
        vs = "baseline" if name == s.baseline else DASH if a.vs_baseline is None else (
            f"{fmt_interval(a.vs_baseline, 2).replace(' (', '× (')} {a.verdict}")
        if a.less_valid_than_baseline:
            vs += "; less valid: not recommended"
        rows.append([name, f"{a.valid}/{a.requests}", f"{pct(a.validity_rate)} ({pct(a.ci_low)}–{pct(a.ci_high)})",
                     " ".join(f"{k} {v}" for k, v in a.by_kind.items()),
                     f"{fmt(a.drafts_free_text, 0)} / {fmt(a.drafts_structured, 0)}",
                     f"{pct(a.acceptance_free_text)} / {pct(a.acceptance_structured)}", drafting,
                     f"{a.stalls} ({fmt(a.max_gap_s, 2)} s)", fmt(a.decode_tps), vs])
    reasons = [f"{name}: {'; '.join(a.invalid_reasons)}" for name, a in s.structured.arms.items()
               if a.invalid_reasons]
    note = (f"validity: Wilson {s.bootstrap.level:.0%} interval; speed paired over requests valid on both sides; "
            "drafting: structured requests that drafted; engaged: on every one (n-gram or suffix: on all but those "
            "with nothing to match), partly engaged: on some, or acceptance under a fifth of free text's on some; "
            "disengaged: on none while it drafts on free text"
            + (". invalid: " + " | ".join(reasons) if reasons else ""))
    return [Section("structured", "Structured requests (tool calls, JSON schema)", header, rows, note)]


# -- load points (core/analysis/load.py) -------------------------------------------------------------------
def _ms(ci: Interval | None) -> str:
    return DASH if ci is None else f"{ci.estimate * 1000:.0f}"


def _load_sections(s: RunSummary) -> list[Section]:
    """The load points (percentiles, goodput, frontier) and each arm's crossover against the baseline."""
    load = s.load
    if load is None:
        return []
    tiers = list(dict.fromkeys(t for p in load.points for t in p.goodput))
    on_frontier = {(f.arm, f.load, f.value) for f in load.frontier}
    header = ["arm", "load", "requests", "per-user tok/s", "aggregate tok/s", "TTFT p50/p99 ms", "ITL p50/p99 ms",
              "e2e p50/p99 ms", *[f"goodput {t} req/s" for t in tiers], "vs baseline", "frontier"]
    rows = []
    for p in load.points:
        pct = p.percentiles

        def pair(metric: str, pct: dict[str, dict[str, Interval | None]] = pct) -> str:
            return f"{_ms(pct.get(metric, {}).get('p50'))} / {_ms(pct.get(metric, {}).get('p99'))}"

        rows.append([p.arm, f"{p.value:g} {'streams' if p.load == 'streams' else 'req/s'}", str(p.requests),
                     fmt_interval(p.per_user_tps), fmt(p.aggregate_tps, 1), pair("ttft_s"), pair("itl_s"),
                     pair("e2e_s"), *[fmt(p.goodput.get(t), 2) for t in tiers],
                     fmt_ratio(p.vs_baseline),
                     "yes" if (p.arm, p.load, p.value) in on_frontier else ""])
    note = ("open-loop TTFT and e2e count from each request's scheduled send time; ITL = 1 / a request's decode "
            "rate; percentiles over requests, intervals in summary.json; goodput = requests meeting the SLO tier / "
            "wall time; frontier: no other point has both more per-user and more aggregate tok/s")
    out = [Section("load", "load points", header, rows, note)]
    if load.crossover:
        out.append(Section("crossover", "where speculation stops paying", ["arm", "load", "against the baseline"],
                           [[c.arm, c.load, c.summary] for c in load.crossover],
                           "from the paired verdict at each load point (interval of the ratio excluding 1)"))
    return out


# Builders of the sections after the main table, in report order. A new section (its rows built into
# RunSummary) adds one function here and appears in the terminal, report.md and report.html.
SECTION_BUILDERS: list[Callable[[RunSummary], list[Section]]] = [
    _session_sections, _point_sections, _load_sections, _acceptance_sections, _structured_sections,
    _decision_sections, _hardware_sections]


def sections(s: RunSummary) -> list[Section]:
    """Every section with at least one row (a table with only its header says nothing)."""
    return [section for build in SECTION_BUILDERS for section in build(s) if section.rows]


__all__ += ["Section", "SECTION_BUILDERS", "point_rows", "sections", "acceptance_rows", "acceptance_notes"]


def phase_rows(results: list[PhaseResult]) -> tuple[list[str], list[list[str]]]:
    """The phase table: one row per phase."""
    def ci(x: Interval | None, digits: int) -> str:
        return f"{x.estimate:.{digits}f} [{x.lo:.{digits}f}, {x.hi:.{digits}f}]" if x else "-"

    gpu = any(r.gpu for r in results)
    header = ["phase", "setting", "n", "median tok/s [95% CI]", "vs neighbouring baselines", "verdict", "probes"]
    header += ["power W", "SM MHz", "mem MHz", "temp C"] if gpu else []
    rows = []
    for r in results:
        row = [r.phase, r.setting, str(r.n), ci(r.median, 1),
               (ci(r.ratio, 3) + "x" if r.ratio else "-"), r.verdict or "-",
               f"{r.probes - r.unhealthy_probes}/{r.probes} healthy"]
        if gpu:
            row += [f"{r.gpu[k]:.0f}" if r.gpu and r.gpu.get(k) is not None else "-" for k in GPU_FIELDS]
        rows.append(row)
    return header, rows
