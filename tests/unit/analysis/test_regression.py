"""The regression gate's verdict (core/analysis/regression.py) and its plan (core/run/regression.py)."""

from __future__ import annotations

import pytest

from bakeoff.core.analysis.regression import judge_gate
from bakeoff.core.analysis.stats import MIN_PAIRS, Comparison, Interval, passes_to_decide, verdict
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import parse_share
from bakeoff.core.run.regression import GATE_PASSES, gate_config


def _c(estimate: float, lo: float, hi: float, comparable: bool = True, n: int = 12) -> Comparison:
    ratio = Interval(estimate=estimate, lo=lo, hi=hi, n=n, clusters=3)
    return Comparison(arm="new", reference="old", ratio=ratio, verdict=verdict(ratio),
                      comparable={"ok": comparable, "reasons": [] if comparable else ["outputs differ in length"]})


def test_fails_only_when_the_interval_bound_is_beyond_the_threshold() -> None:
    slow = judge_gate("old", "new", 0.03, [("overall", _c(0.58, 0.55, 0.62))])
    assert slow.outcome == "failed"
    assert slow.line.startswith("gate FAILED: new is 42.0% slower than old over the whole run (0.580×, 95% CI "
                                "0.550–0.620: at least 38.0% slower, more than the 3.0% allowed)")
    # slower, separably, but by less than allowed: passes
    assert judge_gate("old", "new", 0.03, [("overall", _c(0.985, 0.975, 0.995))]).outcome == "passed"
    # a low estimate with a wide interval is neither a failure nor a pass
    assert judge_gate("old", "new", 0.03, [("overall", _c(0.9, 0.7, 1.05))]).outcome == "inconclusive"
    same = judge_gate("old", "new", 0.03, [("overall", _c(1.0, 0.98, 1.02))])
    assert same.outcome == "passed" and same.line.startswith("gate passed: new against old: 1.000× (0.980–1.020)")


def test_a_point_with_too_few_pairs_is_inconclusive_never_passed_nor_failed() -> None:
    # one pair reads 0.69x (0.69-0.69): its "interval" is the pair itself; two equal pairs read 1.00x (1.00-1.00)
    for ratio in (_c(0.69, 0.69, 0.69, n=1), _c(1.0, 1.0, 1.0, n=2), _c(1.0, 0.99, 1.01, n=MIN_PAIRS - 1)):
        assert ratio.verdict == "too few pairs"
        gate = judge_gate("old", "new", 0.03, [("overall", ratio)], passes=3)
        assert gate.outcome == "inconclusive" and gate.points[0].inconclusive and not gate.points[0].failed
        assert (f"too few pairs for a verdict over the whole run ({ratio.ratio.n} paired request(s), {MIN_PAIRS} "
                "needed)" in gate.line)
    mixed = judge_gate("old", "new", 0.03, [("depth 0", _c(1.0, 0.98, 1.02)), ("depth 512", _c(0.5, 0.5, 0.5, n=1))])
    assert mixed.outcome == "inconclusive"  # the decided point does not make the gate green


def test_an_interval_that_fits_a_slowdown_beyond_the_limit_never_passes() -> None:
    # an A/A gate on a busy box: 1.144x (0.530-1.463) also fits a build 47 % slower, so it is not green
    aa = judge_gate("cached", "copy", 0.10, [("overall", _c(1.144, 0.530, 1.463))], passes=3)
    assert aa.outcome == "inconclusive" and aa.points[0].inconclusive and not aa.points[0].failed
    assert aa.line.startswith("gate inconclusive: copy against cached: 1.144× (0.530–1.463) over the whole run; the "
                              "interval over the whole run reaches both sides of 0.900 (the 10.0% allowed)")
    # the lower half-width 0.614 against 0.244 of room: (0.614/0.244)^2 x 3 passes = 18.99 -> 19
    assert "about 19 passes in all would decide" in aa.line
    # a busy machine is named as the likely cause
    busy = judge_gate("cached", "copy", 0.10, [("overall", _c(1.144, 0.530, 1.463))], passes=3,
                      busy="11 of 12 samples")
    assert busy.line.endswith("; the machine was busy during 11 of 12 samples (foreign-load, harness-lag or GPU "
                              "throttle flags): a quieter machine may decide it")
    # the same estimate, tight enough: the slowdown beyond the limit is excluded
    tight = judge_gate("cached", "copy", 0.10, [("overall", _c(1.01, 0.93, 1.08))], passes=3)
    assert tight.outcome == "passed" and "a slowdown beyond the 10.0% allowed is excluded" in tight.line


def test_passes_to_decide_follows_the_spread_on_the_estimates_side() -> None:
    assert passes_to_decide(0.95, 0.85, 1.05, 0.9, 3) == 12  # (0.10 / 0.05)^2 x 3 toward passing
    assert passes_to_decide(0.85, 0.80, 0.95, 0.9, 4) == 16  # (0.10 / 0.05)^2 x 4 toward failing
    assert passes_to_decide(0.95, 0.94, 0.96, 0.9, 3) == 4   # never fewer than one more
    assert passes_to_decide(0.9, 0.8, 1.0, 0.9, 3) is None   # on the line: no number of passes decides


def test_each_depth_is_judged_and_the_worst_is_named() -> None:
    v = judge_gate("old", "new", 0.05, [("depth 512", _c(0.99, 0.96, 1.01)), ("depth 4096", _c(0.7, 0.65, 0.74)),
                                        ("depth 2048", _c(0.8, 0.78, 0.82))])
    assert v.outcome == "failed" and "at depth 4096" in v.line and "also slower beyond it at depth 2048" in v.line
    assert [p.failed for p in v.points] == [False, True, True]


def test_no_pairs_or_unequal_work_is_no_verdict() -> None:
    none = judge_gate("old", "new", 0.03, [("overall", None)])
    assert none.outcome == "no verdict" and none.line.startswith("gate: no verdict: the whole run (no paired")
    v = judge_gate("old", "new", 0.03, [("overall", _c(0.5, 0.4, 0.6, comparable=False))])
    assert v.outcome == "no verdict" and "outputs differ in length" in v.line


def test_a_broken_quality_gate_fails_even_a_fast_build() -> None:
    v = judge_gate("old", "new", 0.03, [("overall", _c(1.5, 1.4, 1.6))], broken_gates=["arithmetic"])
    assert v.outcome == "failed" and "fails quality gate(s) arithmetic" in v.line


def test_shares() -> None:
    assert parse_share("3%") == pytest.approx(0.03) and parse_share(0.05) == 0.05 and parse_share("2.5 %") == 0.025
    for bad in ("3", "abc", "0%", "120%"):
        with pytest.raises(ValueError):
            parse_share(bad)


GATE = """\
arms:
  - {name: old, engine: llamacpp, model: smollm2, settings: {threads: 2}, options: {binary: /opt/a/llama-server}}
  - {name: new, engine: llamacpp, model: smollm2, settings: {threads: 2}, options: {binary: /opt/b/llama-server}}
  - {name: other, engine: llamacpp, model: smollm2, settings: {threads: 1}}
gate: {reference: old, candidate: new, max_slowdown: 5%}
workload: {prompts: [code_python], max_tokens: 32}
"""


def test_gate_config_runs_two_builds_interleaved() -> None:
    config, gate, notes = gate_config(parse_bakeoff(GATE), max_slowdown=0.1)
    assert [a.name for a in config.arms] == ["old", "new"] and config.baseline == "old"
    assert config.workload.passes == GATE_PASSES and gate.max_slowdown == 0.1
    assert "left out: other" in notes[0] and "3 interleaved passes" in notes[1]


def test_gate_arms_may_differ_in_the_build_only() -> None:
    text = GATE.replace("settings: {threads: 2}, options: {binary: /opt/b", "settings: {threads: 1}, options: "
                        "{binary: /opt/b")
    with pytest.raises(ConfigError, match=r"differ only in the engine build \(options.binary, "
                                          r"options.build_version\), but differ in: settings.threads: 2 → 1"):
        gate_config(parse_bakeoff(text))
    with pytest.raises(ConfigError, match="at least 3 passes"):
        gate_config(parse_bakeoff(GATE.replace("max_tokens: 32", "max_tokens: 32, passes: 2")))
    with pytest.raises(ConfigError, match="no 'gate:' section"):
        gate_config(parse_bakeoff(GATE.replace("gate: {reference: old, candidate: new, max_slowdown: 5%}", "")))
    with pytest.raises(ConfigError, match=r"gate\.candidate 'nope' is not an arm name"):
        parse_bakeoff(GATE.replace("candidate: new", "candidate: nope"))
