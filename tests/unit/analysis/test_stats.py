"""core/analysis/stats.py: intervals, pairing, verdicts, descriptive figures, the adaptive-pass rule, coverage."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from bakeoff.core.analysis.stats import (
    MIN_PAIRS,
    Comparison,
    Interval,
    bootstrap_ci,
    compare_to_baseline,
    describe_arm,
    median_half_widths,
    needs_more_passes,
    paired_ratio,
    passes_to_verdict,
    ratio_half_widths,
    unpaired_ratio,
    verdict,
)
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.plan import stateful_warning


def _samples(arm: str, rates: list[float], *, prompt: str = "p", passes: int = 1, **kw: object) -> list[Sample]:
    per_pass = len(rates) // passes
    return [Sample(arm=arm, engine="fake", prompt=prompt, mode="greedy", rep=i % per_pass, pass_index=i // per_pass,
                   decode_tps=r, **kw) for i, r in enumerate(rates)]  # type: ignore[arg-type]


def _noisy(mu: float, n: int, sd: float, seed: int) -> list[float]:
    return list(mu * np.exp(np.random.default_rng(seed).normal(0, sd, n)))


def test_bootstrap_ci_is_deterministic_per_seed_and_key_and_contains_the_median() -> None:
    values = _noisy(100, 30, 0.05, 1)
    a = bootstrap_ci(values, seed=3, key="x")
    assert a is not None and a == bootstrap_ci(values, seed=3, key="x")
    assert a != bootstrap_ci(values, seed=4, key="x") and a != bootstrap_ci(values, seed=3, key="y")
    assert a.lo <= a.estimate <= a.hi and a.estimate == pytest.approx(float(np.median(values)))
    assert a.n == 30 and a.clusters == 1 and a.level == 0.95
    assert bootstrap_ci([]) is None


def test_interval_narrows_with_more_data() -> None:
    small = bootstrap_ci(_noisy(100, 10, 0.05, 2), key="m")
    large = bootstrap_ci(_noisy(100, 400, 0.05, 2), key="m")
    assert small and large and large.half_width_rel < small.half_width_rel / 2


def test_passes_are_resampled_first_so_a_launch_effect_widens_the_interval() -> None:
    # Three passes whose levels differ by ±10 % but are nearly flat inside: requests alone look precise.
    values = [level * f for level in (90.0, 100.0, 110.0) for f in _noisy(1, 50, 0.002, 11)]
    passes = [p for p in range(3) for _ in range(50)]
    flat = bootstrap_ci(values, key="k")
    clustered = bootstrap_ci(values, passes, key="k")
    assert flat and clustered and clustered.clusters == 3 and flat.clusters == 1
    assert flat.hi - flat.lo < 2.0
    assert clustered.lo < 95.0 and clustered.hi > 105.0  # the pass levels show in the interval


def test_unequal_pass_sizes_are_handled() -> None:
    ci = bootstrap_ci([10.0, 11.0, 12.0, 20.0, 21.0], [0, 0, 0, 1, 1], key="u")
    assert ci is not None and 10.0 <= ci.lo <= ci.estimate <= ci.hi <= 21.0


def test_verdict_needs_the_interval_to_exclude_one() -> None:
    def iv(lo: float, hi: float) -> Interval:
        return Interval(estimate=(lo + hi) / 2, lo=lo, hi=hi, n=MIN_PAIRS)

    assert verdict(iv(1.01, 1.2)) == "faster"
    assert verdict(iv(0.8, 0.99)) == "slower"
    assert verdict(iv(0.98, 1.05)) == "not separable"  # fits a 5 % gain: undecided
    # an equivalence test: both bounds inside 1 ± 3 %, so neither arm is faster or slower by more
    assert verdict(iv(0.975, 1.025)) == "equivalent" and verdict(iv(0.97, 1.03)) == "equivalent"
    assert verdict(iv(0.96, 1.02)) == "not separable"  # fits a 4 % loss
    assert verdict(iv(1.005, 1.02)) == "faster"  # shown faster, by little: still faster
    assert verdict(iv(0.98, 1.05), margin=0.05) == "equivalent"  # the margin is the caller's


def test_fewer_pairs_than_the_bootstrap_needs_give_no_verdict_however_one_sided() -> None:
    # up to 5 pairs the 95 % bootstrap interval of their median is their bare range: it excludes 1 whenever every
    # pair is on one side, as 2 identical arms' 5 pairs are 6 % of the time, so no verdict until MIN_PAIRS
    five = bootstrap_ci([0.61, 0.64, 0.66, 0.70, 0.72], key="five")
    assert five is not None and (five.lo, five.hi) == (0.61, 0.72)
    six = bootstrap_ci([0.61, 0.64, 0.66, 0.70, 0.72, 0.75], key="six")
    assert six is not None and (six.lo, six.hi) != (0.61, 0.75)  # from 6 on it is narrower than the range
    assert MIN_PAIRS == 6
    for n in range(1, MIN_PAIRS):
        assert verdict(Interval(estimate=0.67, lo=0.67, hi=0.67, n=n)) == "too few pairs"
        assert verdict(Interval(estimate=1.0, lo=0.99, hi=1.01, n=n)) == "too few pairs"  # nor 'equivalent'
    assert verdict(Interval(estimate=0.67, lo=0.6, hi=0.7, n=MIN_PAIRS)) == "slower"
    one = paired_ratio(_samples("a", [67.0]), _samples("b", [100.0]), key="one")  # a single paired request
    assert one is not None and one.n == 1 and verdict(one) == "too few pairs"


def test_paired_ratio_finds_a_real_speedup_and_pairs_by_point() -> None:
    base = _noisy(100, 18, 0.03, 5)
    arm = [b * 1.2 * f for b, f in zip(base, _noisy(1, 18, 0.01, 6), strict=True)]
    ratio = paired_ratio(_samples("a", arm, passes=3), _samples("b", base, passes=3), key="r")
    assert ratio is not None and ratio.n == 18 and ratio.clusters == 3
    assert ratio.estimate == pytest.approx(1.2, rel=0.02) and verdict(ratio) == "faster"
    slower = paired_ratio(_samples("b", base, passes=3), _samples("a", arm, passes=3), key="r")
    assert slower is not None and verdict(slower) == "slower"


def test_pairing_cancels_a_drift_shared_by_both_arms() -> None:
    # Both arms slow down together from pass to pass: unpaired medians would blur, paired ratios do not.
    drift = [1.0] * 6 + [0.8] * 6 + [0.6] * 6
    base = [100 * d for d in drift]
    arm = [103 * d for d in drift]
    ratio = paired_ratio(_samples("a", arm, passes=3), _samples("b", base, passes=3), key="d")
    assert ratio is not None and ratio.lo == pytest.approx(1.03) and ratio.hi == pytest.approx(1.03)
    assert verdict(ratio) == "faster"


def test_identical_arms_are_not_separable() -> None:
    a = _samples("a", _noisy(100, 18, 0.03, 7), passes=3)
    b = _samples("b", _noisy(100, 18, 0.03, 8), passes=3)
    ratio = paired_ratio(a, b, key="same")
    assert ratio is not None and verdict(ratio) == "not separable"


def test_identical_arms_rarely_raise_a_false_alarm() -> None:
    # 100 simulated A/A runs (3 passes x 6 requests, 5 % per-request noise, a per-pass drift shared by both arms):
    # at 95 % the two-sided verdict should call "faster" or "slower" in about 5 % of them, not in a quarter.
    alarms = 0
    for trial in range(100):
        drift = np.repeat(_noisy(1, 3, 0.1, 1000 + trial), 6)
        a = _samples("a", list(drift * _noisy(100, 18, 0.05, 2 * trial)), passes=3)
        b = _samples("b", list(drift * _noisy(100, 18, 0.05, 2 * trial + 1)), passes=3)
        ratio = paired_ratio(a, b, key=f"aa{trial}", n_boot=400)
        assert ratio is not None
        alarms += verdict(ratio) != "not separable"
    assert alarms <= 15, f"{alarms} false alarms in 100 identical pairs"


def test_requests_without_a_partner_or_failed_are_left_out() -> None:
    base = _samples("b", [100.0, 100.0, 100.0])
    arm = _samples("a", [110.0, 120.0])
    arm.append(Sample(arm="a", engine="fake", prompt="p", mode="greedy", rep=2, status="error", error="boom"))
    ratio = paired_ratio(arm, base, key="x")
    assert ratio is not None and ratio.n == 2 and ratio.estimate == pytest.approx(math.sqrt(1.1 * 1.2))
    assert paired_ratio(_samples("a", [1.0], prompt="other"), base) is None


def test_streams_of_one_batch_pair_in_order() -> None:
    # A concurrency sweep writes several samples at the same (prompt, mode, rep, pass).
    def batch(arm: str, rates: list[float]) -> list[Sample]:
        return [Sample(arm=arm, engine="f", prompt="p", mode="greedy", rep=0, decode_tps=r, concurrency=2)
                for r in rates]

    ratio = paired_ratio(batch("a", [20.0, 40.0]), batch("b", [10.0, 20.0]), key="c")
    assert ratio is not None and ratio.n == 2 and ratio.estimate == pytest.approx(2.0)


def test_unpaired_ratio_uses_only_prompts_both_sides_measured() -> None:
    old = _samples("x", [100.0] * 6, passes=2)
    new = _samples("x", [110.0] * 6, passes=2) + _samples("x", [500.0] * 6, prompt="extra", passes=2)
    ratio = unpaired_ratio(new, old, key="u")
    assert ratio is not None and ratio.estimate == pytest.approx(1.1) and verdict(ratio) == "faster"


def test_describe_arm_figures() -> None:
    samples = _samples("a", [10.0, 20.0, 30.0, 40.0], prompt="p1", completion_tokens=101, n_first=1,
                       decode_s=10.0, ttft_s=0.5, drafted=10, accepted=5, acceptance=0.5)
    samples += _samples("a", [60.0, 60.0], prompt="p2", completion_tokens=101, n_first=1, decode_s=10.0,
                        drafted=10, accepted=10, acceptance=1.0)
    samples.append(Sample(arm="a", engine="fake", prompt="p1", mode="greedy", rep=9, status="error", flags=["x"]))
    st = describe_arm("a", samples, ["p1", "p2"], boot_s=[2.0, 4.0, 9.0])
    assert st.n == 6 and st.errors == 1 and st.flagged == 1 and st.passes == 1
    assert st.median is not None and st.median.estimate == 35.0
    assert st.mean == pytest.approx(220 / 6) and (st.min, st.max) == (10.0, 60.0)
    assert st.combined == pytest.approx(600 / 60)
    assert [p.prompt for p in st.per_prompt] == ["p1", "p2"]
    p1 = st.prompt("p1")
    assert p1 is not None and p1.median is not None and p1.median.estimate == 25.0 and p1.n == 4
    assert st.drafted == 60 and st.accepted == 40 and st.acceptance == pytest.approx(2 / 3)
    assert st.acceptance_range == (0.5, 1.0)
    assert st.ttft_median == 0.5 and st.boot_s_median == 4.0


def test_compare_to_baseline_orders_and_skips_the_baseline() -> None:
    samples = (_samples("base", [100.0] * 6, passes=2) + _samples("fast", [150.0] * 6, passes=2)
               + _samples("same", [100.0] * 6, passes=2))
    out = compare_to_baseline(samples, "base", ["base", "same", "fast"], ["p"])
    assert [c.arm for c in out] == ["same", "fast"]
    assert [c.verdict for c in out] == ["equivalent", "faster"]  # identical rates: an interval of width 0 at 1
    assert set(out[1].per_prompt) == {"p"} and out[1].reference == "base"


def test_until_ci_rule() -> None:
    tight = _samples("a", _noisy(100, 60, 0.005, 9), passes=3)
    wide = _samples("b", _noisy(100, 60, 0.2, 10), passes=3)
    widths = median_half_widths(tight + wide)
    assert widths["a"] < 0.01 < widths["b"]
    assert needs_more_passes(tight, 1, 0.03, 10)[0]  # one pass never suffices
    more, why = needs_more_passes(tight, 2, 0.03, 10)  # nor two: the pass bootstrap has three distinct draws
    assert more and "at least 3 passes" in why
    done, why = needs_more_passes(tight, 3, 0.03, 10)
    assert not done and "target reached" in why
    more, why = needs_more_passes(tight + wide, 3, 0.03, 10)
    assert more and "b ±" in why
    stop, why = needs_more_passes(tight + wide, 10, 0.03, 10)
    assert not stop and "--max-passes 10" in why


def _two_prompts(arm: str, speed: float, seed: int) -> list[Sample]:
    """Three passes of a fast and a slow prompt (3x apart), 1 % request noise, paired by seed across arms."""
    out = []
    for prompt, mu in (("short", 300.0), ("long", 100.0)):
        out += _samples(arm, [r * speed for r in _noisy(mu, 30, 0.01, seed + len(prompt))], prompt=prompt, passes=3)
    return out


def test_until_ci_with_a_baseline_drives_the_ratio_the_verdict_reads() -> None:
    """Arms whose medians straddle two prompts 3x apart have wide median intervals, yet their paired ratio
    is tight: the rule must stop on the ratio (what the verdict reads), not run to --max-passes."""
    samples = _two_prompts("base", 1.0, 1) + _two_prompts("fast", 1.1, 2)
    assert min(median_half_widths(samples).values()) > 0.2
    assert ratio_half_widths(samples, "base")["fast/base"] < 0.02
    assert needs_more_passes(samples, 3, 0.03, 10)[0]  # arm medians: never
    done, why = needs_more_passes(samples, 3, 0.03, 10, baseline="base")
    assert not done and "widest ratio CI" in why and "fast/base" in why and "target reached" in why
    # one arm only, or a baseline with no samples: the medians, as before
    assert "widest median CI" in needs_more_passes(samples, 3, 0.03, 10, baseline="gone")[1]


def test_stateful_speculators_warn_only_with_several_reps() -> None:
    llama = ("ngram-mod", "ngram-cache")
    assert stateful_warning("a", "ngram", "mod", llama, 3) is not None
    assert stateful_warning("a", "ngram", None, llama, 3) is not None  # the engine's default may be stateful
    assert stateful_warning("a", "ngram", "simple", llama, 3) is None
    assert stateful_warning("a", "ngram", "mod", llama, 1) is None
    assert stateful_warning("a", "suffix", None, ("suffix",), 2) is not None
    assert stateful_warning("a", "none", None, ("suffix",), 5) is None
    msg = stateful_warning("arm-x", "ngram", "mod", llama, 4)
    assert msg and msg.startswith("arm-x:") and "4 reps" in msg


def _coverage_module() -> object:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "ci_coverage.py"
    spec = importlib.util.spec_from_file_location("ci_coverage", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_ratio_interval_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    cov = _coverage_module()
    scenario = cov.Scenario("unit", passes=3, reps=3, launch_sd=0.01)  # type: ignore[attr-defined]
    result = cov.coverage(scenario, trials=200, seed=0, n_boot=500)  # type: ignore[attr-defined]
    assert 0.88 <= result["coverage"] <= 0.99, result


def test_burst_delivered_samples_never_reach_a_verdict_and_are_counted() -> None:
    """FAULTS D3: a buffered arm read ~70,000 tok/s and got '169× faster'. Its samples are left out, and said so."""
    ref = _samples("direct", [400.0] * 6)
    burst = _samples("proxy", [70000.0] * 6, flags=["burst-delivery: 15 of 15 decode tokens arrived in one read"])
    assert compare_to_baseline(ref + burst, "direct") == []  # nothing left to pair
    stats = describe_arm("proxy", burst)
    assert stats.n == 0 and stats.median is None and stats.no_rate == {"burst-delivery": 6}


def test_samples_without_a_rate_are_counted_by_reason() -> None:
    """AUDIT H2: a sample that silently lost its decode rate also silently left every statistic."""
    ok = _samples("a", [100.0] * 3)
    no_rate = _samples("a", [0.0], flags=["no-rate: one token event, no decode window"])
    no_rate[0].decode_tps = None
    failed = _samples("a", [0.0], status="error")
    stats = describe_arm("a", ok + no_rate + failed)
    assert stats.n == 3 and stats.errors == 1
    assert stats.no_rate == {"one token event, no decode window": 1}


def test_a_verdict_between_estimated_and_exact_first_event_counts_says_so() -> None:
    """AUDIT M5: an estimated first-event count biases one arm's rate; the comparison carries the caveat."""
    exact = _samples("exact", _noisy(100, 12, 0.02, 1), n_first_source="usage")
    estimated = _samples("est", _noisy(150, 12, 0.02, 2), n_first_source="estimated")
    (comparison,) = compare_to_baseline(exact + estimated, "exact")
    assert comparison.verdict == "faster" and comparison.notes
    assert "estimated" in comparison.notes[0]
    twin = _samples("twin", _noisy(100, 12, 0.02, 3), n_first_source="usage")
    (clean,) = compare_to_baseline(exact + twin, "exact")
    assert clean.notes == []
    assert describe_arm("est", estimated).n_first_sources == {"estimated": 12}


def test_an_undecided_ratio_says_how_many_passes_would_decide_it() -> None:
    def iv(est: float, lo: float, hi: float, passes: int) -> Interval:
        return Interval(estimate=est, lo=lo, hi=hi, n=4 * passes, clusters=passes)

    # 1.06 (0.94-1.18) after 3 passes: the lower bound clears 1 at 3 x (0.12 / 0.06)^2 = 12 passes
    assert passes_to_verdict(iv(1.06, 0.94, 1.18, 3)) == 12
    # 1.00 (0.94-1.06): nothing to exclude; inside ±3 % at 3 x (0.06 / 0.03)^2 = 12 passes
    assert passes_to_verdict(iv(1.0, 0.94, 1.06, 3)) == 12
    # 1.01 (0.97-1.05) after 2: within ±3 % takes the upper side's 0.04 into 0.02 of room, 2 x 2^2 = 8 passes;
    # clearing 1 would take 2 x (0.04 / 0.01)^2 = 32
    assert passes_to_verdict(iv(1.01, 0.97, 1.05, 2)) == 8
    assert passes_to_verdict(iv(1.06, 1.01, 1.1, 3)) is None  # decided: faster
    assert passes_to_verdict(iv(1.0, 0.99, 1.01, 3)) is None  # decided: equivalent
    assert passes_to_verdict(iv(1.06, 0.94, 1.18, 1)) is None  # one pass: no spread between launches yet
    c = Comparison(arm="a", reference="b", ratio=iv(1.06, 0.94, 1.18, 3), verdict="not separable")
    assert c.model_dump()["passes_to_decide"] == 12  # in summary.json beside the verdict


def test_the_readme_names_exactly_the_flags_that_keep_a_sample_out() -> None:
    """A user reading which flags leave a sample out of the statistics reads the list the code uses."""
    import re

    from bakeoff.core.analysis.stats import EXCLUDING_FLAGS

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    said = re.search(r"Exactly (\w+) flags keep a sample out:\s+(.+?);", readme, re.S)
    assert said, "the README's sentence on excluding flags is gone"
    named = re.findall(r"`([a-z-]+)`", said.group(2))
    assert sorted(named) == sorted(EXCLUDING_FLAGS) and said.group(1) == {3: "three"}.get(len(EXCLUDING_FLAGS)), named


def test_a_ratio_interval_is_rounded_outward_and_a_bound_never_reads_as_the_null() -> None:
    """USER-3 #10: '1.11× (1.00–1.30) faster' showed a lower bound of 1.00 for an interval that excludes 1."""
    from bakeoff.core.analysis.stats import ratio_text

    assert ratio_text(1.11, 1.004, 1.30) == "1.11× (1.004–1.30)"  # faster: its lower bound stays above 1
    assert ratio_text(0.98, 0.951, 0.9968) == "0.98× (0.95–0.997)"  # slower: its upper bound stays below 1
    assert ratio_text(1.18, 1.051, 1.289) == "1.18× (1.05–1.29)"  # outward: never narrower than measured
    assert ratio_text(1.0, 0.9549, 1.0201) == "1.00× (0.95–1.03)"
    assert ratio_text(1.004, 1.0003, 1.01, "x") == "1.004x (1.0003–1.01)"  # a decided estimate is not 1.00 either
    assert ratio_text(1.0, 1.0, 1.0) == "1.00× (1.00–1.00)"


def test_busy_counts_among_the_samples_behind_the_estimate() -> None:
    # a busy sample without a rate (an error, a burst) is not one of n: "busy on 3 of 2 samples" read once
    from bakeoff.core.analysis.stats import describe_arm
    from bakeoff.core.results.sample import Sample

    def s(rate: float | None, status: Literal["ok", "error"] = "ok") -> Sample:
        return Sample(arm="a", engine="sim", prompt="p", mode="chat", rep=0, status=status, decode_tps=rate,
                      flags=["foreign-load: 1.2 cores used by other processes"])
    stats = describe_arm("a", [s(10.0), s(11.0), s(None), s(None, "error")], n_boot=200)
    assert (stats.n, stats.busy) == (2, 2)
