"""The decision map as a picture: per prompt category, settings (rows) by depth x streams (columns), each
cell the paired ratio over the baseline, green above 1 and red below, marked ★ recommended, ≈ not
separable from ★, ✗ slower than the baseline; a cell whose interval straddles 1 has its number in a lighter
weight. Each label is black or white, whichever reads on its cell's colour (dark green and dark red take
white)."""

from __future__ import annotations

from typing import Any

from ..analysis.decision import Recommendation

__all__ = ["decision_map_figure", "label_colour"]

_MARK = {"best": "★", "plateau": "≈", "loses": "✗", "": ""}


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
    ratios = [c.ratio.estimate for r in recs for c in r.cells if c.ratio is not None]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min([*ratios, 0.99]), vmax=max([*ratios, 1.01]))
    cmap = matplotlib.colormaps["RdYlGn"]
    width = max(len(rs) for rs in by_category.values())
    fig = Figure(figsize=(1.4 * width * len(by_category) + 3.5, 0.45 * len(arms) + 2.2), dpi=110,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(by_category), squeeze=False)[0]
    image = None
    for k, (ax, (category, rs)) in enumerate(zip(axes, by_category.items(), strict=True)):
        grid = np.full((len(arms), len(rs)), np.nan)
        for j, r in enumerate(rs):
            for c in r.cells:
                if c.ratio is None:
                    continue
                i = arms.index(c.arm)
                grid[i, j] = c.ratio.estimate
                separable = c.verdict in ("faster", "slower")  # else no verdict, or the interval straddles 1
                ax.text(j, i, f"{_MARK[c.role]}{c.ratio.estimate:.2f}×", ha="center", va="center", fontsize=8,
                        color=label_colour(cmap(norm(c.ratio.estimate))),
                        fontweight="bold" if separable else "normal", fontstyle="normal" if separable else "italic")
        image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
        ax.set_xticks(range(len(rs)), [r.use_case.partition(", ")[2] or "all" for r in rs], rotation=30,
                      ha="right", fontsize=8)
        ax.set_yticks(range(len(arms)), [labels[a] for a in arms] if k == 0 else [""] * len(arms), fontsize=8)
        ax.set_title(f"{category}: speedup over the baseline", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.8, label="paired ratio (× baseline)")
    return fig
