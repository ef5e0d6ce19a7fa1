"""The HTML report in a real headless browser (Debian chromium): it loads, the tables and plots render.

Uses the committed real llama.cpp run (tests/fixtures/reports/llamacpp-run); no engine is started.
CI installs the browser with ``apt-get install -y chromium``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from bakeoff.core.reports import summarize_run, write_reports

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "llamacpp-run"
TAB_BLUE = np.array([31, 119, 180]) / 255  # the first arm's bar colour in the plots


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium is not installed; run `apt-get update && apt-get install -y chromium`")
    return exe


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run") / FIXTURE.name
    run.mkdir()
    for name in ("run.json", "samples.jsonl"):
        shutil.copy(FIXTURE / name, run / name)
    return write_reports(run).html


def _chromium(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def test_dom_has_the_table_rows_and_decoded_plots(chromium: str, report_html: Path, tmp_path: Path) -> None:
    proc = _chromium(chromium, tmp_path / "profile", "--dump-dom", report_html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    # The page's load handler counts images the browser decoded with a non-zero size.
    # decode by prompt, decode vs acceptance, and the decision map (the fixture has a speculating arm)
    assert re.search(r'<body[^>]*data-plots-loaded="3"', dom), dom[:500]
    community = dom[dom.index('<table id="community">'):]
    community = community[:community.index("</table>")]
    rows = re.findall(r'<tr data-arm="([^"]+)"', community)
    summary = summarize_run(report_html.parent.parent)
    assert rows == [a.arm for a in summary.arms] and len(rows) == 4
    assert community.count("not separable") >= 1 and "baseline" in community
    assert len(re.findall(r'<img class="plot"[^>]+src="data:image/svg\+xml;base64,', dom)) == 3
    assert re.findall(r'<img class="plot" id="plot-([^"]+)"', dom) == ["decode_by_prompt", "decode_vs_acceptance",
                                                                        "decision_map"]
    # the decision map: a table per category, a row per speculating arm, a verdict in every cell
    for rec in summary.recommendations:
        table = dom[dom.index(f'<table id="decision-map-{rec.category}">'):]
        table = table[:table.index("</table>")]
        assert re.findall(r'<tr data-arm="([^"]+)"', table) == [c.setting for c in rec.cells]
        assert len(re.findall(r'<td class="text (?:faster|slower|not-separable)">', table)) == len(rec.cells)
        assert [c.arm for c in rec.cells] == ["ngram-mod", "draft"]  # spec-off-twin does not speculate
        assert f'data-use-case="{rec.use_case}">{rec.line}' in dom.replace("&amp;", "&")


def test_screenshot_shows_tables_and_plots(chromium: str, report_html: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    proc = _chromium(chromium, tmp_path / "profile", "--hide-scrollbars", "--window-size=1280,2200",
                     f"--screenshot={shot}", report_html.as_uri())
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    pixels = imread(str(shot))[..., :3]
    assert pixels.shape[:2] == (2200, 1280)
    not_white = (pixels < 0.95).any(axis=2).mean()
    assert not_white > 0.03, f"only {not_white:.1%} of the page is drawn"
    bars = (np.abs(pixels - TAB_BLUE) < 0.03).all(axis=2).sum()
    assert bars > 500, f"{bars} pixels in the first arm's plot colour: the plots did not render"


ACCEPTANCE_RUN = FIXTURE.parent / "acceptance-run"  # tests/integration/test_acceptance_llamacpp.py, kept


def test_acceptance_table_histogram_and_per_position_curve_render(chromium: str, tmp_path: Path) -> None:
    """A real llama.cpp run with per-position counters: the acceptance table and both acceptance plots."""
    run = tmp_path / ACCEPTANCE_RUN.name
    run.mkdir()
    for name in ("run.json", "samples.jsonl"):
        shutil.copy(ACCEPTANCE_RUN / name, run / name)
    html = write_reports(run).html
    proc = _chromium(chromium, tmp_path / "profile", "--dump-dom", html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    for name in ("acceptance_histogram", "acceptance_per_position", "decision_map"):
        assert f'id="plot-{name}"' in dom
    images = len(re.findall(r'<img class="plot"', dom))
    assert images == 5 and re.search(rf'<body[^>]*data-plots-loaded="{images}"', dom), dom[:300]
    table = dom[dom.index('<table id="acceptance">'):]
    table = table[:table.index("</table>")]
    summary = summarize_run(run)
    assert re.findall(r'<tr data-arm="([^"]+)"', table) == [a.arm for a in summary.acceptance] == ["draft", "ngram"]
    draft = summary.acceptance[0]
    hist = " ".join(f"{k}:{n}" for k, n in enumerate(draft.accepted_histogram or []) if n)
    assert hist and hist in table


DECISION_RUN = FIXTURE.parent / "decision-map-run"  # a run whose answer is a recommendation per category

# Appended to a copy of the page: where the verdict and the recommendation land in a 1280×900 window.
_MEASURE = ("<script>window.addEventListener('load',function(){var b=document.body,"
            "v=document.getElementById('verdict'),r=document.getElementById('recommendation');b.setAttribute('data-verdict-bottom',"
            "v?String(v.getBoundingClientRect().bottom):'none');b.setAttribute('data-recommendation-bottom',"
            "r?String(r.getBoundingClientRect().bottom):'none');b.setAttribute('data-in-verdict',"
            "String(!!(v&&r&&v.contains(r))));});</script>")


@pytest.mark.parametrize("fixture", [FIXTURE, DECISION_RUN], ids=["llamacpp-run", "decision-map-run"])
def test_the_page_opens_with_the_answer(chromium: str, tmp_path: Path, fixture: Path) -> None:
    """The verdict block and the recommendation are on the first screen (USER-2: it was section 9 of 13)."""
    run = tmp_path / fixture.name
    run.mkdir()
    for name in ("run.json", "samples.jsonl"):
        shutil.copy(fixture / name, run / name)
    page = write_reports(run).html
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    proc = _chromium(chromium, tmp_path / "profile", "--window-size=1280,900", "--dump-dom", probe.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r'<body data-plots-loaded="\d+"([^>]*)>', proc.stdout) or re.search(r"<body([^>]*)>", proc.stdout)
    assert body is not None
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))
    assert attrs.get("verdict-bottom") not in (None, "none"), attrs
    assert float(attrs["verdict-bottom"]) <= 900, attrs  # the whole verdict on the first screen
    assert attrs["in-verdict"] == "true" and float(attrs["recommendation-bottom"]) <= 900, attrs
    dom = proc.stdout
    assert dom.index('id="verdict"') < dom.index('<table id="community">')
    summary = summarize_run(run)
    verdict = dom[dom.index('id="verdict"'):dom.index("</section>")]
    assert re.findall(r'<tr data-arm="([^"]+)"', verdict) == [a.arm for a in summary.arms]
