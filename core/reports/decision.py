"""The decision map as a picture: per prompt category, settings (rows) by depth x streams (columns), each
cell the paired ratio over the baseline with the verdict's own word (faster, slower, equivalent, not separable,
too few pairs), marked ★ recommended, ≈ not separable from ★, ✗ slower than the baseline.

Only a separable cell (faster or slower) is coloured, on a fixed diverging scale centred at 1.0 (TwoSlopeNorm
from :data:`RANGE`'s 0.5× to 2×, the same for every run, so a colour means the same ratio in every report);
every other cell is neutral grey, so a ratio whose interval includes 1 never reads as a clear loss or gain
(USER-3: a not-separable 0.78× (0.25-4.18) was painted deep red by a scale fitted to the values). Each label is
black or white, whichever reads on its cell's colour. Panel titles are the categories alone, under one figure
title, so narrow panels do not run their titles together.
"""

from __future__ import annotations

from typing import Any

from ..analysis.decision import Recommendation

__all__ = ["NEUTRAL", "RANGE", "decision_map_figure", "label_colour"]

_MARK = {"best": "★", "plateau": "≈", "loses": "✗", "": ""}
RANGE = (0.5, 2.0)  # the colour scale's ends (a ratio beyond them takes the end's colour)
NEUTRAL = (0.86, 0.86, 0.86, 1.0)  # a cell with no verdict of faster or slower


def label_colour(background: tuple[float, ...]) -> str:
    """Black or white, whichever contrasts more with an RGB(A) background (WCAG relative luminance)."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in background[:3])
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "black" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "white"


def decision_map_figure(recs: list[Recommendation]) -> Any:
    """None without recommendations."""
    import matplotlib
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure

    by_category: dict[str, list[Recommendation]] = {}
    for r in recs:
        by_category.setdefault(r.category, []).append(r)
    if not by_category or not any(c.ratio for r in recs for c in r.cells):
        return None
    arms = list(dict.fromkeys(c.arm for r in recs for c in r.cells))
    labels = {c.arm: c.setting for r in recs for c in r.cells}
    norm = TwoSlopeNorm(vcenter=1.0, vmin=RANGE[0], vmax=RANGE[1])
    cmap = matplotlib.colormaps["RdYlGn"]
    width = max(len(rs) for rs in by_category.values())
    fig = Figure(figsize=(1.6 * width * len(by_category) + 3.8, 0.5 * len(arms) + 2.6), dpi=110,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(by_category), squeeze=False)[0]
    beyond = False
    for k, (ax, (category, rs)) in enumerate(zip(axes, by_category.items(), strict=True)):
        cells = np.ones((len(arms), len(rs), 4))  # white where an arm has no ratio here
        for j, r in enumerate(rs):
            for c in r.cells:
                if c.ratio is None:
                    continue
                i = arms.index(c.arm)
                value = c.ratio.estimate
                separable = c.verdict in ("faster", "slower")  # else no verdict, or the interval reaches 1
                colour = tuple(cmap(norm(min(max(value, RANGE[0]), RANGE[1])))) if separable else NEUTRAL
                beyond |= separable and not RANGE[0] <= value <= RANGE[1]
                cells[i, j] = colour
                ax.text(j, i, f"{_MARK[c.role]}{value:.2f}×\n{c.verdict or 'too few pairs'}", ha="center",
                        va="center", fontsize=7, linespacing=1.3, color=label_colour(colour),
                        fontweight="bold" if separable else "normal")
        ax.imshow(cells, aspect="auto")
        ax.set_xticks(range(len(rs)), [r.use_case.partition(", ")[2] or "all" for r in rs], rotation=30,
                      ha="right", fontsize=8)
        ax.set_yticks(range(len(arms)), [labels[a] for a in arms] if k == 0 else [""] * len(arms), fontsize=8)
        ax.set_title(category, fontsize=9)
    mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(mappable, ax=list(axes), shrink=0.8, extend="both" if beyond else "neither",
                 ticks=[0.5, 0.75, 1.0, 1.5, 2.0], label="paired ratio (× baseline)")
    fig.suptitle("speedup over the baseline, per prompt category", fontsize=9)
    fig.supxlabel("★ recommended   ≈ not separable from ★   ✗ slower than the baseline   grey: not faster or "
                  "slower (the interval includes 1, or too few pairs)", fontsize=7)
    return fig
