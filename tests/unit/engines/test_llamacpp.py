"""llama.cpp adapter: launch specs, preflight, failure classification and server stats, from real captures."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sse_fakes import split_events

from bakeoff.core import EngineLog, build_launch
from bakeoff.core.common.errors import CapabilityNotSupported, PreflightError
from bakeoff.core.config.schema import Arm, Workload
from bakeoff.core.engine.checks import check_arm_capabilities, read_effective
from bakeoff.core.engine.metrics import parse_metrics
from bakeoff.engines.llamacpp import LlamaCppAdapter

FIX = Path(__file__).parent.parent.parent / "fixtures" / "llamacpp"
adapter = LlamaCppAdapter()


def tiny_gguf(path: Path, arch: str = "llama", nextn: int | None = None) -> Path:
    """A header-only GGUF (one tiny tensor) with the keys preflight reads."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    if nextn is not None:
        w.add_uint32(f"{arch}.nextn_predict_layers", nextn)
    w.add_tensor("token_embd.weight", np.zeros((2, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def arm(tmp_path: Path, **kw: object) -> Arm:
    model = tiny_gguf(tmp_path / "m.gguf")
    data: dict[str, object] = {"name": "a", "engine": "llamacpp", "model": str(model),
                               "options": {"binary": "/opt/llama-server"}}
    data.update(kw)
    return Arm.model_validate(data)


def argv(a: Arm) -> list[str]:
    return build_launch(adapter, a, 8080, Path("/tmp")).argv


def test_plain_arm_pins_one_slot_loopback_and_explicit_spec_type(tmp_path: Path) -> None:
    args = argv(arm(tmp_path, settings={"ctx": 4096, "threads": 2, "kv_type": "q8_0", "flash_attn": "on"}))
    assert args[0] == "/opt/llama-server"
    joined = " ".join(args)
    assert "--host 127.0.0.1 --port 8080" in joined
    assert "-np 1" in joined  # auto -np would give 4 unified slots
    assert "--spec-type none" in joined
    assert "-c 4096" in joined and "-t 2" in joined and "-ctk q8_0 -ctv q8_0" in joined and "-fa on" in joined
    assert "--metrics" in args


def test_ctx_is_per_request_so_several_slots_get_ctx_each(tmp_path: Path) -> None:
    # llama-server splits -c over -np slots (kv_unified off with an explicit -np): seen on the H200, ctx 32768
    # with 16 slots read back as n_ctx 2048 per slot
    args = argv(arm(tmp_path, settings={"ctx": 2048, "parallel": 16}))
    assert args[args.index("-np") + 1] == "16" and args[args.index("-c") + 1] == str(2048 * 16)


@pytest.mark.parametrize(("method", "spec_type"), [("draft", "draft-simple"), ("dflash", "draft-dflash"),
                                                   ("dspark", "draft-dspark"), ("eagle3", "draft-eagle3")])
def test_draft_methods_emit_spec_type_and_md(tmp_path: Path, method: str, spec_type: str) -> None:
    draft = tiny_gguf(tmp_path / "d.gguf")
    args = argv(arm(tmp_path, speculative={"method": method, "draft_model": str(draft), "n_max": 4,
                                           "n_min": 1, "p_min": 0.5}))
    i = args.index("--spec-type")
    assert args[i + 1] == spec_type
    assert args[args.index("-md") + 1] == str(draft)
    assert args[args.index("--spec-draft-n-max") + 1] == "4"
    assert args[args.index("--spec-draft-n-min") + 1] == "1"
    assert args[args.index("--spec-draft-p-min") + 1] == "0.5"


def test_mtp_without_draft_file_and_ngram_variants(tmp_path: Path) -> None:
    args = argv(arm(tmp_path, speculative={"method": "mtp", "n_max": 2}))
    assert "draft-mtp" in args and "-md" not in args
    mod = argv(arm(tmp_path, speculative={"method": "ngram", "n_max": 16, "lookup_min": 12}))
    assert mod[mod.index("--spec-type") + 1] == "ngram-mod"
    assert mod[mod.index("--spec-ngram-mod-n-max") + 1] == "16"
    assert mod[mod.index("--spec-ngram-mod-n-match") + 1] == "12"
    simple = argv(arm(tmp_path, speculative={"method": "ngram", "variant": "simple", "n_max": 8}))
    assert simple[simple.index("--spec-type") + 1] == "ngram-simple"
    assert simple[simple.index("--spec-ngram-simple-size-m") + 1] == "8"


def test_extra_args_are_appended_verbatim(tmp_path: Path) -> None:
    assert argv(arm(tmp_path, extra_args=["--spec-draft-sampling", "greedy"]))[-2:] == ["--spec-draft-sampling",
                                                                                          "greedy"]


def test_draft_type_without_draft_and_stray_draft_are_refused_before_launch(tmp_path: Path) -> None:
    with pytest.raises(CapabilityNotSupported, match=r"llamacpp method 'dflash' needs speculative\.draft_model"):
        check_arm_capabilities(adapter, arm(tmp_path, speculative={"method": "dflash"}))
    draft = tiny_gguf(tmp_path / "d.gguf")
    with pytest.raises(CapabilityNotSupported, match="draft_model has no effect on llamacpp method 'none'"):
        check_arm_capabilities(adapter, arm(tmp_path, speculative={"method": "none", "draft_model": str(draft)}))


def test_preflight_mtp_needs_nextn_layers(tmp_path: Path) -> None:
    with pytest.raises(PreflightError, match=r"llama.nextn_predict_layers = 0"):
        adapter.preflight(arm(tmp_path, speculative={"method": "mtp"}))
    mtp = tiny_gguf(tmp_path / "mtp.gguf", arch="glm4moe", nextn=1)
    adapter.preflight(arm(tmp_path, model=str(mtp), speculative={"method": "mtp"}))


def test_preflight_dflash_needs_dflash_architecture(tmp_path: Path) -> None:
    plain = tiny_gguf(tmp_path / "plain.gguf")
    with pytest.raises(PreflightError, match="is a 'plain' model"):
        adapter.preflight(arm(tmp_path, speculative={"method": "dflash", "draft_model": str(plain)}))


def test_p_min_refused_centrally_for_an_engine_without_it(tmp_path: Path) -> None:
    from bakeoff.engines.openai import OpenAICompatAdapter

    a = Arm.model_validate({"name": "x", "engine": "openai", "url": "http://h", "speculative": {"method": "none",
                                                                                               "p_min": 0.2}})
    with pytest.raises(CapabilityNotSupported, match=r"speculative\.p_min has no effect on openai method 'none'; "
                                                     r"it takes: no knobs"):
        check_arm_capabilities(OpenAICompatAdapter(), a)


def test_classifies_real_startup_failures() -> None:
    log = (FIX / "spec_type_failures.log").read_text()
    mtp_section = log.split("== ")[1]
    err = adapter.classify_startup_failure(mtp_section)
    assert err is not None and err.reason == "missing-mtp-layers"
    assert err.log_line is not None and "doesn't contain MTP layers" in err.log_line
    unknown = adapter.classify_startup_failure(
        'error while handling argument "--draft-max": the argument has been removed. use --spec-draft-n-max\n')
    assert unknown is not None and unknown.reason == "unknown-flag"
    oom = adapter.classify_startup_failure(
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000 MiB on device 0: cudaMalloc failed: out of memory")
    assert oom is not None and oom.reason == "out-of-memory"
    vocab = adapter.classify_startup_failure(
        "E common_speculative_init: the target and draft vocabs are not compatible")
    assert vocab is not None and vocab.reason == "incompatible-draft-vocab"
    # llama.cpp's normal E line during draft memory fitting is not a failure
    normal = ("E failed to initialize the context: dflash requires ctx_other to be set "
              "(this warning is normal during memory fitting)")
    assert adapter.classify_startup_failure(normal) is None


MATCHED = FIX / "matched-draft-simple"  # one real request seen by timings, /metrics and the log (see README)


def _final(sse: Path = MATCHED / "chat_stream.sse") -> dict[str, Any]:
    payloads: list[dict[str, Any]] = [json.loads(line[6:]) for line in sse.read_text().splitlines()
                                      if line.startswith("data: {")]
    return [p for p in payloads if "timings" in p][-1]


def _metrics_server(after: str | None) -> httpx.Client:
    """Serves ``after`` on /metrics (a 500 when None)."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics" and after is not None:
            return httpx.Response(200, text=after)
        return httpx.Response(500)
    return httpx.Client(transport=httpx.MockTransport(handle), base_url="http://x")


def _stats(after: str | None = None, log_text: str | None = None, final: dict[str, Any] | None = None,
           before: object = "real", log: Callable[[], str] | None = None) -> tuple[list[str], object]:
    """``log``: the engine log core follows for this request (None: attached, or concurrent streams)."""
    a = LlamaCppAdapter()
    snapshot = {"metrics": parse_metrics((MATCHED / "metrics_before.txt").read_text())} if before == "real" \
        else before
    after = (MATCHED / "metrics_after.txt").read_text() if after is None else after
    with _metrics_server(after or None) as http:
        text = (MATCHED / "engine_request.log").read_text() if log_text is None else log_text
        stats = a.reader.server_stats(http, final or _final(), snapshot, EngineLog(text, log))
    return stats.flags, stats


def test_real_request_agrees_in_timings_metrics_and_log() -> None:
    flags, stats = _stats()
    assert flags == []
    assert (stats.drafted, stats.accepted, stats.drafts) == (38, 34, 13)  # type: ignore[attr-defined]
    assert stats.completion_tokens == 48 and stats.extra["log_mean_len"] == 3.62  # type: ignore[attr-defined]


def test_metrics_disagreeing_with_timings_fires_acceptance_mismatch() -> None:
    after = (MATCHED / "metrics_after.txt").read_text().replace(
        "llamacpp:spec_decode_num_accepted_tokens_total 34", "llamacpp:spec_decode_num_accepted_tokens_total 33")
    flags, _ = _stats(after=after)
    assert flags == ["acceptance-mismatch: /metrics 33 vs timings 34"]


def test_log_disagreeing_with_timings_fires_log_mismatch() -> None:
    log = (MATCHED / "engine_request.log").read_text().replace("(   34 accepted", "(   33 accepted")
    flags, _ = _stats(log_text=log)
    assert flags == ["acceptance-log-mismatch: log 33/38 vs timings 34/38"]


def test_a_log_line_written_after_the_stream_is_polled_for() -> None:
    late = iter(["", "", (MATCHED / "engine_request.log").read_text()])
    flags, stats = _stats(log_text="", log=lambda: next(late, ""))
    assert flags == [] and stats.extra["log_mean_len"] == 3.62  # type: ignore[attr-defined]


def test_a_log_line_that_never_comes_is_flagged() -> None:
    flags, _ = _stats(log_text="", log=lambda: "")
    assert flags == ["log-missing: no 'draft acceptance' line for this request in the engine log"]


def test_unreadable_metrics_are_flagged_and_the_log_still_checks() -> None:
    flags, stats = _stats(after="")
    assert flags == ["metrics-unavailable"] and stats.drafts is None  # type: ignore[attr-defined]
    flags, _ = _stats(before={"metrics": None})
    assert flags == ["metrics-unavailable"]


def test_no_crosscheck_at_all_says_so() -> None:
    flags, _ = _stats(after="", log_text="")  # attached: no log followed, and /metrics fails
    assert flags == ["metrics-unavailable",
                     "acceptance-crosscheck-missing: neither /metrics nor the log confirmed the timings"]
    flags, _ = _stats(before=None, log_text="")  # a concurrent stream: no snapshot of its own
    assert flags[-1].startswith("acceptance-crosscheck-missing: no /metrics snapshot")


@pytest.mark.parametrize(("timings", "flag"), [
    ({"predicted_n": "n/a"}, "bad-engine-value: timings.predicted_n is 'n/a', not a count"),
    ({"predicted_n": 48, "draft_n": 16.5}, "bad-engine-value: timings.draft_n is 16.5, not a count"),
    ({"predicted_n": 48, "predicted_per_second": "fast"}, "bad-engine-value: timings.predicted_per_second is 'fast'"),
    ({"predicted_n": 48, "draft_n_accepted": -3}, "bad-engine-value: timings.draft_n_accepted is -3"),
])
def test_bad_timing_values_become_flagged_missing_figures(timings: dict[str, Any], flag: str) -> None:
    flags, stats = _stats(final={"timings": timings}, before=None, log_text="")
    assert any(f.startswith(flag) for f in flags), flags
    field = {"predicted_n": "completion_tokens", "draft_n": "drafted", "predicted_per_second": "decode_tps",
             "draft_n_accepted": "accepted"}[next(k for k, v in timings.items() if v in ("n/a", 16.5, "fast", -3))]
    assert getattr(stats, field) is None


def test_timings_that_are_not_an_object_are_flagged() -> None:
    flags, stats = _stats(final={"timings": [1, 2]}, before=None, log_text="")
    assert flags == ["bad-engine-value: timings is [1, 2]"] and stats.completion_tokens is None  # type: ignore


def test_a_counter_that_goes_backwards_is_flagged_not_used() -> None:
    after = (MATCHED / "metrics_after.txt").read_text().replace(
        "llamacpp:spec_decode_num_drafts_total 13", "llamacpp:spec_decode_num_drafts_total 0.5")
    flags, stats = _stats(after=after)
    assert "bad-engine-value: /metrics llamacpp:spec_decode_num_drafts_total changed by 0.5 over one request" in flags
    assert stats.drafts is None  # type: ignore[attr-defined]


def test_chunk_count_passes_the_raw_value_to_the_client_for_validation() -> None:
    assert adapter.reader.chunk_token_count({"timings": {"predicted_n": "n/a"}}) == "n/a"
    assert adapter.reader.chunk_token_count({"timings": {"predicted_n": 7}}) == 7


def test_absent_draft_keys_mean_zero_drafted() -> None:
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)), base_url="http://x")
    stats = adapter.reader.server_stats(http, {"timings": {"predicted_n": 5, "predicted_per_second": 9.0}}, None,
                                 EngineLog(""))
    assert (stats.drafted, stats.accepted) == (0, 0)


def _props_client(n_ctx: int, slots: int, speculative: bool) -> httpx.Client:
    props = json.loads((FIX / "props.json").read_text())
    props["default_generation_settings"]["n_ctx"] = n_ctx
    props["total_slots"] = slots

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(200, json=props)
        if request.url.path == "/slots":
            return httpx.Response(200, json=[{"id": 0, "n_ctx": n_ctx, "speculative": speculative}])
        return httpx.Response(200, json=json.loads((FIX / "v1_models.json").read_text()))

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://x")


def test_effective_settings_flag_silent_downgrades(tmp_path: Path) -> None:
    draft = tiny_gguf(tmp_path / "d.gguf")
    a = arm(tmp_path, settings={"ctx": 4096}, speculative={"method": "eagle3", "draft_model": str(draft)})
    eff = read_effective(adapter, _props_client(n_ctx=2048, slots=4, speculative=False), a)
    text = " | ".join(eff.mismatches)
    assert "asked ctx 4096" in text and "total_slots 4" in text and "WITHOUT speculation" in text
    ok = read_effective(adapter, _props_client(n_ctx=4096, slots=1, speculative=True), a)
    assert ok.mismatches == [] and ok.raw["total_slots"] == 1


def _routes(routes: dict[str, object]) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path not in routes:
            return httpx.Response(404)
        return httpx.Response(200, json=routes[request.url.path])
    return httpx.Client(transport=httpx.MockTransport(handle), base_url="http://x")


def test_spec_types_are_read_from_slots_not_from_the_props_request_default(tmp_path: Path) -> None:
    """Item 10: /props says speculative.types "none" on a speculating server (it is a request default);
    /slots shows the types the slot runs once it has served a request (real capture, draft-simple)."""
    props = json.loads((MATCHED / "props.json").read_text())
    slots = json.loads((MATCHED / "slots_after.json").read_text())
    assert props["default_generation_settings"]["params"]["speculative.types"] == "none"
    draft = tiny_gguf(tmp_path / "d.gguf")
    a = arm(tmp_path, settings={"ctx": 1024}, speculative={"method": "draft", "draft_model": str(draft)})
    eff = read_effective(adapter, _routes({"/props": props, "/slots": slots}), a)
    assert eff.raw["spec_types"] == "none,draft-simple" and eff.raw["speculative"] is True
    assert eff.mismatches == []
    ngram = arm(tmp_path, settings={"ctx": 1024}, speculative={"method": "ngram"})
    eff = read_effective(adapter, _routes({"/props": props, "/slots": slots}), ngram)
    assert eff.mismatches == ["asked ngram-mod, /slots says speculative.types none,draft-simple"]
    # A fresh slot shows no params: one 1-token request makes it show what the server speculates with.
    fresh = [{k: v for k, v in slots[0].items() if k in ("id", "n_ctx", "speculative", "is_processing")}]
    probed: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/completion":
            probed.append(json.loads(request.content)["n_predict"])
            return httpx.Response(200, json={"content": "x"})
        body = {"/props": props, "/slots": slots if probed else fresh}.get(request.url.path)
        return httpx.Response(404) if body is None else httpx.Response(200, json=body)

    http = httpx.Client(transport=httpx.MockTransport(handle), base_url="http://x")
    eff = read_effective(adapter, http, a)
    assert probed == [8] and eff.raw["spec_types"] == "none,draft-simple" and eff.mismatches == []
    eff = read_effective(adapter, _routes({"/props": props, "/slots": fresh}), a)  # the probe fails: said so
    assert eff.raw["spec_types"] is None
    assert eff.mismatches[0].startswith("could not read the speculative types: a 8-token /completion failed")


def test_n_max_is_read_back_where_llama_server_reports_it(tmp_path: Path) -> None:
    """b11434's /slots names the types but not n_max (real capture, --spec-draft-n-max 3); /metrics has one
    per-position counter per draft token once it has drafted, and DFlash logs n_max at startup."""
    props = json.loads((MATCHED / "props.json").read_text())
    slots = json.loads((MATCHED / "slots_after.json").read_text())
    assert not [k for k in slots[0]["params"] if "n_max" in k]
    metrics = (MATCHED / "metrics_after.txt").read_text()

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=metrics)
        body = {"/props": props, "/slots": slots}.get(request.url.path)
        return httpx.Response(404) if body is None else httpx.Response(200, json=body)

    http = httpx.Client(transport=httpx.MockTransport(handle), base_url="http://x")
    draft = tiny_gguf(tmp_path / "d.gguf")
    spec = {"method": "draft", "draft_model": str(draft)}
    same = read_effective(adapter, http, arm(tmp_path, settings={"ctx": 1024}, speculative={**spec, "n_max": 3}))
    assert same.n_max == 3 and same.mismatches == []
    other = read_effective(adapter, http, arm(tmp_path, settings={"ctx": 1024}, speculative={**spec, "n_max": 5}))
    assert other.mismatches == ["asked speculative.n_max 5, /metrics says draft positions "
                                "(spec_decode_num_accepted_tokens_per_pos_total) 3"]
    dflash = arm(tmp_path, settings={"ctx": 1024}, speculative={"method": "dflash", "draft_model": str(draft),
                                                                "n_max": 7})
    log = (FIX / "startup_dflash_ok.log").read_text()  # real start, --spec-draft-n-max 3
    eff = read_effective(adapter, http, dflash, EngineLog(log))
    assert eff.n_max == 3 and "asked speculative.n_max 7, the startup log says n_max 3" in eff.mismatches
    # the clamp warning's wording is common/speculative.cpp's (b11434); no capture of it exists yet
    clamp = log + ("0.00.390.359 W common_speculative_impl_draft_dflash: requested draft size (n_max=7, n_min=0) "
                   "exceeds the trained block size 4 -- clamping to 3\n")
    eff = read_effective(adapter, http, dflash, EngineLog(clamp))
    assert "asked speculative.n_max 7, the startup log says n_max 3 (clamped to the draft model's trained block " \
           "size)" in eff.mismatches


@pytest.mark.parametrize(("routes", "expected"), [
    ({"/props": [1, 2], "/slots": [{"speculative": True, "params": {"speculative.types": "none,ngram-mod"}}]},
     ["GET /props: expected a JSON dict, got list"]),
    ({"/props": {"total_slots": 1}, "/slots": [5]}, ["bad-engine-value: /slots is [5], not a list of slots",
                                                     "/slots does not say whether speculation is on"]),
    ({"/props": {"total_slots": "one", "default_generation_settings": {"n_ctx": 4096.5}},
      "/slots": [{"speculative": "yes"}]},
     ["bad-engine-value: /props default_generation_settings.n_ctx is 4096.5, not a count",
      "bad-engine-value: /props total_slots is 'one', not a count",
      "bad-engine-value: /slots[0].speculative is 'yes', not true/false",
      "/slots does not say whether speculation is on"]),
    ({"/props": {"total_slots": 1}}, ["could not read /slots: Client error '404 Not Found'",
                                      "/slots does not say whether speculation is on"]),
])
def test_garbage_props_and_slots_become_named_mismatches(tmp_path: Path, routes: dict[str, Any],
                                                         expected: list[str]) -> None:
    eff = read_effective(adapter, _routes(routes), arm(tmp_path, speculative={"method": "ngram"}))
    assert len(eff.mismatches) == len(expected)
    assert all(got.startswith(want) for got, want in zip(eff.mismatches, expected, strict=True)), eff.mismatches


def test_multi_token_events_are_counted_from_per_chunk_timings() -> None:
    """Real capture: emoji tokens end inside a UTF-8 character, so llama.cpp streams 3 tokens in one event.
    timings_per_token's cumulative predicted_n counts them exactly; the one-token-per-event assumption would not."""
    from bakeoff.core.engine.client import stream_chat
    from bakeoff.core.measure.definitions import account

    body = (FIX / "chat_stream_timings_per_token_utf8.sse").read_bytes()
    sse = {"content-type": "text/event-stream"}
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, content=iter(split_events(body)),
                                                                               headers=sse)),
                        base_url="http://x")
    result = stream_chat(http, {}, timeout_s=5, chunk_count=adapter.reader.chunk_token_count)
    caps = adapter.capabilities
    exact = account(result, caps.token_counts)
    assert exact.completion_tokens == 40
    assert exact.max_tokens_per_event == 3 and exact.n_first == 3
    assert not [f for f in exact.flags if "mismatch" in f]
    naive = account(result, "one_per_event")
    assert any(f.startswith("token-events-mismatch") for f in naive.flags)
    assert adapter.request_fields(arm_without_files(), Workload())["timings_per_token"] is True


@pytest.mark.parametrize(("every", "asked"), [(2, [True, False, True, False]), (0, [False] * 3)])
def test_the_logprobs_witness_on_one_request_in_n(every: int, asked: list[bool]) -> None:
    adapter, arm = LlamaCppAdapter(), Arm(name="a", engine="llamacpp", model="m.gguf",
                                          options={"witness_every": every})
    assert ["logprobs" in adapter.witness.for_request(arm, i) for i in range(len(asked))] == asked
    assert "logprobs" not in adapter.request_fields(arm, Workload())  # the arm's run counts, not the adapter
    # with speculation on, b11434's logprobs leave out accepted draft tokens: never asked there
    drafting = arm.model_copy(update={"speculative": arm.speculative.model_copy(update={"method": "ngram"})})
    assert not any("logprobs" in adapter.witness.for_request(drafting, i) for i in range(len(asked)))


def arm_without_files() -> Arm:
    return Arm(name="a", engine="llamacpp", model="m.gguf")


def test_the_binary_option_describes_the_order_find_binary_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """AUDIT L4: the description said "PATH, then the cache" while the lookup began with the environment."""
    from bakeoff.engines.llamacpp import LlamaCppOptions

    on_path = tmp_path / "bin" / "llama-server"
    on_path.parent.mkdir()
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("BAKEOFF_LLAMA_SERVER", "/from/env/llama-server")
    options = LlamaCppOptions()
    order = [adapter.installer.locate(options).found_in]
    monkeypatch.delenv("BAKEOFF_LLAMA_SERVER")
    order.append(adapter.installer.locate(options).found_in)
    assert order == ["$BAKEOFF_LLAMA_SERVER", "PATH"]
    description = LlamaCppOptions.model_fields["binary"].description or ""
    assert description.index("$BAKEOFF_LLAMA_SERVER") < description.index("PATH") < description.index("cached build")


def test_garbage_token_counts_are_a_measurement_error_not_a_traceback() -> None:
    from bakeoff.core.common.errors import MeasurementError

    routes = {"/v1/chat/completions/input_tokens": [1], "/apply-template": {"prompt": "x"}, "/tokenize": {"tokens": 5}}

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=routes[request.url.path])

    http = httpx.Client(transport=httpx.MockTransport(handle), base_url="http://x")
    with pytest.raises(MeasurementError, match="'tokens' is 5, not a list"):
        adapter.reader.count_prompt_tokens(http, [{"role": "user", "content": "hi"}])
    routes["/tokenize"] = {"tokens": [1, 2, 3]}
    assert adapter.reader.count_prompt_tokens(http, [{"role": "user", "content": "hi"}]) == 3


def test_selftest_cases_emit_every_draft_knob_and_the_cpu_settings_flags() -> None:
    """AUDIT L10: the self-test never passed --spec-draft-p-min or the settings flags to the real binary."""
    from bakeoff.engines.llamacpp.selftest import selftest_cases

    cases = {c.label: c for c in selftest_cases()[0]}
    assert "--spec-draft-n-min 1 --spec-draft-p-min 0.05" in cases["draft"].flags
    none = cases["none"].arm.model_copy(update={"options": {"binary": "/opt/llama-server"}})
    joined = " ".join(build_launch(adapter, none, 8080, Path("/tmp")).argv)
    assert "-t 2 -ctk f16 -ctv f16 -fa auto -b 256 -ub 128" in joined
