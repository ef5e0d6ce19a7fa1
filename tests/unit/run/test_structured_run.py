"""Structured requests through the one spine (ArmRun): an engine that stops drafting under a grammar is
flagged ``speculation-disengaged`` with its counts, and a stream that pauses mid-answer is flagged ``stall``.

The sim engine stands in for both faults (engines/sim/server.py: ``drafts_under_grammar: false`` drafts
nothing on a request with response_format or tools; ``fault: stall`` pauses a chosen request). llama.cpp's own
drafters verify drafts under the grammar rather than switching off: in a run of examples/structured-cpu.yaml its
n-gram drafter proposed 52 tokens (51 accepted) on a repeated JSON answer under the schema's grammar, and
nothing on the first one only because it had no n-gram of it yet. No real engine here stops drafting because
of a grammar, so that path is shown on an engine told to; tests/integration/test_structured_llamacpp.py checks
the flag against llama.cpp's own counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.reports import write_reports
from bakeoff.core.reports.model import summarize_run
from bakeoff.core.reports.verdict import verdict_of
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import read_samples
from bakeoff.core.run.bakeoff import run_bakeoff

WORKLOAD = ("workload: {prompts: [code_python], structured: {kinds: [json_schema, tool_call]}, max_tokens: 10, "
            "reps: 1, warmup: 0, gates: []}\n")


def _arms(under_grammar: bool) -> str:
    return ("arms:\n  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 2}}\n"
            "  - {name: ngram, engine: sim, model: sim, speculative: {method: ngram}, "
            f"options: {{itl_ms: 2, drafts_under_grammar: {str(under_grammar).lower()}}}}}\n")


def _flagged(sample: Sample, kind: str) -> list[str]:
    return [f for f in sample.flags if f.split(":")[0] == kind]


def test_an_engine_that_stops_drafting_under_a_grammar_is_flagged(tmp_path: Path) -> None:
    run = run_bakeoff(parse_bakeoff(_arms(False) + WORKLOAD + "baseline: spec-off\n"), tmp_path / "runs")
    samples = {(s.arm, s.prompt): s for s in read_samples(run.path)}
    plain, order, call = (samples[("ngram", p)] for p in ("code_python", "json_order", "tool_weather"))
    assert plain.drafted and not _flagged(plain, "speculation-disengaged")  # free text drafts: 2 per token event
    for s in (order, call):
        assert s.drafted == 0
        (flag,) = _flagged(s, "speculation-disengaged")
        assert f"drafted 0 under {s.structured}" in flag and f"free text drafted {plain.drafted} in 1" in flag
    assert not any(_flagged(s, "speculation-disengaged") for (arm, _), s in samples.items() if arm == "spec-off")
    summary = summarize_run(run.path)
    assert summary.structured is not None
    arm = summary.structured.arms["ngram"]
    assert (arm.drafting_engaged, arm.drafts_free_text, arm.drafts_structured, arm.disengaged) == \
        (False, plain.drafted, 0, 2)
    files = write_reports(run.path, summary, plots=False)
    written = json.loads(files.json.read_text())["structured"]["arms"]
    assert written["ngram"]["drafting_engaged"] is False and written["ngram"]["requests"] == 2
    report = files.markdown.read_text()
    words = "disengaged: drafted on 0 of 2 structured requests (json_schema 0 of 1, tool_call 0 of 1)"
    assert written["ngram"]["drafting"] == "disengaged" and (written["ngram"]["drafted_requests"],
                                                             written["ngram"]["structured_requests"]) == (0, 2)
    assert "Structured requests" in report and f"| {words} |" in report
    (line,) = [x for x in verdict_of(summary).structured if x.startswith("ngram:")]
    assert line.startswith("ngram: 0/2 valid")
    assert f"drafting {words}; 0 draft tokens under the grammar, {plain.drafted} on free text" in line
    html = files.html.read_text()
    assert '<ul id="structured-lines">' in html and '<table id="structured">' in html and words in html


def test_an_engine_that_keeps_drafting_under_a_grammar_is_not_flagged(tmp_path: Path) -> None:
    run = run_bakeoff(parse_bakeoff(_arms(True) + WORKLOAD + "baseline: spec-off\n"), tmp_path / "runs")
    samples = read_samples(run.path)
    assert not any(_flagged(s, "speculation-disengaged") for s in samples)
    structured = [s for s in samples if s.arm == "ngram" and s.structured]
    assert len(structured) == 2 and all(s.drafted for s in structured)
    summary = summarize_run(run.path)
    assert summary.structured is not None
    arm = summary.structured.arms["ngram"]
    assert (arm.drafting, arm.drafted_requests, arm.structured_requests, arm.drafting_engaged) == \
        ("engaged", 2, 2, True)


def test_a_stream_that_pauses_mid_answer_is_flagged_stall(tmp_path: Path) -> None:
    """Request 2 (the JSON-schema prompt; no warm-up) stops for 1.5 s after 4 tokens, then carries on."""
    text = ("arms: [{name: s, engine: sim, model: sim, options: {itl_ms: 5, fault: stall, stall_s: 1.5, "
            "fault_after_tokens: 4, fault_on_requests: [2]}}]\n"
            "workload: {prompts: [code_python], structured: {kinds: [json_schema], stall_s: 1.0}, max_tokens: 10, "
            "reps: 1, warmup: 0, gates: []}\n")
    run = run_bakeoff(parse_bakeoff(text), tmp_path / "runs")
    samples = {s.prompt: s for s in read_samples(run.path)}
    stalled = samples["json_order"]
    assert stalled.status == "ok" and stalled.max_gap_s is not None and stalled.max_gap_s >= 1.4
    (flag,) = _flagged(stalled, "stall")
    assert flag.startswith(f"stall: {stalled.max_gap_s:.2f} s without a token mid-answer")
    assert stalled.valid is False and stalled.invalid_reason  # the sim streams words, not JSON
    summary = summarize_run(run.path)
    assert summary.structured is not None and summary.structured.arms["s"].stalls == 1


def test_an_answer_judged_against_a_pattern_leaves_no_judging_process_behind(
        tmp_path: Path, live_test_processes: Callable[[], dict[int, str]]) -> None:
    suite = ("workload: {suite: [{name: p, messages: [{role: user, content: x}], response_format: {type: json_schema, "
             "json_schema: {name: p, schema: {type: string, pattern: '^(a+)+$'}}}}], max_tokens: 10, reps: 1, "
             "warmup: 0, gates: []}\n")
    run = run_bakeoff(parse_bakeoff("arms: [{name: a, engine: sim, model: sim, options: {itl_ms: 2}}]\n" + suite),
                      tmp_path / "runs")
    (sample,) = read_samples(run.path)
    assert sample.valid is False and "not JSON" in str(sample.invalid_reason)  # the sim answers prose: judged
    assert not [cmd for cmd in live_test_processes().values() if "measure.judge" in cmd]  # ended with the session
