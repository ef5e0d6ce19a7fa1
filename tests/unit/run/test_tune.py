"""``bakeoff tune`` on the sim engine: the race keeps identical candidates as a plateau, and the verification
catches a candidate that is fast at one stream and collapses at four. Real sim processes, real requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.analysis.racing import RaceCandidate, Status, look, tune_decision
from bakeoff.core.cli.full_app import app
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.tune import candidate_settings, simplicity, tune_arms
from bakeoff.core.reports import write_reports
from bakeoff.core.reports.model import summarize_run
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.events import RunEvents
from bakeoff.core.run.tune import TUNE_FILE, engine_config, promote_winner, read_tune, run_tune

WORKLOAD = "workload: {prompts: [prose], max_tokens: 16, reps: 2, warmup: 0, gates: [], seed: 3}\n"


def test_space_expands_like_a_sweep_on_the_baseline() -> None:
    config = parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 20}}\n"
                           "  - {name: fixed, engine: sim, model: sim, options: {itl_ms: 5}}\n" + WORKLOAD +
                           "tune: {space: {options.itl_ms: [10, 15], options.tokens_per_event: [1, 2]}}\n")
    arms = tune_arms(config)
    assert [a.name for a in arms.candidates] == [
        "fixed", "tune-itl_ms10-tokens_per_event1", "tune-itl_ms10-tokens_per_event2",
        "tune-itl_ms15-tokens_per_event1", "tune-itl_ms15-tokens_per_event2"]
    assert arms.settings("fixed") == {"options.itl_ms": 5}
    # the baseline's own value is no change: tokens_per_event 1 is the sim's default, unset on the baseline
    assert candidate_settings(arms.generated[0], arms.baseline) == {"options.itl_ms": 10,
                                                                    "options.tokens_per_event": 1}
    s = {n: simplicity(arms.settings(n), arms.space) for n in ["spec-off", *[a.name for a in arms.generated]]}
    assert s["spec-off"] < s["tune-itl_ms10-tokens_per_event1"] < s["tune-itl_ms10-tokens_per_event2"] \
        < s["tune-itl_ms15-tokens_per_event1"]


def test_a_bad_space_key_is_named() -> None:
    config = parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim}\n" + WORKLOAD +
                           "tune: {space: {speculative.nmax: [2]}}\n")
    with pytest.raises(ConfigError, match=r"^f\.yaml: tune\.space\.speculative\.nmax: unknown key"):
        tune_arms(config, "f.yaml")
    invalid = parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim}\n" + WORKLOAD +
                            "tune: {space: {settings.ctx: [0]}}\n")
    with pytest.raises(ConfigError, match=r'^f\.yaml: tune\.space point \{"settings\.ctx": 0\} makes an invalid arm'):
        tune_arms(invalid, "f.yaml")
    with pytest.raises(ConfigError, match="no 'tune:' section"):
        tune_arms(parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim}\n"))


def _paired(arm: str, rate: float, passes: int = 4, reps: int = 3) -> list[Sample]:
    """One arm's requests, pass by pass, at a decode rate with a fixed ±0.2 % wobble (tight intervals)."""
    return [Sample(arm=arm, engine="sim", prompt="prose", mode="chat", rep=r, pass_index=p, concurrency=1,
                   decode_tps=rate * (1 + 0.002 * ((p * reps + r) % 3 - 1)))
            for p in range(passes) for r in range(reps)]


def test_a_look_keeps_a_candidate_within_the_margin_of_the_best_and_drops_one_beyond_it() -> None:
    # separably slower than the best by 1 % on a tight interval: within the 3 % margin, it stays on the plateau
    # (the old rule dropped it and made its identical twin the "winner"); 10 % slower: dropped
    samples = _paired("spec-off", 100) + _paired("a", 150) + _paired("b", 148.5) + _paired("c", 135)
    lk = look(samples, ["a", "b", "c"], "spec-off", passes_done=4, max_passes=4, margin=0.03)
    assert lk.best == "a"
    assert set(lk.dropped) == {"c"}
    b = look(samples, ["a", "b"], "spec-off", passes_done=4, max_passes=4, margin=0.0)
    assert set(b.dropped) == {"b"}  # with no margin, separably slower is enough


def test_identical_candidates_stay_a_plateau_and_the_simplest_is_named(tmp_path: Path) -> None:
    # usage_offset only matters when usage is wrong: the two candidates run the same speed (and differ on paper);
    # 48 tokens, so that a busy box's scheduling jitter at the window's two ends is a small share of it
    config = parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 30}}\n" +
                           WORKLOAD.replace("max_tokens: 16", "max_tokens: 48") +
                           "tune: {space: {options.itl_ms: [10], options.usage_offset: [4, 5]}, max_passes: 3, "
                           "budget_s: 600}\n")
    outcome = run_tune(config, tmp_path, verify=False)
    result = outcome.result
    statuses = {c.arm: c.status for c in result.candidates}
    assert statuses == {"tune-usage_offset4": "plateau", "tune-usage_offset5": "plateau"}
    assert "winner" not in statuses.values()
    assert result.winner["arm"] == "tune-usage_offset4"  # the earlier listed value: the simplest
    assert result.winner["chosen_by"].startswith("simplest of a plateau of 2")
    assert all(c.ci_low is not None and c.ci_low > 1 for c in result.candidates)  # both beat spec-off
    assert result.passes == 3 and result.stopped == "max passes (3)"
    assert result.decision == "decided" and all(c.verdict == "faster" for c in result.candidates)
    assert read_tune(outcome.race.path) == result and (outcome.race.path / TUNE_FILE).is_file()
    summary = summarize_run(outcome.race.path)  # summary.json's tune section and report.md's
    assert summary.tune == result
    files = write_reports(outcome.race.path, summary, plots=False)
    assert json.loads(files.json.read_text())["tune"]["winner"]["arm"] == "tune-usage_offset4"
    text = files.markdown.read_text()
    assert "**Tune**" in text and "simplest of a plateau of 2" in text


def test_a_separably_slower_candidate_is_dropped_and_the_one_left_wins(tmp_path: Path) -> None:
    config = parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 30}}\n" + WORKLOAD +
                           "tune: {space: {options.itl_ms: [20, 8]}, max_passes: 4, budget_s: 600}\n")
    result = run_tune(config, tmp_path, verify=False).result
    by_arm = {c.arm: c for c in result.candidates}
    slower = by_arm["tune-itl_ms20"]
    assert slower.status == "dropped" and slower.dropped_vs == "tune-itl_ms8"
    assert slower.dropped_after_requests is not None and slower.dropped_after_requests >= 3 * 2
    assert by_arm["tune-itl_ms8"].status == "winner" and result.winner["arm"] == "tune-itl_ms8"
    assert result.winner["chosen_by"] == "alone" and result.stopped.startswith("one candidate left")
    assert result.decision == "decided" and by_arm["tune-itl_ms8"].verdict == "faster"


def test_a_collapsing_winner_is_flagged(tmp_path: Path) -> None:
    # the only candidate: fast alone, slow with company
    config = parse_bakeoff(
        "arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 20}}\n" + WORKLOAD +
        "tune: {space: {options.itl_ms: [8], options.itl_ms_per_stream: [25]}, streams: [1], max_passes: 3, "
        "budget_s: 600, verify_streams: [1, 4], verify_passes: 3}\n")
    outcome = run_tune(config, tmp_path)
    result = outcome.result
    assert result.winner["arm"] == "tune-itl_ms8-itl_ms_per_stream25"
    assert [c.status for c in result.candidates] == ["winner"]
    assert result.verify is not None and result.verify.collapse and result.verify.collapse_at == [4]
    assert not {p.streams: p for p in result.verify.points}[1].collapse
    with pytest.raises(ConfigError, match="collapses at \\[4\\] streams; not promoted"):
        promote_winner(outcome, print)  # refused before the live box is touched
    with pytest.raises(ConfigError, match="no live: section"):
        run_tune(config, tmp_path, promote=True)


def test_engine_config_is_the_adapters_own_flags_less_the_baselines(tmp_path: Path) -> None:
    from bakeoff.engines.llamacpp.adapter import LlamaCppAdapter

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    config = parse_bakeoff(f"arms:\n  - {{name: spec-off, engine: llamacpp, model: {model}}}\n" + WORKLOAD +
                           "tune: {space: {speculative.method: [ngram], speculative.n_max: [4]}}\n")
    arms = tune_arms(config)
    out = engine_config(LlamaCppAdapter(), arms.generated[0], arms.baseline, tmp_path)
    assert out["engine"] == "llamacpp" and "4" in out["flags"]
    assert "--model" not in out["flags"] and "-m" not in out["flags"]


def test_a_baseline_without_a_valid_request_ends_the_race_as_nothing_measured(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 10, crash_on_start: "
                    "'E sim: boom'}}\n" + WORKLOAD + "tune: {space: {options.itl_ms: [4]}}\n")
    result = run_tune(parse_bakeoff(path.read_text()), tmp_path / "api", verify=False).result
    assert result.decision == "no verdict" and result.passes == 1
    assert result.stopped.startswith("the baseline 'spec-off' has no valid request after pass 1")
    # the command's exit code is the run's own outcome (3: nothing valid), not a configuration error's 2
    done = CliRunner().invoke(app, ["tune", str(path), "--out", str(tmp_path / "cli"), "--no-verify"])
    assert done.exit_code == 3, done.output
    assert "no setting named: the baseline 'spec-off' has no valid request" in done.output


def test_a_candidate_that_changes_nothing_is_left_out_and_a_space_of_them_refused() -> None:
    base = "arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 20}}\n" + WORKLOAD
    arms = tune_arms(parse_bakeoff(base + "tune: {space: {options.itl_ms: [20, 8]}}\n"))
    assert [a.name for a in arms.candidates] == ["tune-itl_ms8"] and arms.no_ops == ["tune-itl_ms20"]
    for space in ("{options.itl_ms: [20]}", "{options.crash_on_start: [null]}"):
        with pytest.raises(ConfigError, match=r"^f\.yaml: tune: no candidate differs from the baseline 'spec-off'"):
            tune_arms(parse_bakeoff(base + f"tune: {{space: {space}}}\n"), "f.yaml")


def _candidate(arm: str, status: Status, lo: float, hi: float) -> RaceCandidate:
    return RaceCandidate(arm=arm, settings={"k": 1}, status=status, ratio=(lo + hi) / 2, ci_low=lo, ci_high=hi,
                         pairs=12)


def test_the_tuners_answer_is_decided_only_on_evidence_as_a_gates() -> None:
    faster, open_ = _candidate("a", "winner", 1.05, 1.20), _candidate("b", "plateau", 0.96, 1.12)
    equal, dropped = _candidate("c", "plateau", 0.99, 1.02), _candidate("d", "dropped", 0.97, 1.40)
    assert tune_decision("a", "off", [faster], 3, 0.03)[0] == "decided"
    # a named candidate whose interval reaches 1 (the simplest of a plateau) is no answer yet
    decision, why = tune_decision("b", "off", [open_], 3, 0.03)
    assert decision == "inconclusive" and why.startswith("b is not told apart from off: 1.04× (0.96–1.12)"), why
    # spec-off kept: decided when each candidate left is within the margin (or dropped), not while one may be faster
    assert tune_decision("off", "off", [equal, dropped], 3, 0.03)[0] == "decided"
    decision, why = tune_decision("off", "off", [equal, open_], 3, 0.03)
    assert decision == "inconclusive" and "b may be faster than off" in why and "passes would decide it" in why
    assert tune_decision("off", "off", [equal], 3, 0.01)[0] == "inconclusive"  # the run's own margin
    assert tune_decision("a", "off", [faster], 2, 0.03)[0] == "inconclusive"  # no look yet
    few = equal.model_copy(update={"pairs": 4})  # within the margin, but from fewer pairs than a verdict needs
    decision, why = tune_decision("off", "off", [few], 3, 0.03)
    assert decision == "inconclusive" and "too few pairs" in why, why


def test_engine_config_gives_vllms_speculative_config_as_json(tmp_path: Path) -> None:
    from bakeoff.engines.vllm.adapter import VllmAdapter

    (tmp_path / "config.json").write_text("{}")  # a model directory, as vLLM takes one
    config = parse_bakeoff(f"arms:\n  - {{name: spec-off, engine: vllm, model: {tmp_path}}}\n" + WORKLOAD +
                           "tune: {space: {speculative.method: [ngram], speculative.n_max: [4]}}\n")
    arms = tune_arms(config)
    out = engine_config(VllmAdapter(), arms.generated[0], arms.baseline, tmp_path)
    assert out["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4}
    assert "--speculative-config" in out["flags"] and "--model" not in out["flags"]


def test_bakeoff_check_checks_every_candidate_on_paper() -> None:
    from bakeoff.core.run.check import check_config

    config = parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim}\n" + WORKLOAD +
                           "tune: {space: {speculative.method: [ngram, mtp]}}\n")
    result = check_config(config, "f.yaml")
    assert [a.name for a in result.arms] == ["spec-off", "tune-method-ngram", "tune-method-mtp"]
    assert result.errors == ["arm 'tune-method-mtp': sim has no speculative method 'mtp'; it supports: none, ngram"]


def test_a_budget_too_small_for_a_look_keeps_spec_off_and_says_undecided(tmp_path: Path) -> None:
    config = parse_bakeoff("arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 20}}\n" + WORKLOAD +
                           "tune: {space: {options.itl_ms: [8, 10]}, budget_s: 0.1}\n")
    warnings: list[str] = []
    result = run_tune(config, tmp_path, events=RunEvents(on_warning=warnings.append)).result
    assert result.passes == 1 and result.stopped.startswith("budget")
    assert result.winner["arm"] == "spec-off" and result.winner["chosen_by"].startswith("undecided")
    assert sorted(result.undecided) == ["tune-itl_ms10", "tune-itl_ms8"]
    assert {c.status for c in result.candidates} == {"plateau"} and result.verify is None
    assert any("raise tune.budget_s" in w for w in warnings)
    assert result.decision == "inconclusive" and "the first look needs 3" in result.decision_why
