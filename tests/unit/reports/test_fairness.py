"""The equal-work guard, finish reasons, quality-gate scoring and spec correctness, from stored runs."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from bakeoff.core.analysis.fairness import OUTPUTS_FILE, finish_flags, output_line
from bakeoff.core.analysis.gates import score_gates
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.fingerprint import ArmFingerprint
from bakeoff.core.config.schema import Arm
from bakeoff.core.measure.gates import check_schema, run_gates
from bakeoff.core.reports import print_summary, render_html, render_markdown, summarize_run
from bakeoff.core.results.record import ArmAttempt, RunRecord
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir


def _write(path: Path, arms: dict[str, dict[str, Any]], samples: list[Sample],
           records: dict[str, dict[str, Any]] | None = None, outputs: dict[str, list[tuple[Sample, str]]] | None = None
           ) -> Path:
    run = RunDir(path)
    run.write_record(RunRecord.model_validate({
        "config": {"name": "t", "arms": [{"name": n, **cfg} for n, cfg in arms.items()],
                              "workload": {"max_tokens": 16, "modes": ["greedy"], "reps": 2}},
                   "baseline": next(iter(arms)), "orders": [list(arms)], "seed": 0,
                   "prompts": [{"name": "p", "kind": "x", "messages": []}]}))
    for s in samples:
        run.append(s)
    for arm, rec in (records or {}).items():
        run.append_attempt(arm, ArmAttempt.model_validate({"status": "ok", "pass": 0, **rec}))
    for arm, pairs in (outputs or {}).items():
        (run.arm_dir(arm) / OUTPUTS_FILE).write_text("".join(output_line(s, text) for s, text in pairs))
    return path


def _sample(arm: str, rep: int, tps: float, prompt_tokens: int = 30, **kw: Any) -> Sample:
    fields: dict[str, Any] = dict(arm=arm, engine="llamacpp", prompt="p", mode="greedy", rep=rep,
                                  decode_tps=tps, completion_tokens=16, prompt_tokens=prompt_tokens, n_first=1,
                                  decode_s=15 / tps, ttft_s=0.1, usage_present=True, finish_reason="length",
                                  output_chars=40)
    fields.update(kw)
    return Sample(**fields)


ARMS = {"off": {"engine": "llamacpp", "model": "m", "speculative": {"method": "none"}},
        "ngram": {"engine": "llamacpp", "model": "m", "speculative": {"method": "ngram"}},
        "tmpl": {"engine": "llamacpp", "model": "m", "speculative": {"method": "none"}}}


def test_finish_flags_expect_length_under_fixed_length_and_stop_otherwise() -> None:
    s = _sample("a", 0, 10.0, finish_reason="stop")
    assert finish_flags(s, True) == ["finish-reason: stop (expected length)"]
    assert finish_flags(s, False) == []
    assert finish_flags(_sample("a", 0, 10.0, finish_reason=None, output_chars=0), True) == [
        "truncated-stream: no finish_reason", "empty-output"]


def test_a_different_template_is_not_comparable_and_every_format_says_so(tmp_path: Path) -> None:
    samples = [_sample(a, r, 10.0 + 5 * (a != "off"), prompt_tokens=34 if a == "tmpl" else 30, drafted=8,
                       accepted=4) for a in ARMS for r in range(2)]
    s = summarize_run(_write(tmp_path / "run", ARMS, samples))
    tmpl = s.comparison("tmpl")
    assert tmpl and tmpl.comparable and not tmpl.comparable["ok"]
    assert tmpl.comparable["reasons"] == ["prompt tokens 34 vs 30 (p/greedy)"]
    ngram = s.comparison("ngram")
    assert ngram and ngram.comparable and ngram.comparable["ok"]
    assert "not comparable: prompt tokens 34 vs 30 (p/greedy)" in render_markdown(s)
    assert "not comparable: prompt tokens 34 vs 30" in render_html(s, {})
    console = Console(file=io.StringIO(), width=400)
    print_summary(s, console)
    assert "not comparable: prompt tokens 34 vs 30" in console.file.getvalue()  # type: ignore[attr-defined]
    data = json.loads(s.model_dump_json())
    assert data["comparisons"][1]["comparable"]["ok"] is False


def test_cache_hits_idle_speculation_and_short_outputs_make_a_pair_not_comparable(tmp_path: Path) -> None:
    samples = [_sample("off", r, 10.0) for r in range(2)]
    samples += [_sample("ngram", r, 12.0, drafted=0, accepted=0, cached_tokens=20, completion_tokens=12)
                for r in range(2)]
    s = summarize_run(_write(tmp_path / "run", {k: ARMS[k] for k in ("off", "ngram")}, samples,
                             records={"off": {"effective": {"n_ctx_per_slot": 4096}},
                                      "ngram": {"effective": {"n_ctx_per_slot": 2048}}}))
    c = s.comparison("ngram")
    assert c and c.comparable
    reasons = c.comparable["reasons"]
    assert "completion tokens 12 vs 16 (p/greedy)" in reasons
    assert "ngram: fixed length not honoured (completion tokens [12])" in reasons
    assert "context 2048 vs 4096" in reasons
    assert "ngram: prefix cache served 40 prompt tokens in 2 request(s)" in reasons
    assert "ngram: speculation asked but nothing drafted" in reasons


def test_thinking_seen_on_one_arm_only_is_not_comparable(tmp_path: Path) -> None:
    samples = [_sample(a, r, 10.0) for a in ("off", "tmpl") for r in range(2)]
    outputs = {"off": [(samples[0], "plain answer")], "tmpl": [(samples[2], "<think>hmm</think> answer")]}
    s = summarize_run(_write(tmp_path / "run", {k: ARMS[k] for k in ("off", "tmpl")}, samples, outputs=outputs))
    c = s.comparison("tmpl")
    assert c and c.comparable and c.comparable["reasons"] == ["thinking seen in 1 vs 0 greedy output(s)"]


def test_spec_arm_divergence_is_shown_with_position_and_both_continuations(tmp_path: Path) -> None:
    samples = [_sample(a, r, 10.0, drafted=5, accepted=2) for a in ("off", "ngram") for r in range(2)]
    outputs = {"off": [(samples[0], "one two three"), (samples[1], "same text")],
               "ngram": [(samples[2], "one two tree"), (samples[3], "same text")]}
    s = summarize_run(_write(tmp_path / "run", {k: ARMS[k] for k in ("off", "ngram")}, samples, outputs=outputs))
    a = s.arm("ngram")
    assert a and a.identical_to_baseline == 0.5
    assert a.spec_check and a.spec_check["divergences"][0]["position"] == 9
    assert a.spec_check["divergences"][0]["reference"] == "hree" and a.spec_check["divergences"][0]["arm"] == "ree"
    assert any("first divergence p/greedy rep 0 pass 0 at character 9" in w for w in s.warnings)


def _gates(passed: bool | None, answer: str) -> ArmAttempt:
    return ArmAttempt.model_validate({"gates": {"arithmetic": {"passed": passed, "detail": "x", "answer": answer}}})


def test_gate_scoring_compares_with_the_spec_off_arm_when_it_fails_too() -> None:
    cfg = {**ARMS, "other": {"engine": "vllm", "model": "m2", "speculative": {"method": "none"}}}
    arms = {name: Arm.model_validate({"name": name, **c}) for name, c in cfg.items()}
    records = {"off": [_gates(False, "12")], "ngram": [_gates(False, "12")], "tmpl": [_gates(False, "99")],
               "other": [_gates(None, "")]}
    scored = score_gates(records, arms, "off")
    assert scored["off"]["arithmetic"].status == "not-informative"  # the baseline fails it: SmolLM2 cannot multiply
    assert scored["ngram"]["arithmetic"].status == "same-as-baseline"
    assert scored["tmpl"]["arithmetic"].status == "regressed"
    assert scored["other"]["arithmetic"].status == "skipped"
    records["off"] = [_gates(True, "391")]
    assert score_gates(records, arms, "off")["ngram"]["arithmetic"].status == "fail"


def test_a_gate_the_baseline_fails_is_not_informative_on_it_and_same_as_baseline_on_the_others(
        tmp_path: Path) -> None:
    """SmolLM2 cannot multiply: the demo's baseline must not read GATE FAILED (issue 32, USER-2 finding 3)."""
    samples = [_sample(a, r, 10.0 if a == "off" else 12.0, drafted=5, accepted=4) for a in ("off", "ngram")
               for r in range(2)]
    wrong = {"arithmetic": {"passed": False, "detail": "answered 12, expected 391", "answer": "12"}}
    records = {"off": {"gates": wrong}, "ngram": {"gates": wrong}}
    s = summarize_run(_write(tmp_path / "run", {k: ARMS[k] for k in ("off", "ngram")}, samples, records=records))
    base, spec = s.arm("off"), s.arm("ngram")
    assert base and spec and base.failed_gates == [] and spec.failed_gates == []
    assert base.gates["arithmetic"]["status"] == "not-informative"
    assert spec.gates["arithmetic"]["status"] == "same-as-baseline"
    md = render_markdown(s)
    assert "GATE FAILED" not in md and "GATE FAILED" not in render_html(s, {})
    assert "| off | arithmetic: not informative for this model |" in md
    assert "| ngram | arithmetic: same-as-baseline |" in md
    assert not any("gate arithmetic" in w for w in s.warnings)


def test_an_arm_failing_a_gate_is_never_reported_faster(tmp_path: Path) -> None:
    samples = [_sample(a, r, 10.0 if a == "off" else 30.0, drafted=5, accepted=4) for a in ("off", "ngram")
               for r in range(2)]
    records = {"off": {"gates": {"tool_call": {"passed": True, "detail": "ok", "answer": "{}"}}},
               "ngram": {"gates": {"tool_call": {"passed": False, "detail": "arguments are not JSON", "answer": ""}}}}
    s = summarize_run(_write(tmp_path / "run", {k: ARMS[k] for k in ("off", "ngram")}, samples, records=records))
    a = s.arm("ngram")
    assert a and a.gates["tool_call"]["status"] == "fail" and a.failed_gates == ["tool_call"]
    md = render_markdown(s)
    row = next(line for line in md.splitlines() if line.startswith("| ngram") and "GATE FAILED" in line)
    assert "GATE FAILED (tool_call)" in row and not row.rstrip(" |").endswith("faster")
    assert "tool_call: fail" in md and "tool_call: fail" in render_html(s, {})


def test_tool_arguments_are_checked_against_the_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
              "required": ["city"], "additionalProperties": False}
    assert check_schema({"city": "Paris"}, schema) is None
    assert check_schema({}, schema) == "arguments lacks required ['city']"
    assert check_schema({"city": "Paris", "unit": "kelvin"}, schema) == \
        "arguments.unit is 'kelvin', not one of ['celsius', 'fahrenheit']"
    assert check_schema({"city": 3}, schema) == "arguments.city is int, schema wants string"


def test_a_refused_probe_is_skipped_with_the_servers_own_reason() -> None:
    # vLLM 0.32's answer to tools with tool_choice auto when no tool parser is configured
    refusal = {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                                    "to be set", "type": "BadRequestError", "param": None, "code": 400}}

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=refusal)

    with httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(serve)) as http:
        out = run_gates(http, ["tool_call"], "m", {}, {}, 0, 5.0)
    assert out["tool_call"]["passed"] is None
    assert out["tool_call"]["detail"].startswith("could not run: Client error '400 Bad Request'")
    assert out["tool_call"]["detail"].endswith("requires --enable-auto-tool-choice and --tool-call-parser to be set")


def test_outputs_a_few_tokens_short_are_compared_with_a_note(tmp_path: Path) -> None:
    """TabbyAPI streams 255 (or, drafting, 251) of 256 fixed-length tokens: within 2 % the decode rates cover
    the same depths, so the pair gets its verdict with a note; 12 of 16 above is still refused."""
    samples = [_sample("off", r, 10.0, completion_tokens=256, max_tokens=256) for r in range(6)]
    samples += [_sample("ngram", r, 12.0, completion_tokens=251, max_tokens=256) for r in range(6)]  # 6 pairs
    s = summarize_run(_write(tmp_path / "run", {k: ARMS[k] for k in ("off", "ngram")}, samples))
    c = s.comparison("ngram")
    assert c and c.comparable and c.comparable["ok"] is True and c.verdict == "faster"
    assert "near-equal work: completion tokens 251 vs 256 (p/greedy)" in c.notes
    assert any("fixed length not honoured (completion tokens [251]), within 2%" in n for n in c.notes)


def test_a_report_can_compare_every_arm_with_another_baseline(tmp_path: Path) -> None:
    """A cross-engine run records one baseline; --baseline reads the same run against another arm."""
    samples = [_sample("off", r, 10.0) for r in range(6)] + [_sample("ngram", r, 12.0) for r in range(6)]
    path = _write(tmp_path / "run", {k: ARMS[k] for k in ("off", "ngram")}, samples)  # 6 pairs: a verdict
    s = summarize_run(path, baseline="ngram")
    assert s.baseline == "ngram" and [(c.arm, c.reference) for c in s.comparisons] == [("off", "ngram")]
    assert s.comparisons[0].verdict == "slower"
    with pytest.raises(ConfigError, match=r"--baseline 'nope': no such arm .*arms: off, ngram"):
        summarize_run(path, baseline="nope")


def test_session_turns_reuse_their_prefix_without_making_a_pair_incomparable(tmp_path: Path) -> None:
    samples = [_sample(arm, r, 10.0 + (arm == "ngram"), cached_tokens=20, session="s0", turn=1, drafted=5,
                       accepted=4) for arm in ("off", "ngram") for r in range(2)]
    s = summarize_run(_write(tmp_path / "run", {k: ARMS[k] for k in ("off", "ngram")}, samples))
    c = s.comparison("ngram")
    assert c and c.comparable and not any("prefix cache" in r for r in c.comparable["reasons"])


def test_the_same_weights_on_another_engine_answering_otherwise_from_the_start_is_not_comparable(
        tmp_path: Path) -> None:
    # issue 33 item 4: ik_llama.cpp, on llama.cpp's GGUF, wrote "You are a 21-year-old…" where llama.cpp wrote
    # "The small harbour town…" with equal prompt token counts, and read 1.78x faster
    arms = {"llama": {"engine": "llamacpp", "model": "m"}, "fork": {"engine": "ikllama", "model": "m"},
            "fork-late": {"engine": "ikllama", "model": "m"}, "other": {"engine": "vllm", "model": "m-hf"}}
    weights = {"name": "m.gguf", "bytes": 1000, "head_sha256": "ab"}
    path = _write(tmp_path / "run", arms, [_sample(a, r, 10.0 + 8 * (a != "llama")) for a in arms for r in range(2)],
                  outputs={a: [(_sample(a, r, 1.0), text) for r in range(2)] for a, text in {
                      "llama": "The small harbour town of Ravenshire wakes",
                      "fork": "You are a 21-year-old female college student",
                      "fork-late": "The small harbour town of Ravenshire sleeps",  # parts at character 34
                      "other": "A harbour town changes slowly because"}.items()})
    run = RunDir(path)
    record = run.read_record()
    run.write_record(record.model_copy(update={"fingerprints": {
        name: ArmFingerprint(id=name, canonical={"engine": cfg["engine"],
                                                 "model": weights if cfg["engine"] != "vllm" else {"name": "m-hf"}})
        for name, cfg in arms.items()}}))
    s = summarize_run(path)
    fork, late, other = s.comparison("fork"), s.comparison("fork-late"), s.comparison("other")
    assert fork and fork.comparable and not fork.comparable["ok"]
    [why] = fork.comparable["reasons"]
    console = Console(file=io.StringIO(), width=400)
    print_summary(s, console)
    for text in (render_markdown(s), console.file.getvalue()):  # type: ignore[attr-defined]
        assert "fork vs llama: not comparable: same weights, but the greedy answers part" in text
        assert not any(line.lstrip("|│ ").startswith("fork ") and "faster" in line for line in text.splitlines())
    assert why.startswith("same weights, but the greedy answers part within 16 characters on 2 of 2 prompts")
    assert "fork 'You are a 21-year-old female college stu'" in why
    assert late and late.comparable and late.comparable["ok"]  # numerics may part them later: still the same task
    assert other and other.comparable and other.comparable["ok"]  # other weights: agreement is reported, not judged


def test_a_pair_label_says_what_differs_engine_model_or_nothing(tmp_path: Path) -> None:
    # issue 40 item 7: a one-engine run whose arms load different models labelled its pair "other engine"
    arms: dict[str, dict[str, Any]] = {
        "off": {"engine": "llamacpp", "model": "m"}, "big": {"engine": "llamacpp", "model": "m-8b"},
        "fork": {"engine": "ikllama", "model": "m"},
        "ngram": {"engine": "llamacpp", "model": "m", "speculative": {"method": "ngram"}}}
    samples = [_sample(a, r, 10.0) for a in arms for r in range(2)]
    s = summarize_run(_write(tmp_path / "run", arms, samples,
                             outputs={a: [(samples[2 * i], "same answer")] for i, a in enumerate(arms)}))
    checks = {a.arm: a.spec_check for a in s.arms if a.spec_check}
    assert checks["big"] and checks["big"]["other"] == "model" and not checks["big"]["same_engine"]
    assert checks["fork"] and checks["fork"]["other"] == "engine"
    assert checks["ngram"] and checks["ngram"]["same_engine"] and checks["ngram"]["other"] is None
    console = Console(file=io.StringIO(), width=400)
    print_summary(s, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "1/1 vs off (agreement, other model)" in text and "1/1 vs off (agreement, other engine)" in text
    assert text.count("(agreement, other") == 2
