"""The SGLang plugin: launch specs, compose services, read-back, parsers and failure classification.

SGLang cannot run here (no GPU); the fixtures in tests/fixtures/sglang are synthesized from the
documented shapes (see their README), not captured.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from bakeoff.core import (
    Arm,
    CapabilityNotSupported,
    ConfigError,
    EngineAdapter,
    EngineLog,
    EngineUnavailable,
    PreflightError,
    Workload,
    build_launch,
    compose_service,
    read_effective,
    resolve_launch,
)
from bakeoff.core.analysis.acceptance import acceptance_detail
from bakeoff.core.engine.checks import check_arm_capabilities
from bakeoff.core.engine.compose import build_project
from bakeoff.core.measure.definitions import request_fields
from bakeoff_sglang import adapter as sglang_module
from bakeoff_sglang.adapter import (
    IMAGE,
    SglangAdapter,
    SglangOptions,
    estimate_from_log,
    parse_decode_lines,
    parse_meta_info,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def make_arm(tmp_path: Path, **kw: Any) -> Arm:
    model = tmp_path / "Qwen3-8B"
    model.mkdir(exist_ok=True)
    data: dict[str, Any] = {"name": "s", "engine": "sglang", "model": str(model),
                            "options": {"python": "/opt/sglang/bin/python"}}
    data.update(kw)
    return Arm.model_validate(data)


def argv(tmp_path: Path, **kw: Any) -> list[str]:
    return build_launch(SglangAdapter(), make_arm(tmp_path, **kw), 31000, tmp_path).argv


def after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _service(adapter: EngineAdapter, arm: Arm, port: int) -> dict[str, Any]:
    """The arm's compose service, with the models resolved by core as a run resolves them."""
    return compose_service(adapter, arm, resolve_launch(adapter, arm, port, Path("/nonexistent")))


# -- the plugin is built on the public API only ----------------------------------------------


def test_plugin_imports_only_bakeoff_core_public_names() -> None:
    import bakeoff.core

    tree = ast.parse(Path(sglang_module.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bakeoff"):
            assert node.module == "bakeoff.core", f"plugin imports {node.module}"
            assert {a.name for a in node.names} <= set(bakeoff.core.__all__)
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("bakeoff") for a in node.names)


def test_entry_point_is_declared_in_the_plugin_package() -> None:
    import tomllib

    meta = tomllib.loads((Path(sglang_module.__file__).parents[2] / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["bakeoff.engines"] == {"sglang": "bakeoff_sglang.adapter:SglangAdapter"}


# -- launch specs ----------------------------------------------------------------------------
def test_plain_launch(tmp_path: Path) -> None:
    args = argv(tmp_path)
    assert args[:3] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
    assert after(args, "--model-path") == str(tmp_path / "Qwen3-8B")
    assert after(args, "--host") == "127.0.0.1" and after(args, "--port") == "31000"
    assert "--enable-metrics" in args and "--disable-radix-cache" in args
    assert after(args, "--decode-log-interval") == "10"
    assert not any(a.startswith("--speculative") for a in args)


def test_mtp_is_nextn_with_a_chain_of_n_max_drafts(tmp_path: Path) -> None:
    args = argv(tmp_path, speculative={"method": "mtp", "n_max": 3})
    assert after(args, "--speculative-algorithm") == "NEXTN"
    assert after(args, "--speculative-num-steps") == "3"
    assert after(args, "--speculative-eagle-topk") == "1"
    assert after(args, "--speculative-num-draft-tokens") == "4"  # the verified root counts
    assert "--speculative-draft-model-path" not in args


@pytest.mark.parametrize(("method", "algorithm"), [("eagle3", "EAGLE3"), ("draft", "STANDALONE")])
def test_draft_model_methods(tmp_path: Path, method: str, algorithm: str) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    args = argv(tmp_path, speculative={"method": method, "draft_model": str(draft), "n_max": 5})
    assert after(args, "--speculative-algorithm") == algorithm
    assert after(args, "--speculative-draft-model-path") == str(draft)
    assert after(args, "--speculative-num-steps") == "5" and after(args, "--speculative-num-draft-tokens") == "6"


def test_hub_ids_pass_through(tmp_path: Path) -> None:
    args = argv(tmp_path, model="Qwen/Qwen3-8B",
                speculative={"method": "eagle3", "draft_model": "Tengyunw/qwen3_8b_eagle3"})
    assert after(args, "--model-path") == "Qwen/Qwen3-8B"
    assert after(args, "--speculative-draft-model-path") == "Tengyunw/qwen3_8b_eagle3"
    assert "--speculative-num-steps" not in args, "no knob set: SGLang picks its own defaults"


@pytest.mark.parametrize(("method", "extra"), [("ngram", {}), ("dflash", {"draft_model": "z-lab/Qwen3-8B-DFlash"})])
def test_block_methods_take_only_the_draft_token_count(tmp_path: Path, method: str, extra: dict[str, Any]) -> None:
    args = argv(tmp_path, speculative={"method": method, "n_max": 15, **extra})
    assert after(args, "--speculative-algorithm") == method.upper()
    assert after(args, "--speculative-num-draft-tokens") == "16"
    assert "--speculative-num-steps" not in args and "--speculative-eagle-topk" not in args


def test_tree_drafting_through_options(tmp_path: Path) -> None:
    args = argv(tmp_path, speculative={"method": "mtp", "n_max": 3},
                options={"python": "/opt/sglang/bin/python", "eagle_topk": 4, "num_draft_tokens": 8})
    assert after(args, "--speculative-eagle-topk") == "4" and after(args, "--speculative-num-draft-tokens") == "8"


def test_settings_map_to_sglang_flags(tmp_path: Path) -> None:
    args = argv(tmp_path, settings={"ctx": 8192, "parallel": 1, "tensor_parallel": 2, "kv_type": "fp8_e5m2",
                                    "dtype": "bfloat16", "gpu_memory_utilization": 0.8, "enforce_eager": True},
                options={"python": "/opt/sglang/bin/python", "radix_cache": True}, extra_args=["--log-level", "info"])
    assert after(args, "--context-length") == "8192" and after(args, "--max-running-requests") == "1"
    assert after(args, "--tp-size") == "2" and after(args, "--kv-cache-dtype") == "fp8_e5m2"
    assert after(args, "--dtype") == "bfloat16" and after(args, "--mem-fraction-static") == "0.8"
    assert "--disable-cuda-graph" in args and "--disable-radix-cache" not in args
    assert args[-2:] == ["--log-level", "info"]


def test_knobs_sglang_lacks_are_refused_before_launch(tmp_path: Path) -> None:
    adapter = SglangAdapter()
    for kw, what in (({"speculative": {"method": "mtp", "p_min": 0.5}}, "p_min"),
                     ({"settings": {"threads": 4}}, "threads"),
                     ({"speculative": {"method": "dspark", "draft_model": "x"}}, "dspark")):
        with pytest.raises(CapabilityNotSupported, match=what):
            check_arm_capabilities(adapter, make_arm(tmp_path, **kw))


@pytest.mark.parametrize(("kw", "match"), [
    ({"speculative": {"method": "eagle3"}}, "sglang method 'eagle3' needs speculative.draft_model"),
    ({"speculative": {"method": "ngram", "draft_model": "x"}}, "draft_model has no effect on sglang method 'ngram'"),
])
def test_draft_rules_are_refused_before_launch(tmp_path: Path, kw: dict[str, Any], match: str) -> None:
    with pytest.raises(CapabilityNotSupported, match=match):
        check_arm_capabilities(SglangAdapter(), make_arm(tmp_path, **kw))


@pytest.mark.parametrize(("kw", "match"), [
    ({"speculative": {"method": "mtp", "n_max": 3}, "options": {"eagle_topk": 4}}, "num_draft_tokens"),
    ({"speculative": {"method": "mtp"}, "options": {"eagle_topk": 2, "num_draft_tokens": 6}}, "set speculative.n_max"),
    ({"speculative": {"method": "ngram"}, "options": {"eagle_topk": 1}}, "eagle_topk applies"),
])
def test_preflight_refuses_arms_that_cannot_work(tmp_path: Path, kw: dict[str, Any], match: str) -> None:
    arm = make_arm(tmp_path, **kw)
    with pytest.raises(PreflightError, match=match):
        SglangAdapter().preflight(arm)


def test_preflight_wants_an_interpreter_with_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EngineUnavailable, match="not found"):
        SglangAdapter().preflight(make_arm(tmp_path, options={"python": str(tmp_path / "no-python")}))
    monkeypatch.delenv("BAKEOFF_SGLANG_PYTHON", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EngineUnavailable, match="sglang is not installed"):
        SglangAdapter().preflight(make_arm(tmp_path, options={}))
    SglangAdapter().preflight(make_arm(tmp_path, launch="compose", options={}))  # the image has it
    monkeypatch.setenv("BAKEOFF_SGLANG_PYTHON", sys.executable + "-elsewhere")
    assert SglangAdapter.installer.python(SglangOptions()) == sys.executable + "-elsewhere"


def test_unknown_option_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"arms\[2\]\.options\.topk"):
        SglangAdapter().options(make_arm(tmp_path, options={"topk": 2}), 2)


# -- compose ---------------------------------------------------------------------------------
def test_compose_service_mounts_local_models_read_only_on_gpus(tmp_path: Path) -> None:
    draft = tmp_path / "eagle3"
    draft.mkdir()
    arm = make_arm(tmp_path, launch="compose", speculative={"method": "eagle3", "draft_model": str(draft), "n_max": 3})
    service = _service(SglangAdapter(), arm, 31000)
    cmd = service["command"]
    assert service["image"] == IMAGE and cmd[:3] == ["python3", "-m", "sglang.launch_server"]
    assert after(cmd, "--model-path") == "/models/0/Qwen3-8B" and after(cmd, "--host") == "0.0.0.0"
    assert after(cmd, "--speculative-draft-model-path") == "/models/1/eagle3"
    assert all(v["read_only"] for v in service["volumes"]) and len(service["volumes"]) == 2
    assert service["ports"][0]["host_ip"] == "127.0.0.1" and service["ports"][0]["published"] == "31000"
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    project = build_project(SglangAdapter(), arm, 31000, "bakeoff-t-s")  # core's stack rules hold
    assert "sglang" in project["services"]


def test_compose_service_reads_hub_models_from_the_cache_offline(tmp_path: Path) -> None:
    arm = make_arm(tmp_path, model="Qwen/Qwen3-8B", launch="compose",
                   options={"hf_cache": str(tmp_path / "hf")})
    service = _service(SglangAdapter(), arm, 31000)
    assert after(service["command"], "--model-path") == "Qwen/Qwen3-8B"
    assert service["volumes"] == [{"type": "bind", "source": str(tmp_path / "hf"),
                                   "target": "/root/.cache/huggingface", "read_only": True}]
    assert service["environment"]["HF_HUB_OFFLINE"] == "1"


# -- read-back ------------------------------------------------------------------------------
def transport(server_info: dict[str, Any] | None, legacy: bool = False) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "Qwen3-8B", "max_model_len": 8192}]})
        if request.url.path == ("/get_server_info" if legacy else "/server_info") and server_info is not None:
            return httpx.Response(200, json=server_info)
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.MockTransport(handle)


def server_info(**changes: Any) -> dict[str, Any]:
    info = json.loads((FIX / "server_info_nextn.json").read_text())
    info.update(changes)
    return dict(info)


def test_effective_settings_match_the_arm(tmp_path: Path) -> None:
    arm = make_arm(tmp_path, speculative={"method": "mtp", "n_max": 3}, settings={"ctx": 8192})
    adapter = SglangAdapter()
    with httpx.Client(base_url="http://sglang", transport=transport(server_info())) as http:
        eff = read_effective(adapter, http, arm)
    assert eff.mismatches == []
    assert eff.version == "0.5.23" and eff.model_id == "Qwen3-8B"
    assert eff.raw["speculative_algorithm"] == "NEXTN" and eff.raw["speculative_num_draft_tokens"] == 4


def test_speculation_silently_off_is_reported(tmp_path: Path) -> None:
    arm = make_arm(tmp_path, speculative={"method": "mtp", "n_max": 3}, settings={"ctx": 4096})
    info = server_info(speculative_algorithm=None, speculative_num_steps=None)
    with httpx.Client(base_url="http://sglang", transport=transport(info, legacy=True)) as http:
        eff = read_effective(SglangAdapter(), http, arm)
    assert any("WITHOUT speculation" in m for m in eff.mismatches)
    assert any("context_length 8192" in m for m in eff.mismatches)


def test_unreadable_server_info_is_a_mismatch(tmp_path: Path) -> None:
    with httpx.Client(base_url="http://sglang", transport=transport(None)) as http:
        eff = read_effective(SglangAdapter(), http, make_arm(tmp_path))
    assert eff.mismatches == ["could not read /server_info"]


# -- per-request numbers ---------------------------------------------------------------------
def test_decode_lines_are_parsed_and_non_speculative_lines_ignored() -> None:
    lines = parse_decode_lines((FIX / "decode_log_nextn.txt").read_text())
    assert [line["accept_len"] for line in lines] == [3.10, 2.80, 3.40, 2.70]
    assert lines[0]["accept_rate"] == 0.70
    assert parse_decode_lines((FIX / "decode_log_nospec.txt").read_text()) == []
    assert parse_decode_lines("[TP0] Decode batch. #running-req: 1, accept len: 1.50, gen throughput") == [
        {"accept_len": 1.5, "accept_rate": None}]


def test_log_estimate_uses_only_the_requests_own_lines_and_counts_steps() -> None:
    """Numbers worked out by hand, not by the estimator's own formula: lines averaging 2.0 and 4.0 tokens per
    verify step give a mean of 3.0, so the 30 tokens after the first took 10 steps, 20 of them accepted
    drafts; with 4 tokens verified per step, 3 were drafted each step."""
    log = ("Decode batch. #running-req: 1, #token: 60, accept len: 2.00, accept rate: 0.33\n"
           "Decode batch. #running-req: 1, #token: 80, accept len: 4.00, accept rate: 1.00\n")
    stats = estimate_from_log(parse_decode_lines(log), completion_tokens=31, draft_tokens=4)
    assert (stats.drafts, stats.accepted, stats.drafted) == (10, 20, 30)
    assert stats.extra["log_accept_rate"] == pytest.approx(0.665)
    assert stats.flags == ["acceptance-estimated: from 2 SGLang decode log line(s), not exact counts"]


def test_impossible_accept_lengths_are_flagged_not_averaged() -> None:
    """No verify step yields fewer than 1 token or more than it verified (draft tokens per step)."""
    lines = [{"accept_len": 0.5, "accept_rate": None}, {"accept_len": 9.0, "accept_rate": None},
             {"accept_len": 3.0, "accept_rate": None}]
    stats = estimate_from_log(lines, completion_tokens=31, draft_tokens=4)
    assert stats.flags[:2] == ["bad-engine-value: decode log accept len 0.5 outside 1..4",
                               "bad-engine-value: decode log accept len 9.0 outside 1..4"]
    assert stats.extra["log_accept_len"] == 3.0 and stats.drafts == 10
    nothing = estimate_from_log(lines[:2], completion_tokens=31, draft_tokens=4)
    assert nothing.drafts is None and nothing.accepted is None


@pytest.mark.parametrize(("meta", "flag"), [
    ({"completion_tokens": "256", "spec_verify_ct": 85}, "bad-engine-value: meta_info.completion_tokens is '256'"),
    ({"completion_tokens": 256, "spec_verify_ct": 300}, "bad-engine-value: meta_info.spec_verify_ct 300 exceeds"),
    ({"completion_tokens": 256, "spec_verify_ct": "x"}, "bad-engine-value: meta_info.spec_verify_ct is 'x'"),
])
def test_garbage_meta_info_becomes_flagged_missing_counts(meta: dict[str, Any], flag: str) -> None:
    stats = parse_meta_info(meta, draft_tokens=4)
    assert stats.drafts is None and stats.accepted is None and stats.drafted is None
    assert any(f.startswith(flag) for f in stats.flags), stats.flags


def test_garbage_server_info_does_not_crash_read_back_or_stats(tmp_path: Path) -> None:
    info = {"speculative_algorithm": "NEXTN", "speculative_num_draft_tokens": "four", "internal_states": {"a": 1},
            "version": 5}
    adapter = SglangAdapter()
    with httpx.Client(base_url="http://sglang", transport=transport(info)) as http:
        eff = read_effective(adapter, http, make_arm(tmp_path, speculative={"method": "mtp"}))
        stats = adapter.reader.server_stats(http, {"usage": {"completion_tokens": 10}}, None, EngineLog(""))
    assert eff.version is None
    assert "bad-engine-value: /server_info speculative_num_draft_tokens is 'four', not a count" in eff.mismatches
    assert stats.flags[-1].startswith("acceptance-unavailable")


def test_meta_info_gives_exact_counts() -> None:
    meta = json.loads((FIX / "generate_meta_info_nextn.json").read_text())["meta_info"]
    stats = parse_meta_info(meta, draft_tokens=4)
    assert (stats.completion_tokens, stats.drafts, stats.accepted, stats.drafted) == (256, 85, 170, 255)
    assert stats.source == "meta_info" and not stats.flags


def test_server_stats_prefers_meta_info_then_the_log_then_the_server_average(tmp_path: Path) -> None:
    adapter = SglangAdapter()
    final = json.loads((FIX / "chat_stream_final_chunk.json").read_text())
    log = (FIX / "decode_log_nextn.txt").read_text()
    with httpx.Client(base_url="http://sglang", transport=transport(server_info())) as http:
        read_effective(adapter, http, make_arm(tmp_path, speculative={"method": "mtp", "n_max": 3}))
        meta = json.loads((FIX / "generate_meta_info_nextn.json").read_text())["meta_info"]
        with_meta = adapter.reader.server_stats(http, {**final, "meta_info": meta}, None, EngineLog(log))
        assert with_meta.source == "meta_info"
        from_log = adapter.reader.server_stats(http, final, None, EngineLog(log))
        assert from_log.drafted == 255 and from_log.source and "estimate" in from_log.source
        attached = adapter.reader.server_stats(http, final, None, EngineLog(""))
    assert attached.drafted is None and attached.extra["server_avg_accept_length"] == 2.91
    assert attached.flags[0].startswith("acceptance-unavailable")


def test_no_speculation_no_acceptance_flags(tmp_path: Path) -> None:
    adapter = SglangAdapter()
    final = json.loads((FIX / "chat_stream_final_chunk.json").read_text())
    with httpx.Client(base_url="http://sglang", transport=transport(server_info(speculative_algorithm=None))) as http:
        read_effective(adapter, http, make_arm(tmp_path))
        stats = adapter.reader.server_stats(http, final, None, EngineLog((FIX / "decode_log_nospec.txt").read_text()))
    assert stats.drafted is None and stats.flags == []


def test_request_fields() -> None:
    """SGLang has no request field of its own: thinking and fixed length come from core, as declared."""
    a = Arm(name="s", engine="sglang", model="m")
    assert SglangAdapter().request_fields(a, Workload()) == {}
    fields = request_fields(a, SglangAdapter(), Workload(thinking=False), 64)
    assert fields == {"chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True}
    assert "ignore_eos" not in request_fields(a, SglangAdapter(), Workload(fixed_length=False), 64)
    options = SglangAdapter().reader.stream_options(SglangAdapter.capabilities.token_counts)
    assert options == {"include_usage": True, "continuous_usage_stats": True}


@pytest.mark.parametrize(("fixture", "reason"), [("startup_oom.log", "out-of-memory"),
                                                 ("startup_unknown_flag.log", "unknown-flag")])
def test_startup_failures_are_classified_quoting_the_line(fixture: str, reason: str) -> None:
    err = SglangAdapter().classify_startup_failure((FIX / fixture).read_text())
    assert err is not None and err.reason == reason
    assert err.log_line and err.log_line in (FIX / fixture).read_text()
    assert SglangAdapter().classify_startup_failure("[2026] The server is fired up and ready to roll!") is None


def test_the_readmes_say_the_plugin_has_never_run_against_sglang() -> None:
    """AUDIT M6: the user-facing docs called it "a complete example" without saying it has never run."""
    root = Path(__file__).resolve().parents[3]
    plugin_readme = (root / "plugins" / "bakeoff-sglang" / "README.md").read_text()
    project_readme = " ".join((root / "README.md").read_text().split())
    assert "never launched or measured a real SGLang server" in " ".join(plugin_readme.split())
    assert "has never run against a real SGLang server" in project_readme


def _acceptance(stats: Any) -> Any:
    return acceptance_detail(stats.drafted, stats.accepted, stats.drafts, stats.accepted_per_position,
                             stats.accepted_histogram, stats.unavailable, stats.derived)


# -- SGLang: meta_info ----------------------------------------------------------------------------------
def test_sglang_meta_info_steps_and_derived_accepted() -> None:
    meta = json.loads((FIX / "generate_meta_info_nextn.json").read_text())["meta_info"]
    stats = parse_meta_info(meta, draft_tokens=4)
    d = _acceptance(stats)
    assert (d.drafts, d.accepted, d.drafted) == (85, 170, 255)
    assert d.mean_accepted_len == pytest.approx(3.0)
    assert "spec_verify_ct" in d.acceptance_derived["accepted"]
    assert d.accepted_histogram is None and "spec_accept_histogram" in d.acceptance_unavailable["accepted_histogram"]
    # newer SGLang: steps by accepted drafts; checked against the 85 steps and 170 accepted tokens
    d = _acceptance(parse_meta_info({**meta, "spec_accept_histogram": [10, 10, 35, 30]}, draft_tokens=4))
    assert d.accepted_histogram == [10, 10, 35, 30] and d.flags == []
    assert d.accepted_per_position == [75, 65, 30]
    d = _acceptance(parse_meta_info({**meta, "spec_accept_histogram": [0, 85]}, draft_tokens=4))  # indexed by length?
    assert d.flags == ["acceptance-histogram-mismatch: engine histogram accepts 85 tokens, accepted 170"]
