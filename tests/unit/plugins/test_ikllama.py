"""The ik_llama.cpp plugin: its flag dialect, knobs per method, options, read-back, acceptance and failure
classification. Fixtures in tests/fixtures/ikllama are captured from a real ik_llama.cpp server (see its README).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from bakeoff.core import (
    Arm,
    CapabilityNotSupported,
    EngineLog,
    EngineUnavailable,
    PreflightError,
    Workload,
    build_launch,
    read_effective,
)
from bakeoff.core.engine.checks import check_arm_capabilities
from bakeoff_ikllama import adapter as ik_module
from bakeoff_ikllama import build as ik_build
from bakeoff_ikllama.adapter import (
    KNOB_FLAGS,
    SPECULATIVE,
    SWITCH_OPTIONS,
    VALUE_OPTIONS,
    IkLlamaAdapter,
    IkLlamaOptions,
    parse_acceptance_lines,
    speculation_from_log,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "ikllama"
PLUGIN = Path(ik_module.__file__).parents[2]
KNOB_VALUES = {"n_max": 5, "n_min": 2, "p_min": 0.4, "lookup_min": 7, "lookup_max": 9}


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return path


def make_arm(gguf: Path, **kw: Any) -> Arm:
    data: dict[str, Any] = {"name": "a", "engine": "ikllama", "model": str(gguf),
                            "options": {"binary": "/opt/ik/llama-server"}}
    for key, value in kw.items():
        if key == "options":
            data["options"] = {**data["options"], **value}
        else:
            data[key] = value
    return Arm.model_validate(data)


def argv(gguf: Path, **kw: Any) -> list[str]:
    return build_launch(IkLlamaAdapter(), make_arm(gguf, **kw), 31000, gguf.parent).argv


def spec_of(key: str, gguf: Path, **knobs: Any) -> dict[str, Any]:
    """The speculative block selecting ``key`` ('ngram/mod'); the target file doubles as draft model."""
    method, _, variant = key.partition("/")
    spec: dict[str, Any] = {"method": method, **knobs}
    if variant:
        spec["variant"] = variant
    if SPECULATIVE[key].draft_model == "required":
        spec["draft_model"] = str(gguf)
    return spec


# -- the plugin is built on the public API only ----------------------------------------------
@pytest.mark.parametrize("module", sorted((PLUGIN / "src" / "bakeoff_ikllama").glob("*.py")), ids=lambda p: p.name)
def test_plugin_imports_only_bakeoff_core_public_names(module: Path) -> None:
    import bakeoff.core

    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bakeoff"):
            assert node.module == "bakeoff.core", f"{module.name} imports {node.module}"
            private = {a.name for a in node.names} - set(bakeoff.core.__all__)
            assert not private, f"{module.name} imports {private} from bakeoff.core, which does not export them"
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("bakeoff") for a in node.names), module.name


def test_entry_point_is_declared_in_the_plugin_package() -> None:
    import tomllib

    meta = tomllib.loads((PLUGIN / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["bakeoff.engines"] == {"ikllama": "bakeoff_ikllama.adapter:IkLlamaAdapter"}


# -- the dialect -----------------------------------------------------------------------------
def test_the_fork_runs_in_the_arm_directory_where_it_writes_its_llama_log(gguf: Path) -> None:
    assert build_launch(IkLlamaAdapter(), make_arm(gguf), 31000, gguf.parent).cwd == gguf.parent


def test_the_gguf_chat_template_is_applied_as_llamacpp_does(gguf: Path) -> None:
    assert "--jinja" in argv(gguf)


def test_speculation_off_is_explicit(gguf: Path) -> None:
    args = argv(gguf)
    assert args[args.index("--spec-type") + 1] == "none" and "-no-mtp" in args
    assert "-md" not in args and "-mtp" not in args


def test_ngram_names_the_fork_spec_type_and_defaults_to_mod(gguf: Path) -> None:
    assert "ngram-mod" in argv(gguf, speculative={"method": "ngram"})
    for variant in ("simple", "map-k", "map-k4v", "cache"):
        args = argv(gguf, speculative={"method": "ngram", "variant": variant})
        assert args[args.index("--spec-type") + 1] == f"ngram-{variant}"


def test_draft_loads_the_draft_model_without_a_spec_type(gguf: Path, tmp_path: Path) -> None:
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    args = argv(gguf, speculative={"method": "draft", "draft_model": str(draft), "n_max": 3})
    assert args[args.index("-md") + 1] == str(draft)
    assert "--spec-type" not in args, "a --spec-type n-gram kind would run before the draft model"
    assert args[args.index("--draft-max") + 1] == "3"


def test_mtp_is_the_forks_own_switch(gguf: Path) -> None:
    args = argv(gguf, speculative={"method": "mtp"})
    assert "-mtp" in args and "--spec-type" not in args and "-md" not in args


@pytest.mark.parametrize("key", sorted(SPECULATIVE))
def test_every_declared_knob_changes_the_command_line(gguf: Path, key: str) -> None:
    base = argv(gguf, speculative=spec_of(key, gguf))
    for knob in SPECULATIVE[key].knobs:
        arm = make_arm(gguf, speculative=spec_of(key, gguf, **{knob: KNOB_VALUES[knob]}))
        check_arm_capabilities(IkLlamaAdapter(), arm)
        args = build_launch(IkLlamaAdapter(), arm, 31000, gguf.parent).argv
        assert args != base, f"{knob} on {key} changes nothing"
        flag = KNOB_FLAGS[knob]
        assert args[args.index(flag) + 1] == str(KNOB_VALUES[knob]), (key, knob)


def test_a_draft_arm_without_a_draft_model_and_an_unknown_variant_are_refused(gguf: Path) -> None:
    with pytest.raises(CapabilityNotSupported, match="draft_model"):
        check_arm_capabilities(IkLlamaAdapter(), make_arm(gguf, speculative={"method": "draft"}))
    with pytest.raises(CapabilityNotSupported, match="variant"):
        check_arm_capabilities(IkLlamaAdapter(), make_arm(gguf, speculative={"method": "ngram", "variant": "x"}))
    with pytest.raises(CapabilityNotSupported, match="dflash"):
        check_arm_capabilities(IkLlamaAdapter(), make_arm(gguf, speculative={"method": "dflash",
                                                                            "draft_model": str(gguf)}))


def test_settings_map_to_the_same_flags_as_llamacpp(gguf: Path) -> None:
    args = argv(gguf, settings={"ctx": 2048, "parallel": 2, "threads": 3, "kv_type": "q8_0", "flash_attn": "on",
                                "batch": 512, "ubatch": 128, "split": "layer", "tensor_split": [1, 2]})
    # -c is the whole context: 2048 per slot x 2 slots
    pairs = {"-c": "4096", "-np": "2", "-t": "3", "-ctk": "q8_0", "-ctv": "q8_0", "-fa": "on", "-b": "512",
             "-ub": "128", "-sm": "layer", "-ts": "1,2"}
    for flag, value in pairs.items():
        assert args[args.index(flag) + 1] == value, flag


def test_a_split_mode_the_fork_lacks_is_refused(gguf: Path) -> None:
    with pytest.raises(CapabilityNotSupported, match="split"):
        check_arm_capabilities(IkLlamaAdapter(), make_arm(gguf, settings={"split": "row"}))


# -- fork-only options -------------------------------------------------------------------------
OPTION_VALUES: dict[str, Any] = {"split_mode": "graph", "max_gpu": 2, "threads_batch": 4, "mla": 2,
                                 "attention_max_batch": 512, "smart_expert_reduction": "6,1",
                                 "ngram_size_m": 8, "ngram_min_hits": 2, "draft_gpu_layers": 0, "verbosity": 2}


@pytest.mark.parametrize("field,flag", [*VALUE_OPTIONS, *SWITCH_OPTIONS])
def test_every_option_changes_the_command_line(gguf: Path, field: str, flag: str) -> None:
    value = OPTION_VALUES.get(field, True)
    options = IkLlamaOptions(binary="/opt/ik/llama-server", **{field: value})
    args = IkLlamaAdapter.option_args(options)
    assert flag in args and args != IkLlamaAdapter.option_args(IkLlamaOptions())
    if value is not True:
        assert args[args.index(flag) + 1] == str(value)


def test_every_option_field_has_a_flag() -> None:
    mapped = {f for f, _ in VALUE_OPTIONS} | {f for f, _ in SWITCH_OPTIONS} | {"kind", "binary", "build_version"}
    assert set(IkLlamaOptions.model_fields) == mapped


@pytest.mark.parametrize("options,spec,message", [
    ({"max_gpu": 2}, {}, "split_mode 'graph'"),
    ({"graph_scheduling": True, "split_mode": "layer"}, {}, "split_mode 'graph'"),
    ({"ngram_size_m": 8}, {"method": "ngram", "variant": "mod"}, "ngram_size_m"),
    ({"ngram_min_hits": 2}, {"method": "ngram", "variant": "simple"}, "ngram_min_hits"),
    ({"draft_gpu_layers": 0}, {"method": "ngram"}, "draft_gpu_layers"),
])
def test_an_option_that_would_be_ignored_is_refused_before_launch(gguf: Path, options: dict[str, Any],
                                                                  spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PreflightError, match=message):
        IkLlamaAdapter().preflight(make_arm(gguf, options=options, speculative=spec or {"method": "none"}))


def test_the_split_mode_is_set_once(gguf: Path) -> None:
    with pytest.raises(PreflightError, match="split mode once"):
        IkLlamaAdapter().preflight(make_arm(gguf, options={"split_mode": "graph"}, settings={"split": "layer"}))


def test_unknown_options_are_refused(gguf: Path) -> None:
    from bakeoff.core import ConfigError

    with pytest.raises(ConfigError, match="fused_moe"):
        IkLlamaAdapter().options(make_arm(gguf, options={"fused_moe": True}))


def tiny_gguf(path: Path, nextn: int | None) -> Path:
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "qwen3")
    if nextn is not None:
        writer.add_uint32("qwen3.nextn_predict_layers", nextn)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_mtp_needs_nextn_layers_in_the_gguf(tmp_path: Path) -> None:
    plain = make_arm(tiny_gguf(tmp_path / "plain.gguf", None), speculative={"method": "mtp"})
    with pytest.raises(PreflightError, match=r"MTP .*NextN.* plain\.gguf has none"):
        IkLlamaAdapter().preflight(plain)
    IkLlamaAdapter().preflight(make_arm(tiny_gguf(tmp_path / "mtp.gguf", 1), speculative={"method": "mtp"}))


# -- binary, install -------------------------------------------------------------------------
def test_missing_binary_says_how_to_install(gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("BAKEOFF_IK_LLAMA_SERVER", raising=False)
    with pytest.raises(EngineUnavailable, match="bakeoff engines install ikllama"):
        IkLlamaAdapter.installer.locate(IkLlamaOptions())


def test_installed_names_the_binary_a_run_would_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("BAKEOFF_IK_LLAMA_SERVER", raising=False)
    assert IkLlamaAdapter.installer.installed() is None
    monkeypatch.setenv("BAKEOFF_IK_LLAMA_SERVER", "/opt/ik/bin/llama-server")
    assert IkLlamaAdapter.installer.installed() == "cpu llama-server: /opt/ik/bin/llama-server"


def test_the_build_is_the_server_target_of_the_sdist_cached_by_version_and_backend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path))
    build = ik_build.ik_llama_server_build("0.1.5")
    assert build.sdist_name == "ik_llama_cpp_python-0.1.5.tar.gz"
    assert build.target == "llama-server" and build.source.endswith("vendor/ik_llama.cpp")
    assert build.install_dir.parent == tmp_path / "ik-llama-server"
    assert build.install_dir.name.startswith("0.1.5-cpu-")
    assert any("mno-amx-tile" in flag for flag in build.cmake_flags)


# -- read-back, acceptance, failures (real captures) ------------------------------------------
def replay(routes: dict[str, Any]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        return httpx.Response(200, json=body) if body is not None else httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://127.0.0.1:1")


def fixture_json(name: str) -> Any:
    return json.loads((FIX / name).read_text())


def test_effective_settings_from_props_and_the_startup_log(gguf: Path, tmp_path: Path) -> None:
    adapter = IkLlamaAdapter()
    arm = make_arm(gguf, speculative={"method": "ngram"}, settings={"ctx": 2048})
    startup = EngineLog((FIX / "startup-ngram-mod.log").read_text())  # core hands over the engine's log
    http = replay({"/props": fixture_json("props.json"), "/v1/models": fixture_json("models.json")})
    eff = read_effective(adapter, http, arm, startup)
    assert eff.raw["speculative"] is True and eff.raw["total_slots"] == 1
    assert eff.raw["n_ctx_per_slot"] == fixture_json("props.json")["default_generation_settings"]["n_ctx"]
    assert eff.mismatches == []


def test_speculation_asked_but_not_running_is_a_mismatch(gguf: Path, tmp_path: Path) -> None:
    adapter = IkLlamaAdapter()
    arm = make_arm(gguf, speculative={"method": "ngram"}, settings={"ctx": 2048})
    startup = EngineLog((FIX / "startup-spec-off.log").read_text())
    eff = read_effective(adapter, replay({"/props": fixture_json("props.json")}), arm, startup)
    assert any("WITHOUT speculation" in m for m in eff.mismatches)


def test_the_startup_log_says_whether_speculation_runs() -> None:
    assert speculation_from_log((FIX / "startup-ngram-mod.log").read_text()) is True
    assert speculation_from_log((FIX / "startup-draft.log").read_text()) is True
    assert speculation_from_log((FIX / "startup-spec-off.log").read_text()) is False


def test_acceptance_from_the_final_chunk_timings_agrees_with_the_log_line() -> None:
    final = fixture_json("draft-final-chunk.json")
    log = (FIX / "draft-request.log").read_text()
    stats = IkLlamaAdapter().reader.server_stats(replay({}), final, None, EngineLog(log))
    timings = final["timings"]
    assert stats.drafted == timings["draft_n"] > 0 and stats.accepted == timings["draft_n_accepted"]
    assert stats.completion_tokens == timings["predicted_n"]
    assert stats.decode_tps == pytest.approx((timings["predicted_n"] - 1) / timings["predicted_ms"] * 1000)
    assert stats.flags == []
    line = parse_acceptance_lines(log)[-1]
    assert (line["accepted"], line["generated"]) == (stats.accepted, stats.drafted)


def test_a_log_line_that_disagrees_with_timings_is_flagged() -> None:
    final = fixture_json("draft-final-chunk.json")
    log = (FIX / "draft-request.log").read_text().replace(" accepted /", "1 accepted /", 1)
    stats = IkLlamaAdapter().reader.server_stats(replay({}), final, None, EngineLog(log))
    assert any(f.startswith("acceptance-log-mismatch") for f in stats.flags)


def test_a_request_without_drafts_has_zero_drafted_not_unknown() -> None:
    final = fixture_json("off-final-chunk.json")
    assert "draft_n" not in final["timings"]
    stats = IkLlamaAdapter().reader.server_stats(replay({}), final, None, EngineLog(""))
    assert (stats.drafted, stats.accepted) == (0, 0) and stats.completion_tokens == final["timings"]["predicted_n"]


def test_every_chunk_carries_the_cumulative_token_count() -> None:
    chunks = [json.loads(line) for line in (FIX / "draft-stream.jsonl").read_text().splitlines()]
    counts = [IkLlamaAdapter().reader.chunk_token_count(c) for c in chunks]
    counted = [c for c in counts if isinstance(c, int)]
    assert counted == sorted(counted) and len(counted) >= len(chunks) - 2


@pytest.mark.parametrize("name,reason", [
    ("fail-unknown-flag.log", "unknown-flag"),
    ("fail-bad-spec-type.log", "unknown-flag"),
    ("fail-model-missing.log", "model-load-failed"),
    ("fail-bad-draft.log", "bad-draft-model"),
])
def test_startup_failures_are_classified_from_real_logs(name: str, reason: str) -> None:
    error = IkLlamaAdapter().classify_startup_failure((FIX / name).read_text())
    assert error is not None and error.reason == reason, name
    assert error.log_line and error.log_line in (FIX / name).read_text()


def test_request_fields_ask_for_per_chunk_timings_and_no_prompt_cache(gguf: Path) -> None:
    fields = IkLlamaAdapter().request_fields(make_arm(gguf), Workload())
    assert fields["timings_per_token"] is True and fields["cache_prompt"] is False
