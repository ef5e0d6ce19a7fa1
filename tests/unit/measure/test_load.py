"""Load points: open-loop schedules, latency counted from the scheduled time under overload, percentiles,
goodput, the crossover, and the exports loading in pandas."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest

import bakeoff
from bakeoff.core.analysis.load import Crossover, LoadPoint, _crossover, latency, load_section, meets
from bakeoff.core.analysis.stats import Comparison, Interval
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import Prompt, Slo, Workload
from bakeoff.core.measure.arrivals import schedule
from bakeoff.core.measure.points import arm_points, is_done, samples_expected
from bakeoff.core.reports.export import export_run
from bakeoff.core.reports.plots import render_plots
from bakeoff.core.results.db import done_key, point_of
from bakeoff.core.results.sample import Sample

ITL_S, MAX_TOKENS, REQUESTS, RATE = 0.02, 16, 10, 20.0
# The sim serves one request at a time here (max_in_flight 1), each at least (MAX_TOKENS - 1) x ITL_S = 0.3 s,
# while the schedule asks for one every 1 / RATE = 0.05 s: the server is slower than the arrival rate.
OVERLOADED = f"""name: overloaded
arms:
  - {{name: base, engine: sim, model: sim, options: {{itl_ms: {ITL_S * 1000:g}}}}}
  - {{name: fast, engine: sim, model: sim, options: {{itl_ms: {ITL_S * 500:g}}}}}
workload:
  prompts: [prose, code_bash]
  max_tokens: {MAX_TOKENS}
  warmup: 0
  gates: []
  arrival: {{rates: [{RATE:g}], distribution: constant, requests: {REQUESTS}, max_in_flight: 1}}
  concurrency: [1, 2]
  reps: 2
  slo: {{tight: {{ttft_s: 0.2}}, loose: {{e2e_s: 100}}}}
baseline: base
"""


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory: pytest.TempPathFactory) -> bakeoff.RunSummary:
    tmp = tmp_path_factory.mktemp("load")
    (tmp / "load.yaml").write_text(OVERLOADED)
    return bakeoff.run(tmp / "load.yaml", out=tmp / "runs")


def test_constant_schedule_is_evenly_spaced_and_poisson_is_seeded() -> None:
    assert schedule(4.0, 4, "constant", 0) == [0.0, 0.25, 0.5, 0.75]
    a, b = schedule(10.0, 2000, "poisson", 7), schedule(10.0, 2000, "poisson", 7)
    assert a == b and a[0] == 0.0 and all(y > x for x, y in itertools.pairwise(a))
    assert a != schedule(10.0, 2000, "poisson", 8)
    assert a[-1] / 1999 == pytest.approx(0.1, rel=0.1)  # mean gap 1 / rate


def test_arrival_needs_one_size_and_positive_rates() -> None:
    with pytest.raises(ValueError, match="exactly one of 'requests' or 'duration_s'"):
        Workload.model_validate({"arrival": {"rates": [1]}})
    with pytest.raises(ValueError, match="positive rates"):
        Workload.model_validate({"arrival": {"rates": [0], "requests": 3}})
    with pytest.raises(ValueError, match="at least one of ttft_s"):
        Workload.model_validate({"slo": {"x": {}}})
    with pytest.raises(ConfigError, match="depths"):
        parse_bakeoff("arms: [{name: a, engine: sim, model: sim}]\n"
                      "workload: {depths: [64], arrival: {rates: [1], requests: 2}}\n")
    assert Workload.model_validate({"arrival": {"rates": [2.5], "duration_s": 4}}).arrival.count(2.5) == 10  # type: ignore[union-attr]


def test_rate_points_are_one_per_rate_and_mode_and_resume_by_their_first_request() -> None:
    prompts = [Prompt(name="a", messages=[]), Prompt(name="b", messages=[])]
    w = Workload.model_validate({"arrival": {"rates": [1, 4], "requests": 5}, "modes": ["greedy"], "reps": 3})
    points = arm_points(w, prompts, ["greedy"])
    assert [(p.rate, p.prompt.name, p.rep) for p in points] == [(1.0, "a", 0), (4.0, "a", 0)]
    assert samples_expected(w, 2, 1) == 10
    first = Sample(arm="x", engine="sim", prompt="a", mode="greedy", rep=0, rate=4.0)
    done = {done_key(point_of(first))}
    assert is_done(done, "x", points[1], 0) and not is_done(done, "x", points[0], 0)
    both = Workload.model_validate({"arrival": {"rates": [1], "requests": 5}, "concurrency": [2], "reps": 1})
    assert samples_expected(both, 2, 1) == 2 * 2 + 5


def test_overloaded_open_loop_latency_counts_from_the_scheduled_time(overloaded: bakeoff.RunSummary) -> None:
    assert overloaded.path is not None
    _, samples = bakeoff.core.reports.model.load_run(overloaded.path)
    opened = sorted((s for s in samples if s.arm == "base" and s.rate == RATE), key=lambda s: s.rep)
    assert len(opened) == REQUESTS and all(s.status == "ok" for s in opened)
    assert [s.scheduled_s for s in opened] == pytest.approx([i / RATE for i in range(REQUESTS)])
    assert [s.prompt for s in opened[:3]] == ["prose", "code_bash", "prose"]  # prompts in turn
    for s in opened:
        assert s.send_lag_s is not None and s.ttft_s is not None and s.e2e_s is not None
        assert s.ttft_sched_s == pytest.approx(s.ttft_s + s.send_lag_s, abs=1e-6)
        assert s.e2e_sched_s == pytest.approx(s.e2e_s + s.send_lag_s, abs=1e-6)
    # request i waits for the i before it (>= 0.3 s each) but was due i x 0.05 s after the first
    service = (MAX_TOKENS - 1) * ITL_S
    last = opened[-1]
    assert last.send_lag_s is not None and last.e2e_sched_s is not None and last.e2e_s is not None
    assert last.send_lag_s >= 0.9 * (REQUESTS - 1) * (service - 1 / RATE)
    assert last.e2e_sched_s > 5 * last.e2e_s  # counted from when the client sent it, the backlog would vanish
    [point] = [p for p in overloaded.load.points if p.arm == "base" and p.load == "rate"]  # type: ignore[union-attr]
    p99 = point.percentiles["e2e_s"]["p99"]
    assert p99 is not None and p99.estimate >= last.e2e_sched_s * 0.95
    assert point.send_lag_p99_s is not None and point.send_lag_p99_s > 1.0
    assert point.goodput["tight"] < point.goodput["loose"]  # the queue pushed most TTFTs past 0.2 s
    assert point.offered_rps is not None and point.offered_rps < RATE / 2  # the server fell behind


def test_load_section_has_closed_and_open_points_with_paired_verdicts(overloaded: bakeoff.RunSummary) -> None:
    load = overloaded.load
    assert load is not None
    kinds = {(p.arm, p.load, p.value) for p in load.points}
    assert kinds == {(a, k, v) for a in ("base", "fast") for k, v in
                     (("streams", 1.0), ("streams", 2.0), ("rate", RATE))}
    fast = [p for p in load.points if p.arm == "fast"]
    assert all(p.vs_baseline is not None and p.vs_baseline.ratio.estimate > 1 for p in fast)
    # one comparison per pair: the concurrency table shows the same interval as the load point
    assert overloaded.concurrency is not None
    row = next(r for r in overloaded.concurrency.rows if r.arm == "fast" and r.point["streams"] == 2)
    twin = next(p for p in fast if p.load == "streams" and p.value == 2.0)
    assert row.vs_baseline is not None and twin.vs_baseline is not None
    assert row.vs_baseline.ratio == twin.vs_baseline.ratio
    assert {c.arm for c in load.crossover} == {"fast"} and load.frontier
    assert set(render_plots(overloaded)["load_frontier"]) == {"png", "svg"}


def test_exports_load_in_pandas_with_the_load_fields(overloaded: bakeoff.RunSummary, tmp_path: Path) -> None:
    assert overloaded.path is not None
    for fmt, read in (("csv", pd.read_csv), ("jsonl", lambda p: pd.read_json(p, lines=True)),
                      ("parquet", pd.read_parquet)):
        paths = export_run(overloaded.path, fmt, tmp_path / fmt, summary=overloaded)  # type: ignore[arg-type]
        samples = read(next(p for p in paths if p.name.startswith("samples")))
        points = read(next(p for p in paths if p.name.startswith("points")))
        opened = samples[samples["rate"] == RATE]
        assert len(opened) == 2 * REQUESTS
        assert (opened["e2e_sched_s"] >= opened["e2e_s"]).all()
        assert {"scheduled_s", "send_lag_s", "ttft_sched_s", "arm.options.itl_ms"} <= set(samples.columns)
        load = points[points["table"] == "load"]
        assert len(load) == 6 and {"e2e_s.p99", "ttft_s.p90_lo", "goodput.tight", "point.rate"} <= set(load.columns)
        assert load["e2e_s.p99"].notna().all()


def _point(value: float, verdict: str | None) -> LoadPoint:
    ci = Interval(estimate=1.0, lo=0.9, hi=1.1, level=0.95, n=3, clusters=1)
    vs = None if verdict is None else Comparison(arm="a", reference="b", ratio=ci, verdict=verdict)  # type: ignore[arg-type]
    return LoadPoint(arm="a", load="streams", value=value, vs_baseline=vs)


def test_crossover_reads_the_verdicts_in_load_order() -> None:
    c = _crossover("a", "streams", [_point(8, "not separable"), _point(1, "faster"), _point(4, "faster"),
                                    _point(16, "slower")])
    assert c == Crossover(arm="a", load="streams", last_faster=4, first_slower=16,
                          summary="faster up to 4 streams; not separable at 8; slower from 16 streams")
    never = _crossover("a", "streams", [_point(1, "not separable"), _point(2, "faster")])
    assert never is not None and never.last_faster is None and never.first_slower is None
    assert never.summary == "never faster; not separable at 1; never slower"


def test_latency_definitions_and_slo() -> None:
    s = Sample(arm="a", engine="x", prompt="p", mode="greedy", rep=0, ttft_s=0.1, e2e_s=1.1, completion_tokens=11,
               decode_tps=20.0)
    assert latency(s, "tpot_s") == pytest.approx(0.1) and latency(s, "itl_s") == pytest.approx(0.05)
    assert latency(s, "ttft_s") == 0.1
    s.rate, s.ttft_sched_s, s.e2e_sched_s = 1.0, 0.6, 1.6
    assert latency(s, "ttft_s") == 0.6 and latency(s, "e2e_s") == 1.6
    assert meets(s, Slo(ttft_s=0.7, tpot_s=0.2)) and not meets(s, Slo(ttft_s=0.5))
    assert load_section([s], ["a"], "a") is not None and load_section([], ["a"], "a") is None


def test_a_load_point_of_one_paired_request_says_too_few_pairs(tmp_path: Path) -> None:
    (tmp_path / "l.yaml").write_text("""arms:
  - {name: base, engine: sim, model: sim, options: {itl_ms: 1}}
  - {name: slow, engine: sim, model: sim, options: {itl_ms: 3}}
baseline: base
workload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, gates: [], arrival: {rates: [50], requests: 1}}
""")
    summary = bakeoff.run(tmp_path / "l.yaml", out=tmp_path / "runs")
    assert summary.load is not None and summary.path is not None
    [point] = [p for p in summary.load.points if p.vs_baseline is not None]
    assert point.vs_baseline is not None and point.vs_baseline.ratio.n == 1
    assert point.vs_baseline.verdict == "too few pairs"  # not 'slower' from one pair with lo == hi
    assert [c.verdict for c in summary.comparisons] == ["too few pairs"]  # the head-to-head table likewise
    [crossover] = summary.load.crossover
    assert crossover.first_slower is None and "too few pairs at 50" in crossover.summary
    assert ") slower" not in (summary.path / "report" / "report.md").read_text()
