"""One arm session for every run kind: a plain, a concurrent and a phase sample made under the same conditions
carry the same flags (issue 27: phase samples used to miss the noise guard, ``settings-mismatch``, the
finish flags and the fixed-length check, because the timed request was written three times)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.engine.checks import read_effective
from bakeoff.core.engine.effective import Effective
from bakeoff.core.host.hostinfo import CpuMeter
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import read_samples
from bakeoff.core.run import arm as arm_module
from bakeoff.core.run.bakeoff import run_bakeoff

# The sim streams max_tokens tokens but reports usage 3 short: a short output under fixed length.
SIM = "{name: s, engine: sim, model: sim, options: {usage: wrong, usage_offset: -3, itl_ms: 5}}"
WORKLOAD = "workload: {prompts: [prose], max_tokens: 12, reps: 1, warmup: 0, gates: []"


def _kinds(sample: Sample) -> set[str]:
    return {f.split(":")[0] for f in sample.flags}


@pytest.fixture
def same_conditions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Foreign CPU load during every request, and an engine that runs with other settings than asked."""
    monkeypatch.setattr(CpuMeter, "stop", lambda self: 1.5)
    monkeypatch.setattr(CpuMeter, "foreign_limit", lambda self: 0.25)
    real = read_effective

    def mismatched(*args: Any, **kwargs: Any) -> Effective:
        eff = real(*args, **kwargs)
        eff.mismatches.append("asked ctx 4096, the engine says 2048")
        return eff

    monkeypatch.setattr(arm_module, "read_effective", mismatched)


def _run(tmp_path: Path, text: str) -> list[Sample]:
    run = run_bakeoff(parse_bakeoff(text), tmp_path / "runs")
    return read_samples(run.path)


def test_plain_concurrent_and_phase_samples_carry_the_same_flags(tmp_path: Path, same_conditions: None) -> None:
    plain = _run(tmp_path / "plain", f"arms: [{SIM}]\n{WORKLOAD}}}\n")
    concurrent = _run(tmp_path / "streams", f"arms: [{SIM}]\n{WORKLOAD}, concurrency: [2]}}\n")
    phases = _run(tmp_path / "phases", f"arms: [{SIM}]\n{WORKLOAD}}}\n"
                  "phases: {duration_s: 0.1, probe_interval_s: 5, knobs: [{name: k, apply: ['true'], "
                  "revert: ['true']}]}\n")
    # baseline, knob k, baseline; a 0.1 s phase fits a second 12-token request when the first ends in under
    # 0.1 s (the reader stops at the end of the answer, not at the server's close)
    assert len(plain) == 1 and len(concurrent) == 2 and len(phases) >= 3
    expected = {"foreign-load", "settings-mismatch", "fixed-length-missed", "server-count-mismatch",
                "token-events-mismatch"}  # the last two: the events and the engine count 12 tokens, usage 9
    for kind, samples in (("plain", plain), ("concurrent", concurrent), ("phase", phases)):
        for s in samples:  # a busy machine may add a rate flag (burst-delivery) to any of them, never remove one
            assert expected <= _kinds(s), (kind, s.flags)
    assert {s.phase for s in phases} == {"p00-baseline", "p01-k", "p02-baseline"}
    assert {s.arm for s in phases} == {"baseline", "k"}


def test_a_batch_writes_a_sample_per_stream_sharing_its_id(tmp_path: Path) -> None:
    samples = _run(tmp_path, f"arms: [{{name: s, engine: sim, model: sim, options: {{itl_ms: 5}}}}]\n"
                             f"{WORKLOAD}, concurrency: [3]}}\n")
    assert len(samples) == 3 and len({s.batch_id for s in samples}) == 1 and samples[0].batch_wall_s
    held = [[f for f in s.flags if not f.startswith("foreign-load")] for s in samples]  # a busy box may add it
    assert all(s.concurrency == 3 for s in samples) and held == [[]] * 3  # 12 of 12 tokens: fixed work held


def test_warm_up_runs_until_the_decode_rate_settles_and_is_recorded(tmp_path: Path) -> None:
    """An engine whose first request streams at half speed: one warm-up request would leave the timed ones to a
    rate that had not settled; warm-up goes on until two consecutive rates agree, and says how many it took."""
    arm = "{name: s, engine: sim, model: sim, options: {itl_ms: 8, slow_requests: 1}}"
    for settle, expected in (("0.4", 3), ("null", 1)):  # slow, fast, fast: settled; or exactly `warmup` (1)
        text = (f"arms: [{arm}]\nworkload: {{prompts: [prose], max_tokens: 8, reps: 1, warmup: 1, "
                f"warmup_settle: {settle}, gates: []}}\n")
        run = run_bakeoff(parse_bakeoff(text), tmp_path / settle)
        [attempt] = run.arm_records()["s"]
        assert attempt.warmup is not None and attempt.warmup.requests == expected, attempt.warmup
        rates = attempt.warmup.decode_tps
        if expected == 3:
            assert attempt.warmup.settled and rates[0] and rates[1] and rates[1] > 1.5 * rates[0]
        else:
            assert attempt.warmup.settled is None
