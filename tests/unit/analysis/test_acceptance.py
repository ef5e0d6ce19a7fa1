"""Acceptance in one shape (core/analysis/acceptance.py), from real captures of each engine.

llama.cpp and vLLM captures are real (tests/fixtures/llamacpp/matched-draft-simple, tests/fixtures/vllm,
the shared engine captures copied into tests/fixtures); TabbyAPI's are real H200 logs; SGLang's are hand-written
from its documented shape (tests/fixtures/sglang/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from bakeoff.core import EngineLog
from bakeoff.core.analysis.acceptance import acceptance_detail, arm_acceptance, histogram_from_positions, run_acceptance
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.engine.metrics import parse_metrics
from bakeoff.core.engine.readback import position_deltas
from bakeoff.core.results.sample import Sample
from bakeoff.engines.exllama.adapter import ExllamaAdapter
from bakeoff.engines.llamacpp.adapter import M_PER_POS, LlamaCppAdapter
from bakeoff.engines.vllm.adapter import VllmAdapter

FIX = Path(__file__).resolve().parents[2] / "fixtures"
MATCHED = FIX / "llamacpp" / "matched-draft-simple"


def _serve(routes: dict[str, str]) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        return httpx.Response(200, text=body) if body is not None else httpx.Response(404)
    return httpx.Client(transport=httpx.MockTransport(handle), base_url="http://engine")


def _last_payload(sse: Path, key: str) -> dict[str, Any]:
    payloads = [json.loads(line[6:]) for line in sse.read_text().splitlines() if line.startswith("data: {")]
    return dict([p for p in payloads if key in p][-1])


def _detail(stats: Any) -> Any:
    return acceptance_detail(stats.drafted, stats.accepted, stats.drafts, stats.accepted_per_position,
                             stats.accepted_histogram, stats.unavailable, stats.derived)


# -- llama.cpp: /metrics per-position counters -------------------------------------------------------
def test_llamacpp_request_positions_and_histogram_from_metrics() -> None:
    """One real draft-simple request (n_max 3): 34/38 accepted in 13 steps; the counters say 13, 11, 10."""
    adapter = LlamaCppAdapter()
    before = {"metrics": parse_metrics((MATCHED / "metrics_before.txt").read_text())}
    with _serve({"/metrics": (MATCHED / "metrics_after.txt").read_text()}) as http:
        stats = adapter.reader.server_stats(http, _last_payload(MATCHED / "chat_stream.sse", "timings"), before,
                                     EngineLog((MATCHED / "engine_request.log").read_text()))
    assert stats.flags == []
    assert stats.accepted_per_position == [13, 11, 10]  # absent before the first drafting request: delta from 0
    d = _detail(stats)
    assert d.flags == [] and d.acceptance_unavailable == {}
    assert (d.drafted, d.accepted, d.drafts) == (38, 34, 13)
    assert d.accepted_histogram == [0, 2, 1, 10]  # 13 steps: 2 accepted one draft, 1 two, 10 all three
    assert d.acceptance_per_position == pytest.approx([1.0, 11 / 13, 10 / 13])
    assert d.mean_accepted_len == pytest.approx(3.62, abs=0.005)  # the log's "mean len = 3.62"
    assert d.acceptance_derived["accepted_histogram"].startswith("exact:")


def test_llamacpp_cumulative_capture_gives_the_same_identity() -> None:
    """The shared capture after 646 draft steps (draft-simple, n_max 3): counters 638, 638, 631."""
    after = parse_metrics((FIX / "llamacpp" / "metrics_spec_draft_simple.txt").read_text())
    idle = {k: 0.0 for k in after}
    per_pos = position_deltas(idle, after, M_PER_POS, [])
    assert per_pos == [638, 638, 631] and sum(per_pos) == 1907
    assert histogram_from_positions(per_pos, 646) == [8, 0, 7, 631]


def test_llamacpp_concurrent_streams_say_why_steps_and_positions_are_missing() -> None:
    with _serve({}) as http:
        final = _last_payload(MATCHED / "chat_stream.sse", "timings")
        stats = LlamaCppAdapter().reader.server_stats(http, final, None, EngineLog(""))
    d = _detail(stats)
    assert (d.drafted, d.accepted, d.drafts, d.accepted_histogram) == (38, 34, None, None)
    assert "concurrent streams share /metrics" in d.acceptance_unavailable["drafts"]
    assert "concurrent streams share /metrics" in d.acceptance_unavailable["accepted_per_position"]
    assert d.acceptance_unavailable["mean_accepted_len"] == "needs the draft step count"
    assert d.acceptance == pytest.approx(34 / 38)


# -- vLLM: /metrics per-position counters and the per-request histogram -------------------------------
def test_vllm_counters_and_engine_histogram_agree() -> None:
    """ngram k=4: /metrics per position 45/31/29/26 over 49 steps; the response's histogram [4,14,2,3,26]."""
    vllm = FIX / "vllm"
    before = parse_metrics((vllm / "metrics_ngram_before_request.txt").read_text())
    final = _last_payload(vllm / "chat_stream_ngram_per_request_metrics.sse", "metrics")
    with _serve({"/metrics": (vllm / "metrics_ngram_after_request.txt").read_text()}) as http:
        stats = VllmAdapter().reader.server_stats(http, final, before, EngineLog(""))
    assert stats.accepted_per_position == [45, 31, 29, 26] and stats.accepted_histogram == [4, 14, 2, 3, 26]
    d = _detail(stats)
    assert d.flags == [] and d.acceptance_unavailable == {}
    assert d.accepted_histogram == histogram_from_positions([45, 31, 29, 26], 49) == [4, 14, 2, 3, 26]
    assert d.mean_accepted_len == pytest.approx(final["metrics"]["speculative_decoding"]["mean_acceptance_length"])
    assert d.acceptance_per_position == pytest.approx([45 / 49, 31 / 49, 29 / 49, 26 / 49])


def test_vllm_without_metrics_positions_follow_from_the_engine_histogram() -> None:
    final = _last_payload(FIX / "vllm" / "chat_stream_ngram_per_request_metrics.sse", "metrics")
    with _serve({}) as http:
        stats = VllmAdapter().reader.server_stats(http, final, None, EngineLog(""))
    d = _detail(stats)
    assert d.accepted_per_position == [45, 31, 29, 26]
    assert d.acceptance_derived["accepted_per_position"].startswith("exact: from the engine's histogram")
    assert d.flags == []


def test_an_engine_histogram_that_disagrees_is_flagged() -> None:
    d = acceptance_detail(196, 131, 49, [45, 31, 29, 26], [4, 14, 3, 2, 26])
    assert any(f.startswith("acceptance-histogram-mismatch: engine [4, 14, 3, 2, 26]") for f in d.flags)
    assert any("accepts 130 tokens, accepted 131" in f for f in d.flags)
    assert d.accepted_histogram == [4, 14, 3, 2, 26]  # the engine's own, flagged, never replaced


def test_counts_that_cannot_come_from_prefix_acceptance_give_no_histogram() -> None:
    d = acceptance_detail(12, 7, 4, [2, 5], None)
    assert d.accepted_histogram is None
    assert any(f.startswith("acceptance-positions-not-prefix") for f in d.flags)
    assert d.acceptance_unavailable["accepted_histogram"].startswith("needs per-position counts")


# -- TabbyAPI: totals only ---------------------------------------------------------------------------
def test_tabbyapi_gives_totals_and_says_what_it_lacks() -> None:
    sse = (FIX / "exllama" / "fp16-ngram" / "chat_stream_min_tokens.sse").read_text()

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse.encode(), headers={"content-type": "text/event-stream"})

    with httpx.Client(transport=httpx.MockTransport(handle), base_url="http://tabby") as http:
        final = stream_chat(http, {"stream": True}, 30).final
        stats = ExllamaAdapter().reader.server_stats(http, final, None,
                                              EngineLog((FIX / "exllama" / "fp16-ngram" / "engine.log").read_text()))
    d = _detail(stats)
    assert (d.drafted, d.accepted) == (34, 19) and d.acceptance == pytest.approx(19 / 34)
    assert d.drafts is None and d.mean_accepted_len is None and d.accepted_histogram is None
    assert set(d.acceptance_unavailable) == {"drafts", "mean_accepted_len", "accepted_per_position",
                                             "acceptance_per_position", "accepted_histogram"}
    assert all("TabbyAPI logs only" in why for why in d.acceptance_unavailable.values())


# -- per arm ----------------------------------------------------------------------------------------
def _sample(arm: str, **fields: Any) -> Sample:
    return Sample(arm=arm, engine="llamacpp", prompt="p", mode="greedy", rep=0, **fields)


def test_arm_pools_sums_and_keeps_reasons_with_their_counts() -> None:
    a = acceptance_detail(38, 34, 13, [13, 11, 10], None)
    b = acceptance_detail(20, 10, 8, [6, 3, 1], None)
    c = acceptance_detail(30, 15, None, None, None, {"drafts": "concurrent"})
    samples = [_sample("draft", **x.model_dump(exclude={"flags"})) for x in (a, b, c)]
    samples += [_sample("off"), _sample("draft", status="error", drafted=99, accepted=0)]
    arm = arm_acceptance("draft", samples)
    assert arm is not None and arm.requests == 3
    assert (arm.drafted, arm.accepted, arm.drafts) == (88, 59, 21)
    assert arm.mean_accepted_len == pytest.approx(1 + 44 / 21)  # only requests that report steps
    assert arm.accepted_per_position == [19, 14, 11] and arm.requests_with_positions == 2
    assert arm.acceptance_per_position == pytest.approx([19 / 21, 14 / 21, 11 / 21])
    assert arm.accepted_histogram == [2, 5, 3, 11] and arm.histogram_shares is not None
    assert arm.unavailable["drafts"] == "concurrent (1/3 requests)"
    assert [x.arm for x in run_acceptance(samples, ["off", "draft"])] == ["draft"]
    assert arm_acceptance("off", samples) is None


def test_nothing_drafted_is_a_fact_not_a_gap() -> None:
    d = acceptance_detail(0, 0, None, None, None)
    assert d.acceptance_unavailable == {} and d.acceptance is None and d.accepted_histogram is None


# -- reports from a real run -----------------------------------------------------------------------
def test_real_run_summary_table_and_plots(tmp_path: Path) -> None:
    import shutil

    from bakeoff.core.reports import render_markdown, summarize_run
    from bakeoff.core.reports.plots import render_plots

    run = tmp_path / "acceptance-run"
    shutil.copytree(FIX / "reports" / "acceptance-run", run)
    s = summarize_run(run)
    pooled = {a.arm: a for a in s.acceptance}
    assert list(pooled) == ["draft", "ngram"]  # spec-off drafts nothing and has no row
    draft, ngram = pooled["draft"], pooled["ngram"]
    assert (draft.accepted, draft.drafted, draft.drafts) == (94, 94, 32)
    assert draft.accepted_histogram == [0, 0, 2, 30] and draft.accepted_per_position == [32, 32, 30]
    assert ngram.accepted_histogram == [2, 3, 2, 1, 4] and ngram.accepted_per_position == [10, 7, 5, 4]
    assert ngram.mean_accepted_len == pytest.approx(1 + 26 / 12) and draft.unavailable == {}
    md = render_markdown(s)
    assert "| ngram | 2 | 54.2% (26/48) | 12 | 3.17 | 0.83 0.58 0.42 0.33 | 0:2 1:3 2:2 3:1 4:4 | timings |" in md
    assert "draft, ngram: accepted_histogram exact:" in md
    plots = render_plots(s)
    names = ("acceptance_histogram", "acceptance_per_position")
    assert all(plots[name]["png"].startswith(b"\x89PNG") for name in names)
