"""ExLlamaV3/TabbyAPI adapter: config.yml, refusals, readiness, effective settings and server stats,
checked against what a real TabbyAPI (e632af4, exllamav3 1.4.2) answered on an H200.

Fixtures (tests/fixtures/exllama/, README there): ``fp16-*`` are raw answers captured with
benchmarks/gpu/capture_tabby.py (unquantized random-weight model), ``exl3-run1``/``exl3-run2`` the bakeoff runs on the
EXL3 4.0 bpw quantization of that model.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sse_fakes import split_events

from bakeoff.core import EngineLog, build_launch
from bakeoff.core.analysis.stats import EXCLUDING_FLAGS
from bakeoff.core.common.errors import CapabilityNotSupported, EngineUnavailable, PreflightError
from bakeoff.core.config.schema import Arm, Workload
from bakeoff.core.engine.checks import check_arm_capabilities, check_structured, read_effective
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.engine.pieces import ServerStats
from bakeoff.core.measure.definitions import account, make_sample, request_fields
from bakeoff.core.measure.points import cache_flags
from bakeoff.core.results.sample import Sample
from bakeoff.engines.exllama import ExllamaAdapter, cache_mode, parse_metrics_lines

FIX = Path(__file__).parent.parent.parent / "fixtures" / "exllama"


def body(name: str) -> str:
    """A capture saved as 'HTTP <status>' then the body."""
    status, _, rest = (FIX / name).read_text().partition("\n")
    assert status == "HTTP 200"
    return rest


def model_dir(path: Path, architectures: list[str] | None = None, **config: object) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": architectures or ["LlamaForCausalLM"],
                                                  **config}))
    return path


@pytest.fixture()
def tabby(tmp_path: Path) -> Path:
    (tmp_path / "tabby").mkdir()
    (tmp_path / "tabby" / "main.py").write_text("# TabbyAPI stand-in\n")
    return tmp_path / "tabby"


def arm(tmp_path: Path, tabby: Path, **kw: object) -> Arm:
    model = model_dir(tmp_path / "models" / "target-exl3")
    data: dict[str, object] = {"name": "a", "engine": "exllama", "model": str(model),
                               "options": {"tabby_dir": str(tabby), "python": "/opt/py/bin/python3"}}
    data.update(kw)
    return Arm.model_validate(data)


def config_of(a: Arm, port: int = 5123, workdir: Path = Path("/run/a")) -> dict[str, Any]:
    spec = build_launch(ExllamaAdapter(), a, port, workdir)
    text = spec.files["config.yml"]
    assert text.startswith("# written by bakeoff")
    config = yaml.safe_load(text)
    assert isinstance(config, dict)
    return config


# -- launch -------------------------------------------------------------------------------------

def test_native_launch_runs_main_py_in_the_arm_directory_with_unwrapped_logs(tmp_path: Path, tabby: Path) -> None:
    a = arm(tmp_path, tabby, extra_args=["--chunk-size", "1024"])
    spec = build_launch(ExllamaAdapter(), a, 5123, tmp_path / "run")
    assert spec.argv == ["/opt/py/bin/python3", str(tabby / "main.py"), "--chunk-size", "1024"]
    assert spec.cwd == tmp_path / "run"  # TabbyAPI reads config.yml from its working directory
    assert spec.ready_path == "/health"
    assert spec.env["TABBY_LOG_CONSOLE_WIDTH"] == "100000"  # rich wraps at 80 columns otherwise
    assert spec.env["PYTHONUNBUFFERED"] == "1"
    assert list(spec.files) == ["config.yml"]


def test_config_maps_model_context_slots_cache_and_gpus(tmp_path: Path, tabby: Path) -> None:
    cfg = config_of(arm(tmp_path, tabby, settings={"ctx": 3000, "parallel": 2, "kv_type": "q8_0",
                                                   "tensor_split": [20, 30]}))
    assert cfg["network"] == {"host": "127.0.0.1", "port": 5123, "disable_auth": True, "api_servers": ["oai"]}
    m = cfg["model"]
    assert m["model_dir"] == str(tmp_path / "models") and m["model_name"] == "target-exl3"
    assert m["max_seq_len"] == 3000 and m["max_batch_size"] == 2
    assert m["cache_size"] == 6144  # ctx × parallel, rounded up to a multiple of 256
    assert m["cache_mode"] == "Q8"
    assert m["gpu_split_auto"] is False and m["gpu_split"] == [20, 30]
    assert m["tensor_parallel"] is False
    assert cfg["draft_model"] == {"draft_mode": "disabled"}


def test_tensor_parallel_and_single_gpu_split(tmp_path: Path, tabby: Path) -> None:
    assert config_of(arm(tmp_path, tabby, settings={"tensor_parallel": 2}))["model"]["tensor_parallel"] is True
    assert config_of(arm(tmp_path, tabby, settings={"split": "tensor"}))["model"]["tensor_parallel"] is True
    assert config_of(arm(tmp_path, tabby, settings={"split": "none"}))["model"]["gpu_split_auto"] is False


@pytest.mark.parametrize(("kv", "mode"), [("FP16", "FP16"), ("f16", "FP16"), ("q4_0", "Q4"), ("Q6", "Q6"),
                                          ("4,6", "4,6"), ("8, 8", "8,8")])
def test_cache_modes(kv: str, mode: str) -> None:
    assert cache_mode(kv) == mode


def test_draft_modes(tmp_path: Path, tabby: Path) -> None:
    draft = model_dir(tmp_path / "drafts" / "small-exl3")
    cfg = config_of(arm(tmp_path, tabby, speculative={"method": "draft", "draft_model": str(draft), "n_max": 5}))
    assert cfg["draft_model"] == {"draft_mode": "model", "draft_model_dir": str(tmp_path / "drafts"),
                                  "draft_model_name": "small-exl3", "draft_num_tokens": 5, "dynamic_draft": False}
    ngram = config_of(arm(tmp_path, tabby, speculative={"method": "ngram", "n_max": 4, "lookup_min": 3}))["draft_model"]
    assert ngram == {"draft_mode": "ngram", "draft_num_tokens": 4, "ngram_match_min": 3, "dynamic_draft": False}
    mtp = config_of(arm(tmp_path, tabby, speculative={"method": "mtp"}))["draft_model"]
    assert mtp == {"draft_mode": "mtp", "dynamic_draft": False}
    dflash = model_dir(tmp_path / "drafts" / "dflash", ["DFlashDraftModel"])
    df = config_of(arm(tmp_path, tabby, speculative={"method": "dflash", "draft_model": str(dflash)}))["draft_model"]
    assert df["draft_mode"] == "model" and df["draft_model_name"] == "dflash"  # DFlash loads as a draft model


def test_options_reach_config_and_extra_sections_merge_last(tmp_path: Path, tabby: Path) -> None:
    cfg = config_of(arm(tmp_path, tabby, speculative={"method": "ngram"},
                        options={"tabby_dir": str(tabby), "chunk_size": 512, "dynamic_draft": True,
                                 "draft_cache_mode": "q8", "config": {"developer": {"unsafe_launch": True},
                                                                      "model": {"max_batch_size": 3}}}))
    assert cfg["model"]["chunk_size"] == 512 and cfg["model"]["max_batch_size"] == 3
    assert cfg["draft_model"]["dynamic_draft"] is True and cfg["draft_model"]["draft_cache_mode"] == "Q8"
    assert cfg["developer"] == {"unsafe_launch": True}


def test_docker_argv_publishes_loopback_and_mounts_read_only(tmp_path: Path, tabby: Path) -> None:
    draft = model_dir(tmp_path / "drafts" / "d")
    a = arm(tmp_path, tabby, launch="docker", speculative={"method": "draft", "draft_model": str(draft)},
            env={"CUDA_VISIBLE_DEVICES": "1"})
    spec = build_launch(ExllamaAdapter(), a, 5123, tmp_path / "run")
    argv = spec.argv
    assert argv[:4] == ["docker", "run", "--rm", "--name"]
    assert argv[argv.index("-p") + 1] == "127.0.0.1:5123:5000"
    assert f"{tmp_path / 'models'}:/app/models:ro" in argv
    assert f"{tmp_path / 'drafts'}:/app/draft_models:ro" in argv
    assert f"{tmp_path / 'run' / 'config.yml'}:/app/config.yml:ro" in argv
    assert "TABBY_LOG_CONSOLE_WIDTH=100000" in argv
    assert argv[argv.index("CUDA_VISIBLE_DEVICES") - 1] == "-e" and spec.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert argv[-2:] == ["ghcr.io/theroyallab/tabbyapi:latest", "main.py"]
    cfg = yaml.safe_load(spec.files["config.yml"])
    assert cfg["network"]["host"] == "0.0.0.0" and cfg["network"]["port"] == 5000
    assert cfg["model"]["model_dir"] == "/app/models" and cfg["draft_model"]["draft_model_dir"] == "/app/draft_models"


# -- refusals before launch ---------------------------------------------------------------------

@pytest.mark.parametrize("spec", [{"method": "draft", "draft_model": "x", "n_min": 1},
                                  {"method": "draft", "draft_model": "x", "p_min": 0.5},
                                  {"method": "ngram", "variant": "mod"},
                                  {"method": "ngram", "lookup_max": 4},
                                  {"method": "eagle3", "draft_model": "x"},
                                  {"method": "suffix"}])
def test_knobs_tabby_lacks_are_refused(tmp_path: Path, tabby: Path, spec: dict[str, Any]) -> None:
    with pytest.raises(CapabilityNotSupported):
        check_arm_capabilities(ExllamaAdapter(), arm(tmp_path, tabby, speculative=spec))


@pytest.mark.parametrize("settings", [{"threads": 4}, {"gpu_layers": "all"}, {"flash_attn": "on"}, {"batch": 512},
                                      {"split": "row"}])
def test_settings_tabby_lacks_are_refused(tmp_path: Path, tabby: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(CapabilityNotSupported):
        check_arm_capabilities(ExllamaAdapter(), arm(tmp_path, tabby, settings=settings))


def test_supported_arm_passes_capabilities_and_preflight(tmp_path: Path, tabby: Path) -> None:
    draft = model_dir(tmp_path / "drafts" / "d")
    a = arm(tmp_path, tabby, speculative={"method": "draft", "draft_model": str(draft), "n_max": 4},
            settings={"ctx": 4096, "parallel": 1, "kv_type": "8,8"})
    check_arm_capabilities(ExllamaAdapter(), a)
    ExllamaAdapter().preflight(a)


def test_preflight_refusals(tmp_path: Path, tabby: Path) -> None:
    adapter = ExllamaAdapter()
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    plain = model_dir(tmp_path / "drafts" / "plain")
    dflash = model_dir(tmp_path / "drafts" / "dflash", ["DFlashDraftModel"])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"model": str(gguf)}, "not a directory"),
        ({"speculative": {"method": "dflash", "draft_model": str(plain)}}, "not a DFlash model"),
        ({"speculative": {"method": "draft", "draft_model": str(dflash)}}, "use method 'dflash'"),
        ({"settings": {"kv_type": "q5_1"}}, "not a TabbyAPI cache_mode"),
        ({"options": {"tabby_dir": str(tabby), "draft_cache_mode": "q5_1"}},
         "options.draft_cache_mode: kv_type .q5_1."),
        ({"settings": {"tensor_parallel": 2, "tensor_split": [10, 10, 10]}}, "lists 3 GPUs"),
    ]
    for kw, message in cases:
        with pytest.raises(PreflightError, match=message):
            adapter.preflight(arm(tmp_path, tabby, **kw))
    refused: list[tuple[dict[str, Any], str]] = [
        ({"speculative": {"method": "draft"}}, "exllama method 'draft' needs speculative.draft_model"),
        ({"speculative": {"method": "ngram", "draft_model": str(plain)}}, "draft_model has no effect on exllama"),
        ({"speculative": {"method": "draft", "draft_model": str(plain), "lookup_min": 2}},
         "lookup_min has no effect on exllama method 'draft'; it takes: n_max"),
    ]
    for kw, message in refused:
        with pytest.raises(CapabilityNotSupported, match=message):
            check_arm_capabilities(adapter, arm(tmp_path, tabby, **kw))
    no_mtp = model_dir(tmp_path / "models" / "nomtp", num_nextn_predict_layers=0)
    with pytest.raises(PreflightError, match="MTP"):
        adapter.preflight(arm(tmp_path, tabby, model=str(no_mtp), speculative={"method": "mtp"}))


def test_native_launch_without_a_checkout_is_unavailable(tmp_path: Path, tabby: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BAKEOFF_TABBY_DIR", raising=False)
    a = arm(tmp_path, tabby, options={})
    with pytest.raises(EngineUnavailable, match="no TabbyAPI checkout"):
        ExllamaAdapter().preflight(a)
    monkeypatch.setenv("BAKEOFF_TABBY_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(EngineUnavailable, match="does not exist"):
        ExllamaAdapter().preflight(a)
    monkeypatch.setenv("BAKEOFF_TABBY_DIR", str(tabby))
    ExllamaAdapter().preflight(a)
    ExllamaAdapter().preflight(arm(tmp_path, tabby, options={}, launch="docker", settings={}))


# -- startup, effective settings ------------------------------------------------------------------

def test_readiness_is_the_first_200_from_health() -> None:
    adapter = ExllamaAdapter()
    healthy = body("fp16-spec-off/health.txt")
    assert json.loads(healthy) == {"status": "healthy", "issues": []}
    assert adapter.is_ready(httpx.Response(200, text=healthy))
    assert not adapter.is_ready(httpx.Response(503, json={"status": "unhealthy", "issues": [{"description": "x"}]}))
    # the model loads before uvicorn listens: before that, /health refuses connections
    assert "Connection refused" in json.loads((FIX / "fp16-spec-off" / "boot.json").read_text())["before_listen"]


@pytest.mark.parametrize(("line", "reason"), [
    ("ERROR: Inference dependencies for TabbyAPI are not installed.", "missing-dependencies"),
    ("ModuleNotFoundError: No module named 'exllamav3'", "missing-dependencies"),
    ("RuntimeError: ERROR: TabbyAPI requires exllamav3 1.4.1 or greater. Your current version is 1.3.0.",
     "exllamav3-too-old"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    ("ERROR: Ports 5000 and 5001 are in use by different services.", "port-in-use"),
    ("ValueError: Unknown exllamav3 draft mode: eagle", "bad-draft-config"),
])
def test_startup_failures_are_classified(line: str, reason: str) -> None:
    err = ExllamaAdapter().classify_startup_failure(f"2026-11-29 20:56:36.844 INFO:     Configured\n{line}\n")
    assert err is not None and err.reason == reason and err.log_line == line


def test_unknown_startup_failure_is_left_to_core() -> None:
    assert ExllamaAdapter().classify_startup_failure("2026-11-29 INFO: Model successfully loaded.\n") is None


def mock_server(routes: Mapping[str, httpx.Response | str]) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        answer = routes.get(request.url.path)
        if answer is None:
            return httpx.Response(404)
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, text=answer)
    return httpx.Client(transport=httpx.MockTransport(handle), base_url="http://tabby")


def test_effective_settings_from_real_model_card_and_props(tmp_path: Path, tabby: Path) -> None:
    routes = {"/v1/model": body("fp16-spec-off/v1_model.txt"), "/props": body("fp16-spec-off/props.txt")}
    with mock_server(routes) as http:
        eff = read_effective(ExllamaAdapter(), http, arm(tmp_path, tabby, settings={"ctx": 4096, "parallel": 1}))
        assert eff.model_id == "rand-llama-150m"
        assert eff.raw["max_seq_len"] == 4096 and eff.raw["cache_mode"] == "FP16"
        assert eff.raw["total_slots"] == 1 and eff.raw["n_ctx"] == 4096
        assert eff.raw["prompt_template"] == "chat_template"
        assert eff.raw["draft"] is None  # the exllamav3 model card never lists a draft
        assert eff.mismatches == []
        asked = arm(tmp_path, tabby, settings={"ctx": 8192, "parallel": 4, "kv_type": "Q4"})
        mismatches = " | ".join(read_effective(ExllamaAdapter(), http, asked).mismatches)
    assert "asked ctx 8192" in mismatches and "total_slots 1" in mismatches and "cache_mode Q4" in mismatches


def test_effective_settings_without_a_template_or_server(tmp_path: Path, tabby: Path) -> None:
    card = json.loads(body("fp16-spec-off/v1_model.txt"))
    card["parameters"]["prompt_template"] = None
    with mock_server({"/v1/model": json.dumps(card), "/props": body("fp16-spec-off/props.txt")}) as http:
        eff = read_effective(ExllamaAdapter(), http, arm(tmp_path, tabby))
    assert any("refuses chat completions" in m for m in eff.mismatches)
    with mock_server({}) as http:
        eff = read_effective(ExllamaAdapter(), http, arm(tmp_path, tabby))
    assert eff.mismatches and "could not read" in eff.mismatches[0]


# -- requests -------------------------------------------------------------------------------------

def test_request_fields_thinking_off_and_no_loop_cut_for_fixed_length(tmp_path: Path, tabby: Path) -> None:
    adapter = ExllamaAdapter()
    a = arm(tmp_path, tabby)
    assert adapter.request_fields(a, Workload(max_tokens=256)) == {"loop_detect_window": 0}  # engine-only
    # thinking and min_tokens are core's (thinking_field, fixed_length_field): min_tokens tracks each
    # request's own max_tokens, so a warm-up with a shorter max_tokens gets no 500
    assert request_fields(a, adapter, Workload(max_tokens=256), 32) == {
        "chat_template_kwargs": {"enable_thinking": False}, "min_tokens": 32, "loop_detect_window": 0}
    assert request_fields(a, adapter, Workload(fixed_length=False, thinking=True), 256) == {
        "chat_template_kwargs": {"enable_thinking": True}}
    own = arm(tmp_path, tabby, options={"tabby_dir": str(tabby), "loop_detect_window": 400})
    assert adapter.request_fields(own, Workload())["loop_detect_window"] == 400


def test_min_tokens_above_max_tokens_is_a_server_error_in_tabby() -> None:
    """Why request_fields leaves min_tokens to core: the real answer and log line."""
    status = (FIX / "fp16-draft-self" / "chat_nonstream_min_gt_max.txt").read_text().splitlines()[0]
    assert status == "HTTP 500"
    log = (FIX / "fp16-draft-self" / "engine.log").read_text()
    assert 'raise ValidationError("min tokens cannot be more then max tokens")' in log


def test_ignore_eos_is_ignored_by_the_exllamav3_backend() -> None:
    """Why fixed length uses min_tokens: TabbyAPI drops ban_eos_token (alias ignore_eos) with a warning."""
    log = (FIX / "fp16-spec-off" / "engine.log").read_text()
    assert "Ignoring sampler params not supported by the exllamav3 backend: ban_eos_token" in log


def sse_client(name: str) -> httpx.Client:
    raw = (FIX / name).read_bytes()
    return mock_server({"/v1/chat/completions": httpx.Response(200, content=iter(split_events(raw)),
                                                              headers={"content-type": "text/event-stream"})})


def test_stream_has_usage_once_with_timing_extras_and_few_events() -> None:
    with sse_client("fp16-draft-self/chat_stream_min_tokens.sse") as http:
        result = stream_chat(http, {"stream": True}, 30)
    assert result.error is None and result.finish_reason == "length"
    assert result.final is not None and result.final["id"] == "chatcmpl-4fee0121af254430bbbf6fbfb735642b"
    usage = result.final["usage"]
    assert usage["completion_tokens"] == 59 and usage["completion_tokens_per_sec"] == 28.85
    assert {"prompt_time", "completion_time", "total_time"} <= set(usage)
    # 59 tokens in 3 text events: under drafting one event carries many tokens
    caps = ExllamaAdapter.capabilities
    fields = account(result, caps.token_counts)
    assert fields.token_events == 3 and fields.n_first is not None
    assert fields.n_first > 20  # the first event carries most of the text
    assert "n_first-estimated" in fields.flags


@pytest.mark.parametrize(("label", "drafted", "accepted"), [("ngram", 34, 19), ("draft-self", 47, 47)])
def test_server_stats_tie_the_log_line_to_its_stream(label: str, drafted: int, accepted: int) -> None:
    with sse_client(f"fp16-{label}/chat_stream_min_tokens.sse") as http:
        final = stream_chat(http, {"stream": True}, 30).final
        log = (FIX / f"fp16-{label}" / "engine.log").read_text()
        stats = ExllamaAdapter().reader.server_stats(http, final, None, EngineLog(log))
    assert stats.drafted == drafted and stats.accepted == accepted
    assert stats.source == "log: Draft: A / D tokens accepted"
    assert stats.completion_tokens == 59 and stats.prompt_tokens == 44 and stats.cached_tokens == 0
    assert stats.prefill_tps == 2200.0 and stats.extra["prompt_time"] == 0.02
    assert stats.extra["request_id"] == final["id"].removeprefix("chatcmpl-")  # type: ignore[index]
    assert not [f for f in stats.flags if "mismatch" in f or "missing" in f]


def test_server_stats_spec_off_and_prefix_cache_hit() -> None:
    with sse_client("fp16-spec-off/chat_stream_min_tokens_repeat.sse") as http:
        final = stream_chat(http, {"stream": True}, 30).final
        log = EngineLog((FIX / "fp16-spec-off" / "engine.log").read_text())
        stats = ExllamaAdapter().reader.server_stats(http, final, None, log)
    assert stats.drafted is None and stats.accepted is None and stats.extra["draft_in_log"] is False
    assert stats.cached_tokens == 43 and stats.prompt_tokens == 1  # the repeat was served from the prefix cache
    assert "prompt-cache-hit: 43 cached tokens" in stats.flags
    assert stats.prefill_tps is None  # TabbyAPI says "Indeterminate"
    assert stats.decode_tps == final["usage"]["completion_tokens_per_sec"]  # type: ignore[index]


def test_another_requests_line_is_never_taken() -> None:
    with sse_client("fp16-ngram/chat_stream_min_tokens.sse") as http:
        final = stream_chat(http, {"stream": True}, 30).final
        other = (FIX / "fp16-draft-self" / "engine.log").read_text()  # same shapes, other request ids
        stats = ExllamaAdapter().reader.server_stats(http, final, None, EngineLog(other))
    assert stats.drafted is None and "metrics-log-missing" in stats.flags
    assert stats.completion_tokens == 59  # usage still counts


def test_a_metrics_line_written_after_done_is_found_in_the_engine_log(tmp_path: Path, tabby: Path) -> None:
    """Seen on the H200: one ngram request's line landed after [DONE], so the chunk read for it lacked it."""
    run_log = (FIX / "exl3-run1" / "ngram" / "engine-pass0.log").read_text()
    late_id = "3baca4e9be6c431ebf40d1c2ae826a67"  # code_bash rep 1, flagged metrics-log-missing in samples.jsonl
    assert f"Metrics (ID: {late_id})" in run_log
    adapter = ExllamaAdapter()
    arrivals = iter(["", run_log])  # the line arrives on the engine log a moment after the stream ended
    final = {"id": f"chatcmpl-{late_id}", "usage": {"completion_tokens": 251, "prompt_tokens": 65}}
    with mock_server({}) as http:
        stats = adapter.reader.server_stats(http, final, None, EngineLog("", lambda: next(arrivals, "")))
    assert (stats.drafted, stats.accepted) == (142, 134) and stats.extra["metrics_log"] == "late"
    assert stats.cached_tokens == 64 and stats.prompt_tokens == 1 and stats.extra["log_gen_tps"] == 548.94
    fresh = ExllamaAdapter()  # attach mode: core follows no log, nothing to poll
    with mock_server({}) as http:
        assert "metrics-log-missing" in fresh.reader.server_stats(http, final, None, EngineLog("")).flags
    silent = ExllamaAdapter()  # a log that never gets the line: polled about a second, then flagged
    with mock_server({}) as http:
        assert "metrics-log-missing" in silent.reader.server_stats(http, final, None, EngineLog("", lambda: "")).flags


def test_garbage_from_tabbyapi_becomes_flagged_missing_figures(tmp_path: Path, tabby: Path) -> None:
    routes: dict[str, httpx.Response | str] = {
        "/v1/model": httpx.Response(200, json={"id": "m", "parameters": {"max_seq_len": "4k", "cache_size": -1}}),
        "/props": httpx.Response(200, json=[5])}
    with mock_server(routes) as http:
        eff = read_effective(ExllamaAdapter(), http, arm(tmp_path, tabby, settings={"ctx": 4096}))
    assert eff.raw["max_seq_len"] is None and eff.raw["cache_size"] is None
    assert "GET /props: expected a JSON dict, got list" in eff.mismatches
    assert "bad-engine-value: /v1/model max_seq_len is '4k', not a count" in eff.mismatches
    with mock_server({"/v1/model": httpx.Response(200, json=[1])}) as http:
        eff = read_effective(ExllamaAdapter(), http, arm(tmp_path, tabby))
    assert eff.raw == {} and eff.mismatches[0] == "GET /v1/model: expected a JSON dict, got list"
    final = {"id": "chatcmpl-x", "usage": {"completion_tokens": "59", "completion_tokens_per_sec": float("nan")}}
    with mock_server({}) as http:
        stats = ExllamaAdapter().reader.server_stats(http, final, None, EngineLog(""))
    assert stats.completion_tokens is None and stats.decode_tps is None
    assert "bad-engine-value: usage.completion_tokens is '59', not a count" in stats.flags


def test_metrics_lines_of_the_real_run() -> None:
    for label, drafts in (("spec-off", False), ("ngram", True), ("draft-self", True), ("draft-2bpw", True)):
        lines = parse_metrics_lines((FIX / "exl3-run1" / label / "engine-pass0.log").read_text())
        assert len(lines) == 10 and len({m.request_id for m in lines}) == 10  # warm-up + 9 timed
        assert all((m.drafted is not None) == drafts for m in lines)
        assert all(m.gen_tokens == (251 if drafts else 255) for m in lines[1:])
        assert all(m.drafted is None or 0 <= m.accepted <= m.drafted for m in lines)  # type: ignore[operator]


def test_wrapped_console_lines_parse_the_same() -> None:
    """Without TABBY_LOG_CONSOLE_WIDTH rich wraps the Metrics line at 80 columns."""
    log = (FIX / "exl3-run1" / "draft-2bpw" / "engine-pass0.log").read_text()
    line = next(ln for ln in log.splitlines() if "Metrics (ID:" in ln)
    wrapped = "\n".join(textwrap.wrap(line, 80))
    assert wrapped.count("\n") >= 3
    assert parse_metrics_lines(wrapped) == parse_metrics_lines(line)
    m = parse_metrics_lines(line)[0]
    assert m.drafted is not None and m.gen_tps is not None and m.queue_s == 0.0


def test_server_stats_reproduce_the_real_runs_acceptance_from_its_engine_logs() -> None:
    """The committed H200 run, replayed through server_stats: each timed request's Metrics line, found by
    its stream id in the engine log of its arm, gives the drafted/accepted the run recorded (the one sample
    whose line came after [DONE] recorded none; the log on disk has it)."""
    samples = [json.loads(line) for line in (FIX / "exl3-run1" / "samples.jsonl").read_text().splitlines()]
    replayed = 0
    for arm in ("ngram", "draft-self", "draft-2bpw"):
        log = (FIX / "exl3-run1" / arm / "engine-pass0.log").read_text()
        timed = parse_metrics_lines(log)[1:]  # the first line is the untimed warm-up's
        recorded = [s for s in samples if s["arm"] == arm]
        assert len(timed) == len(recorded) == 9
        for line, sample in zip(timed, recorded, strict=True):
            final = {"id": f"chatcmpl-{line.request_id}", "usage": {"completion_tokens": sample["completion_tokens"]}}
            with mock_server({}) as http:
                stats = ExllamaAdapter().reader.server_stats(http, final, None, EngineLog(log))
            assert stats.source == "log: Draft: A / D tokens accepted" and stats.flags == [
                f for f in stats.flags if f.startswith("prompt-cache-hit")]
            if "metrics-log-missing" in sample["flags"]:
                assert sample["drafted"] is None and arm == "ngram"
                continue
            assert (stats.drafted, stats.accepted) == (sample["drafted"], sample["accepted"])
            replayed += 1
    assert replayed == 26


def test_second_run_has_every_acceptance_and_the_counting_quirks() -> None:
    """Two passes after the late-line fix: no request lost its log line; usage shows exllamav3's counts."""
    samples = [json.loads(line) for line in (FIX / "exl3-run2" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 72 and {s["pass_index"] for s in samples} == {0, 1}
    assert not [s for s in samples if "metrics-log-missing" in s["flags"]]
    for s in samples:
        drafting = s["arm"] != "spec-off"
        assert (s["drafted"] is not None) == drafting
        # usage is one short of the 256 streamed; drafting stops n_max (4) tokens earlier still
        assert s["completion_tokens"] == (251 if drafting else 255) and s["max_tokens"] == 256
    effective = json.loads((FIX / "exl3-run2" / "run.json").read_text())["arm_records"]["ngram"][0]["effective"]
    assert effective["max_seq_len"] == 4096 and effective["total_slots"] == 1 and effective["draft"] is None


# -- acceptance from usage (theroyallab/tabbyAPI PR #452), the log line as its second witness -----------------
def replay_with_usage(label: str, **details: int) -> httpx.Client:
    """The captured stream of ``fp16-<label>`` (TabbyAPI e632af4, before PR #452) with its final usage extended
    the way that change reports a request's draft counts: ``completion_tokens_details.accepted_prediction_tokens``
    and ``rejected_prediction_tokens``. Every other byte is the capture's."""
    out = []
    for line in (FIX / f"fp16-{label}" / "chat_stream_min_tokens.sse").read_text().splitlines():
        if line.startswith("data: {") and '"usage"' in line:
            chunk = json.loads(line[6:])
            chunk["usage"]["completion_tokens_details"] = details
            line = "data: " + json.dumps(chunk)
        out.append(line)
    raw = ("\n".join(out) + "\n").encode()
    return mock_server({"/v1/chat/completions": httpx.Response(200, content=iter(split_events(raw)),
                                                              headers={"content-type": "text/event-stream"})})


def measured(tmp_path: Path, tabby: Path, http: httpx.Client, log: str) -> tuple[ServerStats, Sample]:
    """One request the way ArmRun makes it: the replayed stream, the adapter's stats, the one Sample."""
    result = stream_chat(http, {"stream": True}, 30)
    adapter = ExllamaAdapter()
    stats = adapter.reader.server_stats(http, result.final, None, EngineLog(log))
    a = arm(tmp_path, tabby, speculative={"method": "ngram"})
    sample = make_sample(a, adapter, result, stats, "r", "code_python", "greedy", 0, 0, None, 0.0)
    return stats, sample


@pytest.mark.parametrize(("label", "accepted", "rejected"), [("ngram", 19, 15), ("draft-self", 47, 0)])
def test_usage_draft_counts_come_first_and_the_log_line_agrees(tmp_path: Path, tabby: Path, label: str,
                                                               accepted: int, rejected: int) -> None:
    log = (FIX / f"fp16-{label}" / "engine.log").read_text()  # Draft: 19 / 34 and 47 / 47, the real lines
    with replay_with_usage(label, accepted_prediction_tokens=accepted, rejected_prediction_tokens=rejected) as http:
        stats, sample = measured(tmp_path, tabby, http, log)
    assert (stats.accepted, stats.drafted) == (accepted, accepted + rejected)
    assert stats.source == sample.acceptance_source == \
        "usage: completion_tokens_details accepted/rejected_prediction_tokens"
    assert not [f for f in sample.flags if "mismatch" in f or "crosscheck" in f or "counter-invariant" in f]
    assert sample.acceptance == pytest.approx(accepted / (accepted + rejected))


def test_usage_and_log_that_disagree_are_flagged_with_both_counts(tmp_path: Path, tabby: Path) -> None:
    log = (FIX / "fp16-ngram" / "engine.log").read_text()
    with replay_with_usage("ngram", accepted_prediction_tokens=30, rejected_prediction_tokens=4) as http:
        stats, sample = measured(tmp_path, tabby, http, log)
    assert (stats.accepted, stats.drafted) == (30, 34)  # usage stands; the flag keeps the sample out of statistics
    assert "acceptance-log-mismatch: log 19/34 vs usage 30/34 (accepted/drafted)" in sample.flags


def test_usage_accepting_every_token_breaks_accepted_le_completion_minus_one(tmp_path: Path, tabby: Path) -> None:
    """mlx-vlm PR #2324's shape on TabbyAPI's fields: 59 accepted drafts in a 59-token answer (the first token is
    never a draft's)."""
    log = (FIX / "fp16-draft-self" / "engine.log").read_text()
    with replay_with_usage("draft-self", accepted_prediction_tokens=59, rejected_prediction_tokens=0) as http:
        _, sample = measured(tmp_path, tabby, http, log)
    assert "counter-invariant: accepted 59 > completion_tokens 59 - 1" in sample.flags
    assert "acceptance-log-mismatch: log 47/47 vs usage 59/59 (accepted/drafted)" in sample.flags
    assert "counter-invariant" in EXCLUDING_FLAGS


def test_a_log_line_accepting_more_than_it_drafted_breaks_accepted_le_drafted(tmp_path: Path, tabby: Path) -> None:
    """An older TabbyAPI (no draft counts in usage): the log line is the source, and the invariant still holds it."""
    log = (FIX / "fp16-draft-self" / "engine.log").read_text().replace("Draft: 47 / 47", "Draft: 52 / 47")
    with sse_client("fp16-draft-self/chat_stream_min_tokens.sse") as http:
        stats, sample = measured(tmp_path, tabby, http, log)
    assert stats.source == "log: Draft: A / D tokens accepted" and (stats.accepted, stats.drafted) == (52, 47)
    assert "counter-invariant: accepted 52 > drafted 47" in sample.flags


def test_usage_draft_counts_without_a_log_line_stand_unwitnessed_and_say_so(tmp_path: Path, tabby: Path) -> None:
    with replay_with_usage("ngram", accepted_prediction_tokens=19, rejected_prediction_tokens=15) as http:
        stats, _ = measured(tmp_path, tabby, http, "")
    assert (stats.accepted, stats.drafted) == (19, 34) and "metrics-log-missing" in stats.flags
    assert "acceptance-crosscheck-missing: no Metrics log line for this request" in stats.flags


def test_garbage_draft_counts_in_usage_are_flagged_and_the_log_stands(tmp_path: Path, tabby: Path) -> None:
    log = (FIX / "fp16-ngram" / "engine.log").read_text()
    with replay_with_usage("ngram", accepted_prediction_tokens=-3, rejected_prediction_tokens=15) as http:
        stats, _ = measured(tmp_path, tabby, http, log)
    assert (stats.accepted, stats.drafted) == (19, 34) and stats.source == "log: Draft: A / D tokens accepted"
    assert any(f.startswith("bad-engine-value: usage.completion_tokens_details.accepted_prediction_tokens")
               for f in stats.flags)


# -- agent sessions and structured outputs (issue 41 item 8) ---------------------------------------------------

def test_sessions_need_no_switch_and_read_the_cached_count_from_the_captured_metrics_line(tmp_path: Path,
                                                                                          tabby: Path) -> None:
    """TabbyAPI reuses cached pages with no switch: a session turn sends nothing extra and launches as it is; the
    captured repeat's Metrics line gives the turn's cached prompt tokens, the sample's cache figure."""
    adapter, a = ExllamaAdapter(), arm(tmp_path, tabby, settings={"ctx": 4096})
    assert adapter.prefix_cache.request_fields(a) == {} and adapter.prefix_cache.launch(a) == a
    assert adapter.prefix_cache.problem(a) is None
    small = arm(tmp_path, tabby, settings={"ctx": 4096},
                options={"tabby_dir": str(tabby), "python": "/opt/py/bin/python3", "cache_size": 2048})
    assert "cache_size 2048 is smaller than settings.ctx 4096" in (adapter.prefix_cache.problem(small) or "")
    with sse_client("fp16-spec-off/chat_stream_min_tokens_repeat.sse") as http:
        result = stream_chat(http, {"stream": True}, 30)
        log = EngineLog((FIX / "fp16-spec-off" / "engine.log").read_text())
        stats = adapter.reader.server_stats(http, result.final, None, log, arm=a)
    sample = make_sample(a, adapter, result, stats, "r", "session/t1", "greedy", 0, 0, None, 0.0)
    assert (sample.cached_tokens, sample.prompt_tokens) == (43, 44)  # usage's prompt, the log's cached part
    assert cache_flags(sample, floor=40) == []  # all of a 40-token previous prompt reused: no miss
    assert cache_flags(sample, floor=44)[0].startswith("cache-miss: 43 of 44")  # one token re-prefilled


def test_structured_json_schema_is_taken_and_tool_calls_need_the_models_tool_format(tmp_path: Path,
                                                                                     tabby: Path) -> None:
    adapter, plain = ExllamaAdapter(), arm(tmp_path, tabby)
    assert adapter.structured.kinds == ("json_schema", "tool_call")
    check_structured(adapter, plain, ["json_schema"])
    with pytest.raises(CapabilityNotSupported, match=r"model.tool_format"):
        check_structured(adapter, plain, ["json_schema", "tool_call"])
    tools = arm(tmp_path, tabby, options={"tabby_dir": str(tabby), "python": "/opt/py/bin/python3",
                                          "config": {"model": {"tool_format": "qwen3_coder"}}})
    check_structured(adapter, tools, ["tool_call"])
    assert config_of(tools)["model"]["tool_format"] == "qwen3_coder"  # what config.yml tells TabbyAPI
    check_structured(adapter, Arm(name="u", engine="exllama", url="http://127.0.0.1:1"), ["tool_call"])


def test_a_structured_request_is_sent_in_openais_shape_that_tabbyapi_unwraps() -> None:
    """TabbyAPI (e632af4, router.py) takes response_format json_schema as the schema and its grammar handler
    unwraps OpenAI's {name, schema}: bakeoff sends the prompt's response_format unchanged, and no engine field
    replaces it."""
    from bakeoff.core.config.schema import Prompt, SamplingMode
    from bakeoff.core.measure.definitions import build_request

    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}
    prompt = Prompt.model_validate({"name": "p", "kind": "code", "messages": [{"role": "user", "content": "x"}],
                                    "response_format": schema})
    a = Arm(name="a", engine="exllama", model="m")
    body = build_request(a, ExllamaAdapter(), Workload(), prompt, SamplingMode(temperature=0.0), "m")
    assert body["response_format"] == schema and "json_schema" not in body
