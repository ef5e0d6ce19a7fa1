"""Calibration tables and plots: the speedup surface over (acceptance x n_max) and the break-even acceptance.

Everything here formats ``RunSummary.calibration`` (core/config/calibration.py); the terminal, markdown and HTML
render the same rows.
"""

from __future__ import annotations

from typing import Any

from ..analysis.calibration import AGREEMENT_TARGET, BreakEven, Calibration, CalibrationPoint

__all__ = [
    "break_even_rows",
    "calibration_curves_figure",
    "calibration_heatmap_figure",
    "calibration_rows",
    "heatmap_grids",
    "timing_agreement_line",
    "timing_agreement_rows",
]


def _x(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def _speed(p: CalibrationPoint) -> str:
    if p.speedup is None:
        return "–"
    ci = f" ({p.ci_low:.2f}–{p.ci_high:.2f})" if p.ci_low is not None and p.ci_high is not None else ""
    return f"{p.speedup:.2f}×{ci}"


def calibration_rows(c: Calibration) -> tuple[list[str], list[list[str]]]:
    header = ["point", "target acc.", "expected acc.", "measured acc.", "speedup (95 % CI)", "engine speedup",
              "client/engine rate", "verify step cost", "tokens/step", "ideal", "n", "flags"]
    rows = []
    for p in c.points:
        rows.append([_name(p), _x(p.target_acceptance),
                     _x(p.expected_acceptance, "{:.3f}"), _x(p.measured_acceptance, "{:.3f}"), _speed(p),
                     _x(p.engine_speedup, "{:.2f}×"), _x(p.timing_agreement, "{:.3f}"), _x(p.verify_step_cost),
                     _x(p.tokens_per_step),
                     _x(p.ideal_speedup, "{:.2f}×"), str(p.samples), "; ".join(p.flags)])
    return header, rows


def _name(p: CalibrationPoint) -> str:
    return f"{p.engine} {p.method} n{p.n_max} a{p.target_acceptance:.2f}"


def _agrees(p: CalibrationPoint) -> str:
    if p.speedup_vs_engine is None:
        return "–"
    return "yes" if abs(p.speedup_vs_engine) <= AGREEMENT_TARGET else "NO"


def timing_agreement_rows(c: Calibration) -> tuple[list[str], list[list[str]]]:
    """Per point: bakeoff's speedup (client clock, true token counts) beside the engine's own (its timings),
    their difference, and whether it is within the 2 % target."""
    header = ["point", "client speedup", "engine speedup", "client vs engine",
              f"within {AGREEMENT_TARGET * 100:.0f} %", "client/engine decode rate (per request)"]
    rows = [[_name(p), _x(p.speedup, "{:.3f}×"), _x(p.engine_speedup, "{:.3f}×"),
             _x(None if p.speedup_vs_engine is None else 100 * p.speedup_vs_engine, "{:+.1f} %"), _agrees(p),
             _x(p.timing_agreement, "{:.3f}")] for p in c.points]
    return header, rows


def timing_agreement_line(c: Calibration) -> str | None:
    """'11 of 12 points within 2 % …; largest difference … +3.1 %'; None when no point has both."""
    both = [p for p in c.points if p.speedup_vs_engine is not None]
    if not both:
        return None
    within = sum(abs(p.speedup_vs_engine or 0) <= AGREEMENT_TARGET for p in both)
    worst = max(both, key=lambda p: abs(p.speedup_vs_engine or 0))
    return (f"{within} of {len(both)} points within {AGREEMENT_TARGET * 100:.0f} % (bakeoff's speedup "
            f"vs the one the engine's own timings give); largest difference {_name(worst)} "
            f"{100 * (worst.speedup_vs_engine or 0):+.1f} %")


def _be(b: BreakEven) -> str:
    if b.acceptance is None:
        return "–"
    # a bound curve that never crosses 1 inside the grid leaves that side of the interval open
    lo = "below grid" if b.ci_low is None else f"{b.ci_low:.2f}"
    hi = "above grid" if b.ci_high is None else f"{b.ci_high:.2f}"
    ci = f" ({lo}–{hi})" if b.ci_low is not None or b.ci_high is not None else ""
    never = " (never pays)" if b.acceptance > 1 else " (pays at any acceptance)" if b.acceptance < 0 else ""
    return f"{b.acceptance:.2f}{ci}{never}"


def break_even_rows(c: Calibration) -> tuple[list[str], list[list[str]]]:
    header = ["engine", "method", "n_max", "break-even acceptance (95 % CI)", "from"]
    return header, [[b.engine, b.method, str(b.n_max), _be(b), b.source] for b in c.break_even]


def heatmap_grids(c: Calibration) -> dict[str, tuple[list[float], list[int], list[list[float | None]]]]:
    """Per 'engine method': acceptances (rows), n_max values (columns) and the speedup in each cell."""
    out: dict[str, tuple[list[float], list[int], list[list[float | None]]]] = {}
    groups: dict[str, list[CalibrationPoint]] = {}
    for p in c.points:
        groups.setdefault(f"{p.engine} {p.method}", []).append(p)
    for name, pts in groups.items():
        accs = sorted({p.target_acceptance for p in pts})
        ns = sorted({p.n_max for p in pts})
        cell = {(p.target_acceptance, p.n_max): p.speedup for p in pts}
        out[name] = (accs, ns, [[cell.get((a, n)) for n in ns] for a in accs])
    return out


def _unmeasured_note(fig: Any, names: list[str]) -> None:
    """Say below the panels which engines have no panel: none of their points was measured."""
    if names:
        fig.supxlabel(f"no point measured for {', '.join(names)} (see the report's calibration flags)", fontsize=7,
                      color="0.3")


def calibration_heatmap_figure(c: Calibration) -> Any:
    """Speedup over spec-off per (acceptance, n_max), one panel per engine and method (1 = white); an engine and
    method with no measured point gets no empty panel, only a note."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure

    every = heatmap_grids(c)
    grids = {name: g for name, g in every.items() if any(v is not None for row in g[2] for v in row)}
    if not grids:
        return None
    fig = Figure(figsize=(4.2 * len(grids) + 1, 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(grids), squeeze=False)[0]
    values = [v for _, _, g in grids.values() for row in g for v in row if v is not None]
    lo, hi = min([*values, 0.9]), max([*values, 1.1])
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.99), vmax=max(hi, 1.01))
    image = None
    for ax, (name, (accs, ns, grid)) in zip(axes, grids.items(), strict=True):
        data = np.array([[np.nan if v is None else v for v in row] for row in grid], dtype=float)
        image = ax.imshow(data, cmap="RdYlGn", norm=norm, origin="lower", aspect="auto")
        ax.set_xticks(range(len(ns)), [str(n) for n in ns])
        ax.set_yticks(range(len(accs)), [f"{a:.2f}" for a in accs])
        ax.set_xlabel("n_max")
        ax.set_ylabel("forced acceptance")
        ax.set_title(f"{name}: speedup over spec-off")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, "–" if v is None else f"{v:.2f}×", ha="center", va="center", fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.8, label="speedup (× spec-off)")
    _unmeasured_note(fig, [name for name in every if name not in grids])
    return fig


def calibration_curves_figure(c: Calibration) -> Any:
    """Speedup vs measured acceptance, one line per n_max with its 95 % interval, the ideal curve (a verify
    step costing one plain step) dashed, and each break-even acceptance marked; an engine and method with no
    measured point gets no empty panel, only a note."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    every: dict[str, list[CalibrationPoint]] = {}
    for p in c.points:
        every.setdefault(f"{p.engine} {p.method}", []).append(p)
    groups = {name: pts for name, pts in every.items() if any(p.speedup is not None for p in pts)}
    if not groups:
        return None
    fig = Figure(figsize=(5.2 * len(groups), 4.4), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    for ax, (name, pts) in zip(axes, groups.items(), strict=True):
        engine, method = name.split(" ", 1)
        for k, n in enumerate(sorted({p.n_max for p in pts})):
            color = colors[k % len(colors)]
            line = sorted((p for p in pts if p.n_max == n and p.speedup is not None),
                          key=lambda p: p.target_acceptance)
            xs = [p.measured_acceptance if p.measured_acceptance is not None else p.target_acceptance for p in line]
            ys = [p.speedup or 0.0 for p in line]
            err = [[max(0.0, y - (p.ci_low if p.ci_low is not None else y)) for p, y in zip(line, ys, strict=True)],
                   [max(0.0, (p.ci_high if p.ci_high is not None else y) - y) for p, y in zip(line, ys, strict=True)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", color=color, capsize=3, label=f"n_max {n}")
            ax.plot([0, 1], [1, 1 + n], ls="--", lw=0.8, color=color, alpha=0.6)
            be = next((b for b in c.break_even if (b.engine, b.method, b.n_max) == (engine, method, n)), None)
            if be is not None and be.acceptance is not None and 0 <= be.acceptance <= 1:
                ax.axvline(be.acceptance, color=color, ls=":", lw=1)
                ax.annotate(f"break-even {be.acceptance:.2f}", (be.acceptance, 1), rotation=90, fontsize=7,
                            color=color, xytext=(3, 4), textcoords="offset points")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xlim(-0.03, 1.03)
        ax.set_xlabel("measured acceptance (accepted / drafted)")
        ax.set_ylabel("speedup over spec-off (×)")
        ax.set_title(f"{name}: measured (solid) vs ideal (dashed)")
        ax.grid(lw=0.3)
        ax.legend(fontsize=7)
    _unmeasured_note(fig, [name for name in every if name not in groups])
    return fig
