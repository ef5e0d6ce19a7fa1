"""Markdown, terminal, plots and HTML render the same summary."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.image import imread
from rich.console import Console

from bakeoff.core.reports import print_summary, render_html, render_markdown, summarize_run, write_reports
from bakeoff.core.reports.markdown import markdown_table
from bakeoff.core.reports.plots import PLOTS, render_plots
from bakeoff.core.reports.tables import community_table

Maker = Callable[..., Path]


def _run(make_run: Maker) -> Path:
    return make_run({"base": 100.0, "twin": 100.0, "fast": 130.0}, acceptance={"fast": 0.6}, seed=1)


def test_markdown_is_the_community_format(make_run: Maker) -> None:
    s = summarize_run(_run(make_run))
    md = render_markdown(s)
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| arm"))
    assert header == ("| arm | Overall median | Overall mean | code_python | prose | Acceptance | vs baseline |")
    first = lines.index(header)
    table = lines[first + 2: lines.index("", first)]
    rows = {line.split(" | ")[0][2:]: line for line in table}
    assert list(rows) == ["base", "twin", "fast"]
    assert rows["base"].endswith("| baseline |")
    assert re.search(r"\| 1\.\d{3}× \(1\.\d{3}–1\.\d{3}\) faster \|$", rows["fast"])
    assert "equivalent" in rows["twin"] and "60.0% (1080/1800)" in rows["fast"]
    assert re.search(r"\| 1\d\d\.\d \(\d+\.\d–\d+\.\d\) \|", rows["fast"])  # median with its interval
    assert "median of per-request ratios paired on prompt, mode, rep and pass" in md


def test_markdown_escapes_pipes() -> None:
    table = markdown_table(["arm", "x"], [["a|b", "1"]])
    assert "a\\|b" in table and table.splitlines()[1] == "|---|---:|"


def test_terminal_prints_intervals_verdicts_and_warnings(make_run: Maker) -> None:
    path = make_run({"base": 100.0, "fast": 130.0}, passes=1, reps=5)
    console = Console(record=True, width=250)
    print_summary(summarize_run(path), console)
    text = console.export_text()
    assert "Overall median" in text and "faster" in text and "×" in text
    assert "WARNING 1 pass" in text and "token accounting" in text


def test_plots_are_real_images(make_run: Maker) -> None:
    path = _run(make_run)
    from bakeoff.core.results.store import read_samples

    plots = render_plots(summarize_run(path), read_samples(path))
    assert set(plots) == set(PLOTS)
    for formats in plots.values():
        assert formats["png"].startswith(b"\x89PNG") and b"<svg" in formats["svg"]
        pixels = imread(io.BytesIO(formats["png"]))
        assert pixels.shape[0] > 200 and float(np.std(pixels)) > 0.05  # drawn, not blank
    assert render_plots(summarize_run(path))["decode_by_prompt"]["svg"] == plots["decode_by_prompt"]["svg"]


def test_html_is_self_contained(make_run: Maker) -> None:
    path = _run(make_run)
    s = summarize_run(path)
    html = render_html(s, render_plots(s))
    assert html.startswith("<!DOCTYPE html>") and '<table id="community">' in html
    # verdict, community and audit tables, and the acceptance table's speculative arm (drafted counts, no steps)
    assert len(s.acceptance) == 1 and s.acceptance[0].drafts is None
    assert html.count('<tr data-arm="') == 3 * len(s.arms) + len(s.acceptance)
    assert html.index('<section id="verdict">') < html.index('<table id="community">')  # the answer first
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing fetched
    images = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert len(images) == 2 and all(base64.b64decode(i).lstrip().startswith(b"<?xml") for i in images)
    assert 'class="text faster"' in html and 'class="text equivalent"' in html


def test_write_reports_into_the_run_directory(make_run: Maker) -> None:
    path = _run(make_run)
    files = write_reports(path)
    assert files.directory == path / "report"
    names = sorted(p.name for p in files.directory.iterdir())
    assert names == ["decode_by_prompt.png", "decode_by_prompt.svg", "decode_vs_acceptance.png",
                     "decode_vs_acceptance.svg", "report.html", "report.md", "summary.json"]
    data = json.loads(files.json.read_text())
    assert data["schema_version"] == 2 and [c["verdict"] for c in data["comparisons"]] == ["equivalent", "faster"]
    header = community_table(summarize_run(path))[0]
    assert files.markdown.read_text().splitlines()[2] == "| " + " | ".join(header) + " |"
