"""The decision map of a real run in a real headless browser (Debian chromium): every table and plot renders.

Uses the committed run of examples/decision-map-cpu.yaml (tests/fixtures/reports/decision-map-run: SmolLM2 on
llama.cpp, spec-off, n-gram simple n-max 2/4/8, self-draft p-min 0/0.75, code and prose, depth 96/192, 1/2/4
streams, on a shared 2-core box); no engine is started. evidence/examples/decision-map-cpu/ is its report.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bakeoff.core.reports import summarize_run, write_reports

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "decision-map-run"


@pytest.fixture(scope="module")
def dom(tmp_path_factory: pytest.TempPathFactory) -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium is not installed; run `apt-get update && apt-get install -y chromium`")
    tmp = tmp_path_factory.mktemp("map")
    run = tmp / FIXTURE.name
    run.mkdir()
    for name in ("run.json", "samples.jsonl"):
        shutil.copy(FIXTURE / name, run / name)
    page = write_reports(run).html
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp / 'profile'}", "--dump-dom",
            page.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_every_plot_decodes_and_the_map_plot_is_there(dom: str) -> None:
    plots = re.findall(r'<img class="plot" id="plot-([^"]+)"', dom)
    assert "decision_map" in plots, plots
    loaded = re.search(r'<body[^>]*data-plots-loaded="(\d+)"', dom)
    assert loaded is not None and int(loaded.group(1)) == len(plots), dom[:500]


def test_each_category_has_its_table_with_a_column_per_point_and_the_verdicts(dom: str) -> None:
    s = summarize_run(FIXTURE)
    for category in ("code", "prose"):
        recs = [r for r in s.recommendations if r.category == category]
        # all points pooled, then depth 96 and 192 at 1, 2 and 4 streams
        assert [r.use_case.partition(", ")[2] for r in recs] == [
            "all points", *(f"depth {d}, {n} stream{'s' if n > 1 else ''}" for d in (96, 192) for n in (1, 2, 4))]
        table = dom[dom.index(f'<table id="decision-map-{category}">'):]
        table = table[:table.index("</table>")]
        assert re.findall(r'<tr data-arm="([^"]+)"', table) == ["draft n-max 2 p-min 0.0", "draft n-max 2 p-min 0.75"]
        assert len(re.findall(r"<th[ >]", table)) == 2 + len(recs)
        # every cell is a paired ratio: a verdict where 3 or more requests pair, else 'too few'
        cells = re.findall(r'<td class="text(?: (faster|slower|not-separable))?">([^<]*)</td>', table)
        assert len(cells) == 2 * len(recs)
        for verdict_class, text in cells:
            assert re.match(r"(?:[★≈✗] )?\d+\.\d\d× \(", text), text
            assert bool(verdict_class) != text.endswith("too few for a verdict)"), text
        for rec in recs:  # the recommendation line per use case is on the page, with what was left out and why
            assert f'data-use-case="{rec.use_case}">' in dom
            assert ("left out: ngram-n_max2, ngram-n_max4, ngram-n_max8 (speculation asked but nothing "
                    "drafted)") in rec.line
