"""The capacity search on the sim's planted capacity model (engines/sim/capacity.py), without HTTP: each probe
draws its requests' TTFTs from the same function the sim server sleeps by, with per-request noise, a per-probe
wobble and a drift of the machine shared by every arm, so seeds vary and the interleaving must carry the pairing.

Done-when of issue 44: a planted 15 % gap (capacities 40 and 46) is covered by the paired interval in at least
19 of 20 seeds, the planted cliff labelled in all 20; the probes spent are counted for both strategies. Per
workload kind (issue 44 item 2): a structured capacity planted apart from the plain one is found per kind.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.analysis.capacity import (
    CapacityResult,
    Kind,
    Probe,
    analyze_capacity,
    read_capacity,
    write_capacity,
)
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.capacity import CapacitySection
from bakeoff.core.config.loader import load_bakeoff
from bakeoff.core.config.prompts import resolve_prompts
from bakeoff.core.config.schema import Slo, SyntheticSessions, Workload
from bakeoff.core.config.sessions import synthetic_sessions
from bakeoff.core.measure.points import concurrent_replays
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.capacity import (
    ProbeFn,
    _unsent_note,
    check_capacity_config,
    kinds_of,
    probe_from_samples,
    search,
)
from bakeoff.engines.sim.capacity import ttft_s

LABEL = "TTFT p90 ≤ 200 ms"
CLIFF = {"ttft_ms": 100.0, "ttft_ms_per_stream": 1.0, "capacity_cliff": 4.0}
ARMS = {"spec-off": {**CLIFF, "capacity_streams": 40}, "spec-on": {**CLIFF, "capacity_streams": 46}}


def section(**kw: object) -> CapacitySection:
    base: dict[str, object] = {"constraints": [{"metric": "ttft_s", "percentile": 90, "max_s": 0.2}],
                               "start": 1, "max": 256, "replicates": 2} | kw
    return CapacitySection.model_validate(base)


def prober(arms: Mapping[str, Mapping[str, Any]], seed: int, noise: float = 0.08) -> ProbeFn:
    rng = random.Random(seed)
    clock = [0]

    def probe(arm: str, level: float, replicate: int, rnd: int) -> Probe:
        clock[0] += 1
        drift = 1 + 0.1 * math.sin(clock[0] / 5 + seed)  # the machine, slowly: shared by every arm
        wobble = rng.lognormvariate(0, 0.03)
        n = int(level)
        values = [ttft_s(arms[arm], n) * drift * wobble * rng.lognormvariate(0, noise) for _ in range(n)]
        return Probe(arm=arm, level=level, replicate=replicate, round=rnd, values={LABEL: values})
    return probe


def run(seed: int, arms: Mapping[str, Mapping[str, Any]] = ARMS, **kw: object
        ) -> tuple[list[Probe], CapacityResult]:
    s = section(**kw)
    probes = search(list(arms), s, prober(arms, seed))
    return probes, analyze_capacity(probes, s, list(arms), "spec-off", n_boot=300, seed=seed)


@pytest.mark.parametrize("strategy", ["bisect", "secant"])
def test_planted_gap_is_covered_and_cliff_labelled_over_seeds(strategy: str) -> None:
    covered, probes_spent = 0, []
    for seed in range(20):
        _probes, result = run(seed, strategy=strategy)
        (cmp,) = result.comparisons
        assert cmp.ratio is not None
        covered += cmp.ratio.lo <= 46 / 40 <= cmp.ratio.hi
        assert all(a.shape == "cliff" for a in result.arms), (seed, [a.jump for a in result.arms])
        assert all(a.binding == LABEL and a.monotone for a in result.arms)
        for a in result.arms:  # the bracket holds the planted capacity (held there, failed one stream above)
            cap = ARMS[a.arm]["capacity_streams"]
            assert a.held is not None and a.failed is not None and a.held <= cap < a.failed, a
        assert cmp.verdict == "carries more"
        probes_spent.append(result.levels)
    print(f"{strategy}: loads probed for two arms over 20 seeds: {min(probes_spent)}-{max(probes_spent)}, "
          f"mean {sum(probes_spent) / 20:.1f}; covered {covered} of 20")
    assert covered >= 19, covered
    # two arms, loads probed (each with 2 replicates): within AIPerf's documented 13-25 for one configuration
    assert max(probes_spent) <= 26, probes_spent


def test_smooth_curve_is_not_called_a_cliff() -> None:
    smooth = {"spec-off": {"ttft_ms": 100.0, "ttft_ms_per_stream": 2.5},
              "spec-on": {"ttft_ms": 100.0, "ttft_ms_per_stream": 2.5 / 1.15}}
    for seed in range(10):
        _, result = run(seed, smooth)
        assert [a.shape for a in result.arms] == ["smooth", "smooth"], [a.jump for a in result.arms]


def test_no_gap_reads_no_gap() -> None:
    same = {"spec-off": ARMS["spec-off"], "spec-on": ARMS["spec-off"]}
    _, result = run(3, same)
    (cmp,) = result.comparisons
    assert cmp.ratio is not None and cmp.ratio.lo <= 1 <= cmp.ratio.hi
    assert cmp.verdict != "carries more"


def test_boundary_below_start_and_above_max_are_censored() -> None:
    _, low = run(0, start=64, max=128)
    assert [a.censored for a in low.arms] == ["below", "below"]
    assert low.comparisons[0].verdict == "censored"
    _, high = run(0, start=1, max=16)
    assert [a.censored for a in high.arms] == ["above", "above"] and high.arms[0].held == 16


def test_hopeless_probe_skips_its_replicates() -> None:
    probes, result = run(0, replicates=3)
    at64 = [p for p in probes if p.level == 64]
    assert len(at64) == 2  # one per arm: 4x the limit at the first replicate ends the load
    assert all(len(r.levels) > 0 for r in result.arms)


def test_not_monotone_is_reported() -> None:
    s = section(strategy="bisect")  # holds at 8 streams and at 24, fails at 16: a load curve with a hole in it

    def probe(arm: str, level: float, replicate: int, rnd: int) -> Probe:
        v = 0.3 if level == 16 else 0.1
        return Probe(arm=arm, level=level, replicate=replicate, round=rnd, values={LABEL: [v] * int(level)})
    probes = search(["a"], s, probe)
    probes.append(Probe(arm="a", level=24, replicate=0, round=99, values={LABEL: [0.1] * 24}))
    result = analyze_capacity(probes, s, ["a"], "a", n_boot=50)
    assert not result.arms[0].monotone and "24" in (result.arms[0].monotone_note or "")


def test_result_survives_json_with_failed_loads(tmp_path: Path) -> None:
    """A load whose every request failed has no percentile: capacity.json must still read back."""
    s = section()

    def probe(arm: str, level: float, replicate: int, rnd: int) -> Probe:
        values = [0.1] * int(level) if level <= 4 else [math.inf] * int(level)
        return Probe(arm=arm, level=level, replicate=replicate, round=rnd, values={LABEL: values})
    result = analyze_capacity(search(["a", "b"], s, probe), s, ["a", "b"], "a", n_boot=50)
    write_capacity(tmp_path, result)
    back = read_capacity(tmp_path)
    assert back is not None and back.arm("a").held == 4 and back.arm("a").failed == 5  # type: ignore[union-attr]
    assert back.arm("a").levels[-1].values[LABEL] is None  # type: ignore[union-attr]


# -- per workload kind: plain prompts and structured requests, each with its own planted capacity -----------------
KINDED = {"spec-off": {**CLIFF, "capacity_streams": 40, "structured_capacity_streams": 20},
          "spec-on": {**CLIFF, "capacity_streams": 46, "structured_capacity_streams": 26}}


def kinded_prober(arms: Mapping[str, Mapping[str, Any]], seed: int, kind: Kind) -> ProbeFn:
    """:func:`prober` for one kind: a structured request reads the grammar's capacity (as the sim server does)."""
    rng = random.Random(f"{seed}:{kind}")

    def probe(arm: str, level: float, replicate: int, rnd: int) -> Probe:
        n = int(level)
        values = [ttft_s(arms[arm], n, grammar=kind == "structured") * rng.lognormvariate(0, 0.08)
                  for _ in range(n)]
        return Probe(arm=arm, level=level, replicate=replicate, round=rnd, values={LABEL: values}, kind=kind)
    return probe


def test_planted_gap_per_kind_is_found_over_seeds() -> None:
    """Plain 40 vs 46 streams (15 %), structured 20 vs 26 (30 %): each kind's paired interval covers its own gap
    (searched kind after kind, as CapacityExecutor does), and the rows come arm by arm, kind by kind."""
    s, covered = section(), {"plain": 0, "structured": 0}
    planted = {"plain": 46 / 40, "structured": 26 / 20}
    for seed in range(20):
        probes = [p for kind in ("plain", "structured")
                  for p in search(list(KINDED), s, kinded_prober(KINDED, seed, kind))]
        result = analyze_capacity(probes, s, list(KINDED), "spec-off", n_boot=300, seed=seed)
        assert result.kinds == ["plain", "structured"]
        assert [(a.arm, a.kind) for a in result.arms] == [("spec-off", "plain"), ("spec-off", "structured"),
                                                          ("spec-on", "plain"), ("spec-on", "structured")]
        for a in result.arms:
            cap = KINDED[a.arm]["capacity_streams" if a.kind == "plain" else "structured_capacity_streams"]
            assert a.held is not None and a.failed is not None and a.held <= cap < a.failed, a
            assert a.shape == "cliff"
        for cmp in result.comparisons:
            assert cmp.ratio is not None and cmp.verdict == "carries more"
            covered[cmp.kind] += cmp.ratio.lo <= planted[cmp.kind] <= cmp.ratio.hi
        assert "the structured streams" in result.comparisons[1].text
    print(f"per kind, planted gap covered in 20 seeds: {covered}")
    assert min(covered.values()) >= 19, covered


SESSIONS = synthetic_sessions(SyntheticSessions(sessions=3, turns=3, tool_result_tokens=4, reply_tokens=2))


def sessions_prober(arms: Mapping[str, Mapping[str, Any]], seed: int) -> ProbeFn:
    """:func:`prober` for the sessions kind: at load N the N replays ``concurrent_replays`` names run at once, so
    every turn meets N requests in flight (the sim's in-flight count); a sample per turn, judged as the engine's
    samples are (:func:`probe_from_samples`)."""
    rng = random.Random(f"{seed}:sessions")
    s = section()

    def probe(arm: str, level: float, replicate: int, rnd: int) -> Probe:
        n = int(level)
        turns = [t for replay in concurrent_replays(SESSIONS, "greedy", replicate, n) for t in replay]
        assert len(turns) == n * 3 and len({t.session for t in turns}) == n
        samples = [sample(prompt=t.prompt.name, session=t.session, turn=t.turn, concurrency=n, status="ok",
                          ttft_s=ttft_s(arms[arm], n) * rng.lognormvariate(0, 0.08)) for t in turns]
        return probe_from_samples(arm, level, replicate, rnd, samples, s, {}, kind="sessions")
    return probe


def test_planted_gap_on_sessions_is_covered_over_seeds() -> None:
    """Sessions replayed at once, planted cliffs at 40 and 46 concurrent sessions (15 %): the sessions kind's
    paired interval covers the gap in at least 19 of 20 seeds, and the brackets hold the planted capacities."""
    s, covered = section(), 0
    for seed in range(20):
        probes = search(list(ARMS), s, sessions_prober(ARMS, seed))
        result = analyze_capacity(probes, s, list(ARMS), "spec-off", n_boot=300, seed=seed)
        assert result.kinds == ["sessions"] and {a.kind for a in result.arms} == {"sessions"}
        for a in result.arms:
            cap = ARMS[a.arm]["capacity_streams"]
            assert a.held is not None and a.failed is not None and a.held <= cap < a.failed, a
        (cmp,) = result.comparisons
        assert cmp.ratio is not None and cmp.verdict == "carries more" and cmp.kind == "sessions"
        assert "the concurrent sessions at" in cmp.text
        covered += cmp.ratio.lo <= 46 / 40 <= cmp.ratio.hi
    assert covered >= 19, covered


def sample(**kw: Any) -> Sample:
    return Sample.model_validate({"arm": "a", "engine": "sim", "prompt": "p", "mode": "greedy", "rep": 0} | kw)


def test_an_invalid_structured_answer_fails_its_slo() -> None:
    """A fast answer that breaks its schema is not a served request: it reads as infinitely slow, and misses the
    goodput tier, as the structured section does not count it fast."""
    s = section(goodput={"slo": "fast", "min_share": "50%"})
    tiers = {"fast": Slo(ttft_s=0.5)}
    samples = [sample(ttft_s=0.1, structured="json_schema", valid=True, completion_tokens=10),
               sample(ttft_s=0.1, structured="json_schema", valid=False, invalid_reason="not JSON",
                      completion_tokens=40),
               sample(ttft_s=0.1, completion_tokens=5)]  # plain: valid stays None
    probe = probe_from_samples("a", 3, 0, 0, samples, s, tiers, kind="structured")
    assert probe.kind == "structured"
    assert probe.values[LABEL] == [0.1, math.inf, 0.1]
    assert probe.met == [True, False, True]
    assert probe.tokens == 15  # tok/J counts served tokens: the invalid answer's 40 are no work done


def test_sessions_are_searched_closed_loop_and_rate_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "cap.yaml"
    path.write_text("arms: [{name: a, engine: sim, model: sim}]\n"
                    "workload: {sessions: {synthetic: {sessions: 2, turns: 2}}, gates: []}\n"
                    "capacity: {constraints: [{metric: ttft_s, max_s: 1}]}\n")
    assert check_capacity_config(load_bakeoff(path)).load == "streams"
    path.write_text(path.read_text().replace("capacity: {", "capacity: {load: rate, "))
    with pytest.raises(ConfigError, match=r"capacity\.load: rate with workload\.sessions is not searched"):
        check_capacity_config(load_bakeoff(path))


def test_closed_loop_names_the_prompts_of_a_kind_it_does_not_send() -> None:
    prompts = resolve_prompts(Workload.model_validate({"prompts": ["prose"], "structured": {}}))
    assert kinds_of(prompts) == ["plain", "structured"]
    assert _unsent_note(prompts, "plain", section()) is None
    assert _unsent_note(prompts, "structured", section()) == (
        "capacity (structured): closed-loop probes send json_order N times at once (a batch is one prompt); "
        "not sent: tool_weather")
    rate = section(load="rate")
    assert _unsent_note(prompts, "structured", rate) is None  # open loop sends the kind's prompts in turn
