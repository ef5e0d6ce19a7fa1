"""``bakeoff tune``'s compile beyond flags: TabbyAPI's config.yml, a vLLM per-batch-size n_max schedule chosen from
paired numbers at each stream count, and the cost of speculation on with nothing drafted. Synthetic samples with
known ratios; the adapters' own translations, no engine started."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from bakeoff.core.analysis.racing import TuneResult, TuneVerify, batch_schedule, n_max_by_streams, nothing_drafted
from bakeoff.core.common.errors import CapabilityNotSupported
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import Arm
from bakeoff.core.config.tune import tune_arms
from bakeoff.core.engine.checks import with_n_max_schedule
from bakeoff.core.engine.install import Program
from bakeoff.core.reports.markdown import tune_markdown
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.tune import engine_config, n_max_arms

WORKLOAD = "workload: {prompts: [prose], max_tokens: 16, reps: 2, warmup: 0, gates: [], seed: 3}\n"


def samples(arm: str, rate: float | Callable[[int], float], *, streams: list[int], passes: int = 4, reps: int = 2,
            drafted: int | None = None, seed: int = 0) -> list[Sample]:
    """One arm's requests at each stream count (``streams`` requests per batch), decode rate ``rate`` times a
    little noise; ``rate`` may be a function of the stream count."""
    rnd = random.Random(f"{arm}{seed}")
    out = []
    for level in streams:
        value = rate(level) if callable(rate) else rate
        for p in range(passes):
            for r in range(reps):
                for _ in range(level):
                    out.append(Sample(arm=arm, engine="vllm", prompt="code", mode="chat", rep=r, pass_index=p,
                                      concurrency=level, decode_tps=value * rnd.uniform(0.98, 1.02),
                                      drafted=drafted))
    return out


# -- TabbyAPI: config.yml ---------------------------------------------------------------------------------------

def test_a_tabbyapi_winner_is_compiled_as_its_own_config_yml(tmp_path: Path) -> None:
    tabby = tmp_path / "tabby"
    tabby.mkdir()
    (tabby / "main.py").write_text("# TabbyAPI stand-in\n")
    model = tmp_path / "models" / "target-exl3"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    config = parse_bakeoff(f"arms:\n  - {{name: spec-off, engine: exllama, model: {model}, "
                           f"options: {{tabby_dir: {tabby}}}}}\n" + WORKLOAD +
                           "tune: {space: {speculative.method: [ngram], speculative.n_max: [4]}}\n")
    arms = tune_arms(config)
    from bakeoff.engines.exllama.adapter import ExllamaAdapter

    out = engine_config(ExllamaAdapter(), arms.generated[0], arms.baseline, tmp_path / "arm", tmp_path)
    # only the section that differs from spec-off's config.yml, in TabbyAPI's own keys
    assert out["config"] == {"config.yml": {"draft_model": {"draft_mode": "ngram", "draft_num_tokens": 4,
                                                            "dynamic_draft": False}}}
    assert out["flags"] == []  # TabbyAPI's command line is the same: the setting lives in the file
    written = Path(out["config_files"]["config.yml"])
    assert written == tmp_path / "tune-winner-config.yml"
    whole = yaml.safe_load(written.read_text())  # the whole file, as TabbyAPI reads it from its directory
    assert whole["draft_model"]["draft_num_tokens"] == 4 and whole["model"]["model_name"] == "target-exl3"
    # the same arm as spec-off: nothing differs, no file
    same = engine_config(ExllamaAdapter(), arms.baseline, arms.baseline, tmp_path / "arm")
    assert "config" not in same and "config_files" not in same


# -- vLLM: per-batch-size n_max ---------------------------------------------------------------------------------

def test_n_max_by_streams_follows_only_separable_differences() -> None:
    # n_max 4 (named) wins at 1 stream; at 4 streams n_max 2 is 15 % faster than it; at 8 streams both lose to
    # spec-off, so speculation is switched off there
    data = (samples("off", 100, streams=[1, 4, 8])
            + samples("k4", lambda n: {1: 130, 4: 100, 8: 80}[n], streams=[1, 4, 8])
            + samples("k2", lambda n: {1: 120, 4: 115, 8: 85}[n], streams=[1, 4, 8]))
    levels = n_max_by_streams(data, {"k4": 4, "k2": 2}, "k4", "off")
    assert [(lv.streams, lv.n_max, lv.arm) for lv in levels] == [(1, 4, "k4"), (4, 2, "k2"), (8, 0, None)]
    assert batch_schedule(levels) == [[1, 3, 4], [4, 7, 2], [8, 8, 0]]
    # identical arms: noise does not make a schedule
    same = (samples("off", 100, streams=[1, 4]) + samples("k4", 120, streams=[1, 4])
            + samples("k2", 120, streams=[1, 4], seed=1))
    flat = n_max_by_streams(same, {"k4": 4, "k2": 2}, "k4", "off")
    assert [lv.n_max for lv in flat] == [4, 4] and batch_schedule(flat) is None


def test_batch_schedule_merges_equal_neighbours() -> None:
    from bakeoff.core.analysis.racing import ScheduleLevel

    levels = [ScheduleLevel(streams=s, n_max=k, arm=None, why="") for s, k in ((1, 4), (2, 4), (4, 2), (8, 2))]
    assert batch_schedule(levels) == [[1, 3, 4], [4, 8, 2]]


def _vllm_arms(tmp_path: Path) -> list[Arm]:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    config = parse_bakeoff(f"arms:\n  - {{name: spec-off, engine: vllm, model: {tmp_path / 'm'}, "
                           "options: {python: /venv/bin/python}}\n" + WORKLOAD +
                           "tune: {space: {speculative.method: [ngram], speculative.n_max: [2, 4]}}\n")
    arms = tune_arms(config)
    return [arms.baseline, *arms.candidates]


def _fake_vllm(root: Path, *, has_key: bool) -> Path:
    src = root / "lib" / "python3.11" / "site-packages" / "vllm" / "config"
    src.mkdir(parents=True)
    field = "    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = None\n" if has_key else ""
    (src / "speculative.py").write_text("class SpeculativeConfig:\n    num_speculative_tokens: int = 0\n" + field)
    (root / "bin").mkdir()
    return root / "bin" / "python"


def test_vllm_schedule_compiles_into_speculative_config_when_the_engine_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.engines.vllm.adapter import SCHEDULE_KEY, VllmAdapter

    off, k2, k4 = _vllm_arms(tmp_path)
    assert n_max_arms(k4, [off, k2, k4]) == {k4.name: 4, k2.name: 2}
    adapter = VllmAdapter()
    python = _fake_vllm(tmp_path / "new", has_key=True)
    monkeypatch.setattr(adapter.installer, "locate", lambda options: Program((str(python), "-m", "vllm.x")))
    scheduled = with_n_max_schedule(adapter, k4, [[1, 3, 4], [4, 4, 2]])
    out = engine_config(adapter, scheduled, off, tmp_path)
    assert out["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4,
                                         SCHEDULE_KEY: [[1, 3, 4], [4, 4, 2]]}
    # a schedule with a larger n_max at some level raises the startup maximum to it
    assert with_n_max_schedule(adapter, k2, [[1, 1, 2], [2, 2, 4]]).speculative.n_max == 4

    old = _fake_vllm(tmp_path / "old", has_key=False)
    monkeypatch.setattr(adapter.installer, "locate", lambda options: Program((str(old), "-m", "vllm.x")))
    with pytest.raises(CapabilityNotSupported, match=f"has no {SCHEDULE_KEY}"):
        with_n_max_schedule(adapter, k4, [[1, 3, 4], [4, 4, 2]])
    docker = k4.model_copy(update={"launch": "docker"})
    with pytest.raises(CapabilityNotSupported, match="not assumed"):
        with_n_max_schedule(adapter, docker, [[1, 3, 4], [4, 4, 2]])


def test_an_engine_without_schedules_refuses_one(tmp_path: Path) -> None:
    from bakeoff.engines.llamacpp.adapter import LlamaCppAdapter

    arm = Arm.model_validate({"name": "a", "engine": "llamacpp", "model": "m.gguf"})
    with pytest.raises(CapabilityNotSupported, match="no per-batch-size n_max schedule"):
        with_n_max_schedule(LlamaCppAdapter(), arm, [[1, 1, 4], [2, 2, 2]])


# -- nothing drafted ---------------------------------------------------------------------------------------------

def test_nothing_drafted_pairs_the_requests_that_drafted_zero_with_spec_off() -> None:
    base = samples("off", 100, streams=[1, 2])
    # the requests with drafted 0 run at 0.9x of spec-off, those that drafted at 1.3x
    spec = samples("k4", 90, streams=[1, 2], drafted=0)
    for s in spec:
        if s.rep == 1:
            s.drafted, s.decode_tps = 40, (s.decode_tps or 0) * 1.3 / 0.9
    nd = nothing_drafted(base + spec, "k4", "off")
    assert nd.reason is None and nd.requests == sum(1 for s in spec if s.drafted == 0)
    assert nd.ratio == pytest.approx(0.9, abs=0.02) and nd.ci_high is not None and nd.ci_high < 1
    # the second stream of a batch is paired with spec-off's second stream, also when the first is left out
    assert nd.requests == 4 * 1 + 4 * 2


@pytest.mark.parametrize(("drafted", "why"), [(None, "no per-request drafted count"),
                                              (12, "none ran with nothing drafted")])
def test_nothing_drafted_says_why_it_cannot_be_measured(drafted: int | None, why: str) -> None:
    data = samples("off", 100, streams=[1]) + samples("k4", 110, streams=[1], drafted=drafted)
    nd = nothing_drafted(data, "k4", "off")
    assert nd.ratio is None and nd.reason is not None and why in nd.reason


def test_the_tune_sections_show_the_schedule_and_the_nothing_drafted_cost() -> None:
    data = samples("off", 100, streams=[1]) + samples("k4", 95, streams=[1], drafted=0)
    result = TuneResult(baseline="off", winner={
        "arm": "k4", "plateau": ["k4"], "chosen_by": "alone",
        "n_max_schedule": {"levels": [{"streams": 1, "n_max": 4, "arm": "k4", "why": "x"},
                                      {"streams": 4, "n_max": 2, "arm": "k2", "why": "y"}],
                           "schedule": [[1, 3, 4], [4, 4, 2]], "compiled": False,
                           "reason": "llama-server takes no per-batch-size n_max schedule; compiled a single n_max"}},
        verify=TuneVerify(run_dir="r", arms=["off", "k4"], nothing_drafted=nothing_drafted(data, "k4", "off")))
    nd = result.verify.nothing_drafted if result.verify else None
    assert nd is not None and nd.ratio is not None and nd.ratio == pytest.approx(0.95, abs=0.03)
    text = "\n".join(tune_markdown(result))
    assert "not compiled as a schedule: llama-server takes no" in text
    assert f"that drafted 0 tokens, paired with `off`'s same requests): {nd.ratio:.2f}x" in text
    from bakeoff.core.cli.tune import tune_lines

    lines = tune_lines(result)
    assert any(line.startswith("n_max by stream count (1: 4, 4: 2): no schedule") for line in lines)
    assert f"nothing drafted: {nd.ratio:.2f}x ({nd.ci_low:.2f}-{nd.ci_high:.2f}) over 8 requests vs off" in lines


def test_tune_reports_the_nothing_drafted_cost_of_its_verified_winner(tmp_path: Path) -> None:
    # sim processes, real requests: the candidate has speculation on and reports 0 drafted tokens per request
    from bakeoff.core.run.tune import run_tune

    config = parse_bakeoff(
        "arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 20}}\n" + WORKLOAD +
        "tune: {space: {speculative.method: [ngram], options.itl_ms: [8], options.draft_per_event: [0]}, "
        "max_passes: 3, budget_s: 600, verify_streams: [1, 2], verify_passes: 3}\n")
    result = run_tune(config, tmp_path).result
    assert result.winner["arm"] != "spec-off" and result.verify is not None
    nd = result.verify.nothing_drafted
    assert nd is not None and nd.reason is None
    assert nd.requests == 3 * 2 * (1 + 2)  # every verification request of the winner drafted nothing
    assert nd.ratio is not None and nd.ci_low is not None and nd.ci_low > 1  # the sim's 8 ms vs 20 ms token gap
    assert "n_max_schedule" not in result.winner  # the sim has no n_max: nothing to schedule


@pytest.mark.parametrize("has_key", [True, False])
def test_the_schedule_is_compiled_into_the_winner_or_refused_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_key: bool) -> None:
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run.tune import WINNER_FILE, compile_schedule
    from bakeoff.engines.vllm.adapter import SCHEDULE_KEY, VllmAdapter

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    config = parse_bakeoff(f"arms:\n  - {{name: spec-off, engine: vllm, model: {tmp_path / 'm'}}}\n" + WORKLOAD +
                           "tune: {space: {speculative.method: [ngram], speculative.n_max: [2, 4]}}\n")
    arms = tune_arms(config)
    k2, k4 = (a.name for a in arms.candidates)
    python = _fake_vllm(tmp_path / "venv", has_key=has_key)
    monkeypatch.setattr(VllmAdapter.installer, "locate", lambda options: Program((str(python), "-m", "vllm.x")))
    data = (samples("spec-off", 100, streams=[1, 4]) + samples(k4, lambda n: {1: 130, 4: 100}[n], streams=[1, 4])
            + samples(k2, lambda n: {1: 120, 4: 115}[n], streams=[1, 4]))
    run = RunDir(tmp_path / "run")
    result = TuneResult(baseline="spec-off", winner={"arm": k4})
    said: list[str] = []
    compile_schedule(result, config, arms, arms.candidates[1], data, run, 0, said.append)
    record = result.winner["n_max_schedule"]
    assert [lv["n_max"] for lv in record["levels"]] == [4, 2] and record["schedule"] == [[1, 3, 4], [4, 4, 2]]
    if has_key:
        assert record["compiled"] is True
        spec = result.winner["engine_config"]["speculative_config"]
        assert spec[SCHEDULE_KEY] == [[1, 3, 4], [4, 4, 2]] and spec["num_speculative_tokens"] == 4
        recheck = yaml.safe_load((run.path / WINNER_FILE).read_text())  # the re-check file carries it too
        assert recheck["arms"][1]["options"]["speculative_extra"][SCHEDULE_KEY] == [[1, 3, 4], [4, 4, 2]]
    else:
        assert record["compiled"] is False and "engine_config" not in result.winner
        assert f"has no {SCHEDULE_KEY}" in record["reason"] and "compiled a single n_max (4)" in record["reason"]
        assert any("the results call for n_max by stream count (1 stream(s): 4, 4 stream(s): 2)" in s for s in said)
