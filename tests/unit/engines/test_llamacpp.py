"""llama.cpp adapter: launch specs, preflight, failure classification and server stats, from real captures."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from sse_fakes import split_events
from bakeoff.core.adapter import check_arm_capabilities
from bakeoff.core.config import Arm, Workload
from bakeoff.core.errors import CapabilityNotSupported, PreflightError
from bakeoff.core.metrics import parse_metrics
from bakeoff.engines.llamacpp import LlamaCppAdapter, parse_acceptance_lines

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
    data = {"name": "a", "engine": "llamacpp", "model": str(model), "options": {"binary": "/opt/llama-server"}}
    data.update(kw)
    return Arm.model_validate(data)


def argv(a: Arm) -> list[str]:
    return adapter.launch_spec(a, 8080, Path("/tmp")).argv


def test_plain_arm_pins_one_slot_loopback_and_explicit_spec_type(tmp_path: Path) -> None:
    args = argv(arm(tmp_path, settings={"ctx": 4096, "threads": 2, "kv_type": "q8_0", "flash_attn": "on"}))
    assert args[0] == "/opt/llama-server"
    joined = " ".join(args)
    assert "--host 127.0.0.1 --port 8080" in joined
    assert "-np 1" in joined  # auto -np would give 4 unified slots
    assert "--spec-type none" in joined
    assert "-c 4096" in joined and "-t 2" in joined and "-ctk q8_0 -ctv q8_0" in joined and "-fa on" in joined
    assert "--metrics" in args


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
    with pytest.raises(CapabilityNotSupported, match="llamacpp method 'dflash' needs speculative.draft_model"):
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
    with pytest.raises(CapabilityNotSupported, match="speculative.p_min has no effect on openai method 'none'; "
                                                     "it takes: no knobs"):
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
    vocab = adapter.classify_startup_failure("E common_speculative_init: the target and draft vocabs are not compatible")
    assert vocab is not None and vocab.reason == "incompatible-draft-vocab"
    # llama.cpp's normal E line during draft memory fitting is not a failure
    normal = ("E failed to initialize the context: dflash requires ctx_other to be set "
              "(this warning is normal during memory fitting)")
    assert adapter.classify_startup_failure(normal) is None


def test_server_stats_from_timings_and_log_line() -> None:
    response = json.loads((FIX / "spec_draft_chat_nonstream.json").read_text())
    log = (FIX / "log_excerpt_spec_draft_simple.txt").read_text()
    last = parse_acceptance_lines(log)[-1]
    assert (last["accepted"], last["generated"]) == (189, 195)
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)), base_url="http://x")
    stats = adapter.server_stats(http, response, None, "")
    t = response["timings"]
    assert stats.drafted == t["draft_n"] and stats.accepted == t["draft_n_accepted"]
    assert stats.decode_tps == t["predicted_per_second"]
    assert stats.completion_tokens == t["predicted_n"]


def test_absent_draft_keys_mean_zero_drafted() -> None:
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)), base_url="http://x")
    stats = adapter.server_stats(http, {"timings": {"predicted_n": 5, "predicted_per_second": 9.0}}, None, "")
    assert (stats.drafted, stats.accepted) == (0, 0)


def test_log_disagreeing_with_timings_is_flagged() -> None:
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)), base_url="http://x")
    line = "slot print_timing: id  0 | task 1 | draft acceptance = 0.50000 (  10 accepted /   20 generated), mean len =  2.00"
    stats = adapter.server_stats(http, {"timings": {"predicted_n": 5, "draft_n": 20, "draft_n_accepted": 11}}, None, line)
    assert any(f.startswith("acceptance-log-mismatch") for f in stats.flags)


def test_metrics_capture_parses_spec_counters() -> None:
    metrics = parse_metrics((FIX / "metrics_spec_draft_simple.txt").read_text())
    names = {name for name, _ in metrics}
    assert "llamacpp:spec_decode_num_drafts_total" in names


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
    eff = adapter.effective_settings(_props_client(n_ctx=2048, slots=4, speculative=False), a)
    text = " | ".join(eff.mismatches)
    assert "asked ctx 4096" in text and "total_slots 4" in text and "WITHOUT speculation" in text
    ok = adapter.effective_settings(_props_client(n_ctx=4096, slots=1, speculative=True), a)
    assert ok.mismatches == [] and ok.values["total_slots"] == 1


def test_multi_token_events_are_counted_from_per_chunk_timings() -> None:
    """Real capture: emoji tokens end inside a UTF-8 character, so llama.cpp streams 3 tokens in one event.
    timings_per_token's cumulative predicted_n counts them exactly; the one-token-per-event assumption would not."""
    from bakeoff.core.client import account, stream_chat

    body = (FIX / "chat_stream_timings_per_token_utf8.sse").read_bytes()
    sse = {"content-type": "text/event-stream"}
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, content=iter(split_events(body)),
                                                                               headers=sse)),
                        base_url="http://x")
    result = stream_chat(http, {}, timeout_s=5, chunk_count=adapter.chunk_token_count)
    caps = adapter.capabilities
    exact = account(result, caps.token_counts)
    assert exact["completion_tokens"] == 40
    assert exact["max_tokens_per_event"] == 3 and exact["n_first"] == 3
    assert not [f for f in exact["flags"] if "mismatch" in f]
    naive = account(result, "one_per_event")
    assert any(f.startswith("token-events-mismatch") for f in naive["flags"])
    assert adapter.request_fields(arm_without_files(), Workload())["timings_per_token"] is True


def arm_without_files() -> Arm:
    return Arm(name="a", engine="llamacpp", model="m.gguf")
