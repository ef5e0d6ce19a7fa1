"""Plots people publish: decode rate per arm and prompt with intervals, and decode rate vs acceptance.

Drawn with matplotlib's object API on the Agg canvas (never pyplot), so reports work headless, in
threads and in tests, and leave no global state behind. Each plot is written as PNG and SVG; the SVG
text is also what the HTML report embeds.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..results.sample import Sample
from .calibration import calibration_curves_figure, calibration_heatmap_figure
from .decision import decision_map_figure
from .model import RunSummary

__all__ = ["PLOTS", "GPU_PLOTS", "CALIBRATION_PLOTS", "ACCEPTANCE_PLOTS", "DECISION_PLOTS", "LOAD_PLOTS",
           "SESSION_PLOTS", "decode_figure", "acceptance_figure", "fit_title", "gpu_figure", "histogram_figure",
           "load_figure", "positions_figure", "render_plots", "session_turns_figure"]

PLOTS = ("decode_by_prompt", "decode_vs_acceptance")  # every run
GPU_PLOTS = ("gpu_power_clock_temp",)  # runs with GPU telemetry
CALIBRATION_PLOTS = ("calibration_heatmap", "calibration_curves")  # runs with a calibrate: section
ACCEPTANCE_PLOTS = ("acceptance_histogram", "acceptance_per_position")  # arms whose engine counts draft steps
DECISION_PLOTS = ("decision_map",)  # runs with a baseline and speculating arms
SESSION_PLOTS = ("session_turns",)  # sessions workloads
LOAD_PLOTS = ("load_frontier",)  # runs with concurrency or open-loop points
# text.parse_math off: run, arm and prompt names are user text, and a '$' in one is not TeX (D16)
_RC: dict[str, Any] = {"svg.hashsalt": "bakeoff", "svg.fonttype": "path", "font.size": 9, "text.parse_math": False}


def _legend(ax: Any, **kwargs: Any) -> None:
    """A legend only when something is labelled (a run with no rate has no bars to name)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _legend_below(fig: Any, ax: Any, ncols: int) -> None:
    """The legend under the axes, outside them, where constrained layout makes room for it: above, it covered
    the title (USER-3 #7)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=8, ncols=max(1, ncols), loc="outside lower center", frameon=False)


def fit_title(ax: Any, text: str) -> None:
    """Set ``ax``'s title, wrapped onto more lines until the rendered text fits the figure's width (a long run
    name used to run off the image)."""
    import textwrap

    fig = ax.get_figure()
    renderer = fig.canvas.get_renderer()
    title = ax.set_title(text)
    per_line = len(text)
    while title.get_window_extent(renderer).width > 0.94 * fig.bbox.width and per_line > 16:
        per_line = int(per_line * 0.85)
        title.set_text(textwrap.fill(text, per_line))


def _colors(n: int) -> list[str]:
    cmap = matplotlib.colormaps["tab10"]
    return [matplotlib.colors.to_hex(cmap(i % 10)) for i in range(n)]


def decode_figure(s: RunSummary) -> Figure:
    """Grouped bars: one group per prompt (and 'overall'), one bar per arm, whiskers = median interval."""
    groups = ["overall", *s.prompts]
    fig = Figure(figsize=(max(6.0, 1.2 + 0.35 * len(s.arms) * len(groups)), 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(s.arms))
    for i, (arm, color) in enumerate(zip(s.arms, _colors(len(s.arms)), strict=True)):
        cis = [arm.median] + [(p.median if (p := arm.prompt(g)) else None) for g in s.prompts]
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(groups))]
        heights = [c.estimate if c else 0.0 for c in cis]
        err = [[c.estimate - c.lo if c else 0.0 for c in cis], [c.hi - c.estimate if c else 0.0 for c in cis]]
        ax.bar(xs, heights, width * 0.92, color=color, label=arm.arm, yerr=err, capsize=2,
               error_kw={"elinewidth": 0.9, "ecolor": "#222"})
    base = s.arm(s.baseline) if s.baseline else None
    if base and base.median:
        ax.axhline(base.median.estimate, color="#555", lw=0.8, ls="--", label=f"baseline {base.arm}")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("decode tok/s (median)")
    fit_title(ax, f"{s.name}: decode rate per arm and prompt, {s.bootstrap.level:.0%} bootstrap intervals")
    _legend_below(fig, ax, min(4, len(s.arms) + 1))
    ax.grid(axis="y", lw=0.3)
    return fig


def acceptance_figure(s: RunSummary, samples: Sequence[Sample] = ()) -> Figure:
    """Acceptance is not speed: each arm's median decode rate (with interval) against its acceptance.

    Arms that draft nothing are horizontal lines; individual requests are faint dots when given.
    """
    fig = Figure(figsize=(6.4, 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for arm, color in zip(s.arms, _colors(len(s.arms)), strict=True):
        if arm.median is None:
            continue
        if arm.acceptance is None:
            ax.axhline(arm.median.estimate, color=color, lw=1.0, ls=":", label=f"{arm.arm} (no drafts)")
            continue
        own = [x for x in samples if x.arm == arm.arm and x.acceptance is not None and x.decode_tps]
        if own:
            ax.scatter([float(x.acceptance or 0) for x in own], [float(x.decode_tps or 0) for x in own], s=12,
                       color=color, alpha=0.4, lw=0)
        lo, hi = arm.acceptance_range or (arm.acceptance, arm.acceptance)
        ax.errorbar([arm.acceptance], [arm.median.estimate],
                    yerr=[[arm.median.estimate - arm.median.lo], [arm.median.hi - arm.median.estimate]],
                    xerr=[[arm.acceptance - lo], [hi - arm.acceptance]], fmt="o", color=color, capsize=3,
                    label=arm.arm)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("acceptance (accepted / drafted; bars: range over requests)")
    ax.set_ylabel("decode tok/s (median)")
    ax.set_title("decode rate vs acceptance")
    _legend(ax, fontsize=8, loc="best")
    ax.grid(lw=0.3)
    return fig


def _last_used(values: Sequence[float]) -> int:
    """Bins up to the last non-empty one (ngram-mod counts 64 positions; most stay empty)."""
    return max((i for i, v in enumerate(values) if v > 0), default=0) + 1


def histogram_figure(s: RunSummary) -> Figure | None:
    """One panel per speculative arm: the share of draft steps that accepted 0, 1, 2, … drafts."""
    arms = [(a, color) for a, color in zip(s.acceptance, _colors(len(s.acceptance)), strict=True)
            if a.histogram_shares]
    if not arms:
        return None
    cols = min(3, len(arms))
    rows = -(-len(arms) // cols)
    fig = Figure(figsize=(3.2 * cols + 0.6, 2.8 * rows + 0.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (a, color) in zip(axes.flat, arms, strict=False):
        shares = a.histogram_shares or []
        n = _last_used(shares)
        ax.bar(range(n), shares[:n], 0.8, color=color)
        ax.set_xticks(range(n))
        ax.set_ylim(0, 1)
        ax.set_title(f"{a.arm}: {sum(a.accepted_histogram or [])} steps, mean len {a.mean_accepted_len or 0:.2f}",
                     fontsize=8)
        ax.set_xlabel("drafts accepted in the step", fontsize=8)
        ax.set_ylabel("share of draft steps", fontsize=8)
        ax.grid(axis="y", lw=0.3)
    for ax in list(axes.flat)[len(arms):]:
        ax.set_visible(False)
    fig.suptitle("accepted drafts per step (histogram over draft steps)")
    return fig


def positions_figure(s: RunSummary) -> Figure | None:
    """Per speculative arm: the fraction of draft steps whose i-th draft token was accepted, by position."""
    arms = [(a, color) for a, color in zip(s.acceptance, _colors(len(s.acceptance)), strict=True)
            if a.acceptance_per_position]
    if not arms:
        return None
    fig = Figure(figsize=(6.4, 4.0), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    widest = 1
    for a, color in arms:
        rates = a.acceptance_per_position or []
        n = _last_used(rates)
        widest = max(widest, n)
        ax.plot(range(1, n + 1), rates[:n], "o-", color=color, ms=4, label=a.arm)
    ax.set_xticks(range(1, widest + 1))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("draft position")
    ax.set_ylabel("share of draft steps accepting it")
    ax.set_title("acceptance by draft position")
    _legend(ax, fontsize=8, loc="best")
    ax.grid(lw=0.3)
    return fig


def gpu_figure(s: RunSummary, samples: Sequence[Sample]) -> Figure | None:
    """Power, SM clock and temperature of every request over the run's time, one colour per arm; None
    when no sample carries GPU telemetry."""
    with_gpu = [x for x in samples if x.gpu is not None and x.status == "ok"]
    if not with_gpu:
        return None
    t0 = min(x.started_at for x in with_gpu)
    fig = Figure(figsize=(7.2, 6.0), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(3, 1, sharex=True)
    series = (("power_mean_w", "power W (mean; max dotted)"), ("sm_clock_mhz", "SM clock MHz"),
              ("temp_max_c", "temperature °C (max)"))
    for arm, color in zip(s.arms, _colors(len(s.arms)), strict=True):
        own = sorted((x for x in with_gpu if x.arm == arm.arm), key=lambda x: x.started_at)
        if not own:
            continue
        ts = [x.started_at - t0 for x in own]
        for ax, (field, _) in zip(axes, series, strict=True):
            ax.plot(ts, [getattr(x.gpu, field) for x in own], "o", ms=3, color=color, label=arm.arm)
        axes[0].plot(ts, [x.gpu.power_max_w for x in own if x.gpu is not None], ".", ms=2, color=color, alpha=0.5)
    for ax, (_, label) in zip(axes, series, strict=True):
        ax.set_ylabel(label, fontsize=8)
        ax.grid(lw=0.3)
    axes[-1].set_xlabel("seconds since the first timed request (one point per request)")
    axes[0].set_title("GPU power, clock and temperature per request")
    _legend_below(fig, axes[0], min(4, len(s.arms)))
    return fig


def session_turns_figure(s: RunSummary) -> Figure | None:
    """Sessions workload: TTFT and cached prompt tokens by turn, one line per arm (medians over sessions), with
    each turn's whole prompt dashed: where an arm's cached line falls away from it, it lost its prefix."""
    if s.sessions is None or not s.sessions.arms:
        return None
    fig = Figure(figsize=(6.4, 5.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ttft, cached = fig.subplots(2, 1, sharex=True)
    for (arm, a), color in zip(s.sessions.arms.items(), _colors(len(s.sessions.arms)), strict=True):
        turns = [r.turn for r in a.turns]
        ttft.plot(turns, [r.ttft_s for r in a.turns], "o-", ms=4, color=color, label=arm)
        cached.plot(turns, [r.cached_tokens for r in a.turns], "o-", ms=4, color=color, label=f"{arm} cached")
        cached.plot(turns, [r.prompt_tokens for r in a.turns], ":", color=color, lw=1, label=f"{arm} prompt")
    ttft.set_ylabel("TTFT s")
    cached.set_ylabel("prompt tokens")
    cached.set_xlabel("turn")
    ttft.set_title("session turns: time to first token and cached prompt tokens (medians over sessions)")
    for ax in (ttft, cached):
        ax.grid(lw=0.3)
        _legend(ax, fontsize=7, loc="best")
    return fig


def load_figure(s: RunSummary) -> Figure | None:
    """Per-user against aggregate tok/s at each load, a line per arm in load order (one panel per kind of load),
    the Pareto frontier ringed; None without load points."""
    load = s.load
    if load is None or not load.points:
        return None
    kinds = [k for k in ("streams", "rate") if any(p.load == k for p in load.points)]
    fig = Figure(figsize=(6.4 * len(kinds), 4.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(kinds), squeeze=False)[0]
    arms = list(dict.fromkeys(p.arm for p in load.points))
    front = {(f.arm, f.load, f.value) for f in load.frontier}
    for ax, kind in zip(axes, kinds, strict=True):
        for arm, color in zip(arms, _colors(len(arms)), strict=True):
            own = [p for p in load.points if p.arm == arm and p.load == kind and p.per_user_tps and p.aggregate_tps]
            xs = [p.aggregate_tps or 0.0 for p in own]
            ys = [p.per_user_tps.estimate if p.per_user_tps else 0.0 for p in own]
            ax.plot(xs, ys, "o-", ms=4, lw=1, color=color, label=arm)
            for p, x, y in zip(own, xs, ys, strict=True):
                ax.annotate(f"{p.value:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
                if (p.arm, p.load, p.value) in front:
                    ax.plot([x], [y], "o", ms=10, mfc="none", mec="#222", mew=0.8)
        ax.set_xlabel("aggregate tok/s (all streams)")
        ax.set_ylabel("per-user tok/s (median decode)")
        ax.set_title("closed loop: streams at each point" if kind == "streams" else "open loop: req/s at each point",
                     fontsize=9)
        ax.grid(lw=0.3)
    _legend_below(fig, axes[0], min(4, len(arms)))
    fig.suptitle(f"{s.name}: per-user vs aggregate throughput (ringed: the Pareto frontier)", fontsize=9)
    return fig


def render_plots(s: RunSummary, samples: Sequence[Sample] = (),
                 failures: list[str] | None = None) -> dict[str, dict[str, bytes]]:
    """Every plot as ``{name: {"png": bytes, "svg": bytes}}``.

    A plot that cannot be drawn is left out and described in ``failures``: the tables, markdown, JSON and
    HTML never depend on a figure.
    """
    out: dict[str, dict[str, bytes]] = {}
    makers: tuple[tuple[str, Callable[[], Figure | None]], ...] = (
        ("decode_by_prompt", lambda: decode_figure(s)),
        ("decode_vs_acceptance", lambda: acceptance_figure(s, samples)),
        ("acceptance_histogram", lambda: histogram_figure(s)),
        ("acceptance_per_position", lambda: positions_figure(s)),
        ("gpu_power_clock_temp", lambda: gpu_figure(s, samples)),
        ("calibration_heatmap", lambda: calibration_heatmap_figure(s.calibration) if s.calibration else None),
        ("calibration_curves", lambda: calibration_curves_figure(s.calibration) if s.calibration else None),
        ("decision_map", lambda: decision_map_figure(s.recommendations)),
        ("session_turns", lambda: session_turns_figure(s)),
        ("load_frontier", lambda: load_figure(s)))
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]  # stubs list the keys as literals
        for name, make in makers:
            try:
                fig = make()
                if fig is None:  # nothing to draw (no GPU telemetry)
                    continue
                formats = {}
                for fmt in ("png", "svg"):
                    buf = io.BytesIO()
                    meta = {"Date": None} if fmt == "svg" else {"Software": None}
                    fig.savefig(buf, format=fmt, metadata=meta)
                    formats[fmt] = buf.getvalue()
            except Exception as exc:
                if failures is None:
                    raise
                failures.append(f"plot {name} left out: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            out[name] = formats
    return out
