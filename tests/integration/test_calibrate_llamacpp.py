"""Forced-acceptance calibration on the real llama-server, with models bakeoff synthesizes itself.

One `bakeoff calibrate` given by flags (MTP, n_max 1 and 2, acceptance 0, 0.5 and 1.0, plus spec-off; the flags
stand for a file holding only a ``calibrate:`` section, run by the runner `bakeoff run` uses, which
tests/unit/cli/test_calibrate_command.py checks): llama.cpp's own counts must show the forced acceptance,
the calibration's speedup must agree with the one the engine's own timings give, tokens per verify step
must follow from the acceptance, and a break-even acceptance with an interval must come out for both
n_max. Then the HTML report is loaded in headless Chromium. Nothing here asserts that speculation is
fast: these tiny models decode at whatever speed a shared 2-core box gives them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bakeoff.core.analysis.stats import MACHINE_FLAGS
from bakeoff.core.results.store import RunDir

pytestmark = pytest.mark.integration

# the same calibration as a file: {engine: llamacpp, method: mtp, n_max: [1, 2], acceptance: [0.0, 0.5, 1.0],
# settings: {ctx: 1024, threads: 2}} with workload {prompts: [code_python], max_tokens: 64, reps: 2, warmup: 1}
# (acceptance 0 anchors the break-even interval: with 0.5 as the lowest point, a noisy box's upper bound at 0.5
# can already exceed 1, leaving the interval open below the grid)
FLAGS = ["--engine", "llamacpp", "--method", "mtp", "--n-max", "1,2", "--acceptance", "0,0.5,1.0", "--threads", "2",
         "--max-tokens", "64", "--reps", "2"]


@pytest.fixture(scope="module")
def calibration_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bakeoff.engines.llamacpp import LlamaCppAdapter, LlamaCppOptions

    try:
        LlamaCppAdapter.installer.locate(LlamaCppOptions())
    except Exception as exc:  # EngineUnavailable
        pytest.skip(f"llama-server is not installed ({exc}); run `bakeoff engines install llamacpp`")
    exe = shutil.which("bakeoff")
    assert exe, "the bakeoff console script is not installed (pip install -e .)"
    tmp = tmp_path_factory.mktemp("calibrate")
    proc = subprocess.run([exe, "calibrate", *FLAGS, "--out", str(tmp / "runs"), "--tables"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the terminal shows the calibration, and the timing-agreement check per point
    assert "break-even acceptance" in proc.stdout and "timing agreement: " in proc.stdout
    return next(d for d in (tmp / "runs").iterdir() if d.is_dir())


def test_forced_acceptance_matches_and_agrees_with_the_engine_timings(calibration_run: Path) -> None:
    summary = json.loads((calibration_run / "report" / "summary.json").read_text())
    cal = summary["calibration"]
    points = {(p["n_max"], p["target_acceptance"]): p for p in cal["points"]}
    assert set(points) == {(n, a) for n in (1, 2) for a in (0.0, 0.5, 1.0)}, cal
    for (n_max, target), p in points.items():
        # a busy machine is said on the point (its spec-off pair's flags) and is no fault of the accounting
        load = [f for f in p["flags"] if f.startswith("spec-off pair flagged:") and all(
            part.split("×")[0].strip() in MACHINE_FLAGS for part in f.split(":", 1)[1].split(","))]
        # so is a request whose tokens reached the client in bursts (the scheduler's, not the engine's doing): the
        # point says it lost that pair from both speedups, and the other pair still carries the accounting checks
        lost = [f for f in p["flags"] if (m := re.fullmatch(r"lost 1 request pair\(s\) from both speedups \((.+)\)", f))
                and set(m.group(1).split(", ")) <= {"burst-delivery", *MACHINE_FLAGS}]
        assert p["samples"] == 2 and p["flags"] == [*lost, *load], p
        # llama.cpp's own drafted/accepted counts show the acceptance the synthesized head was built for
        if target == 1.0:
            assert p["measured_acceptance"] == 1.0, p
        else:
            assert abs(p["measured_acceptance"] - p["expected_acceptance"]) <= 0.05, p
            assert abs(p["expected_acceptance"] - target) <= 0.03, p
        # bakeoff's decode rates (client clock, true token counts) agree with the engine's own timings, request
        # by request, and the speedup is a ratio of two such rates (this arm's and spec-off's), a median of paired
        # ratios over 2 requests. How close two clocks read on a shared 2-core box is physical, not a property to
        # assert tightly (benchmarks/harness.py prints it): a quiet run here read one point's agreement at 1.08,
        # and a run beside another test's CPU load paired a spec-off request read 33 % off (flagged harness-lag)
        # into a speedup 13 % off the engine's. What the bounds catch is wrong accounting: counting events
        # instead of the 2-3 tokens a verify step commits, or pairing with the wrong arm, is off by 1.5-3x
        assert p["timing_agreement"] == pytest.approx(1.0, abs=0.15), p
        allowed = abs(p["timing_agreement"] - 1) + 0.15
        assert p["speedup"] == pytest.approx(p["engine_speedup"], rel=allowed), p
        assert p["speedup_vs_engine"] == pytest.approx(p["speedup"] / p["engine_speedup"] - 1), p
        assert p["ci_low"] <= p["speedup"] <= p["ci_high"], p
        # p_min 0: every verify step drafts n_max tokens, so a step commits 1 + acceptance x n_max tokens
        assert p["tokens_per_step"] == pytest.approx(1 + p["measured_acceptance"] * n_max, rel=0.02), p
        assert p["verify_step_cost"] > 0, p
    break_even = {b["n_max"]: b for b in cal["break_even"]}
    assert set(break_even) == {1, 2}
    for b in break_even.values():
        assert b["acceptance"] is not None, b
        assert b["source"] in ("measured crossing", "cost model"), b
        # a bound whose curve never crosses 1 inside the grid is None, printed "below grid"/"above grid": at n-max 1
        # on 2 cores the crossing can sit near acceptance 1.0 (CI read 0.9995), so the lower-bound curve ends below 1
        lo, hi = b["ci_low"], b["ci_high"]
        assert lo is not None or hi is not None, b
        assert (lo is None or lo <= b["acceptance"]) and (hi is None or b["acceptance"] <= hi), b
    records = RunDir(calibration_run).arm_records()
    for arm in ("cal-llamacpp-mtp-n1-a0.50", "cal-llamacpp-mtp-n2-a1.00"):
        assert "draft-mtp" in records[arm][0].effective["spec_types"].split(","), records[arm][0]


def test_the_calibration_report_renders_in_headless_chromium(calibration_run: Path, tmp_path: Path) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium is not installed; run `apt-get update && apt-get install -y chromium`")
    page = calibration_run / "report" / "report.html"
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom", page.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    plots = re.findall(r'<img class="plot" id="plot-([^"]+)"', dom)
    assert {"calibration_heatmap", "calibration_curves"} <= set(plots), plots
    loaded = re.search(r'<body[^>]*data-plots-loaded="(\d+)"', dom)
    assert loaded is not None and int(loaded.group(1)) == len(plots), dom[:500]  # every plot decoded
    grid = dom[dom.index('<table id="calibration-grid-llamacpp-mtp">'):]
    grid = grid[:grid.index("</table>")]
    assert re.findall(r'<tr data-arm="([^"]+)"', grid) == ["0.00", "0.50", "1.00"]
    assert len(re.findall(r"\d+\.\d\d×", grid)) == 6  # every cell of acceptance x n_max measured
    be = dom[dom.index('<table id="calibration-break-even">'):]
    assert len(re.findall(r"<tr data-arm=", be[:be.index("</table>")])) == 2
    # the 2 % check per point: client speedup, engine speedup, their difference and the verdict
    assert re.search(r'<p id="calibration-agreement">\d of 6 points within 2 %', dom), dom[-3000:]
    agree = dom[dom.index('<table id="calibration-agreement-points">'):]
    agree = agree[:agree.index("</table>")]
    assert len(re.findall(r"<td>[+-]\d+\.\d %</td><td>(?:yes|NO)</td>", agree)) == 6, agree
