"""Issue 33: bakeoff files that crashed or failed only after an engine was launched are
refused when they are read, with the file, the line and the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.engines.llamacpp.build import build_info

ARM = "arms:\n  - {name: a, engine: sim, model: x}\n"


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_bakeoff(text, "b.yaml")
    return str(info.value)


# -- a lone surrogate cannot be stored (UTF-8) -----------------------------------------------------------
@pytest.mark.parametrize("text, line", [
    ('name: "run \\uDC80"\n' + ARM, 1),
    (ARM + 'workload:\n  suite: [{name: "\\uD800x", messages: [{role: user, content: hi}]}]\n', 4),
    (ARM.replace("model: x", 'model: x, options: {"\\uD800": 1}'), 2),
])
def test_a_lone_surrogate_is_refused_with_its_line(text: str, line: int) -> None:
    msg = refused(text)
    assert f"b.yaml:{line}:" in msg and "surrogate" in msg, msg


def test_a_surrogate_pair_is_one_character_and_fine() -> None:
    assert parse_bakeoff('name: "run \\uD83D\\uDE00"\n' + ARM).name == "run \U0001F600"


# -- nesting deeper than Python's stack ------------------------------------------------------------------
@pytest.mark.parametrize("depth", [600, 5000])
def test_deep_nesting_is_a_config_error_not_a_recursion_error(depth: int) -> None:
    msg = refused(ARM.replace("model: x", "model: x, options: {x: " + "[" * depth + "]" * depth + "}"))
    assert "b.yaml:2:" in msg and "nested more than 100 levels" in msg, msg


def test_deep_nesting_at_the_top_is_refused_too() -> None:
    assert "nested more than" in refused("arms: " + "[" * 600 + "]" * 600 + "\n")


def test_ordinary_nesting_is_fine() -> None:
    config = parse_bakeoff(ARM.replace("model: x", "model: x, options: {x: " + "[" * 20 + "]" * 20 + "}"))
    assert config.arms[0].name == "a"


# -- values that used to fail only at launch or request time ---------------------------------------------
@pytest.mark.parametrize("mode, field", [
    ("{temperature: .nan}", "temperature"),
    ("{temperature: .inf}", "temperature"),
    ("{temperature: -1}", "temperature"),
    ("{top_p: .nan}", "top_p"),
    ("{top_p: 1.5}", "top_p"),
    ("{top_k: -2}", "top_k"),
])
def test_an_unusable_sampling_value_is_refused_naming_the_field(mode: str, field: str) -> None:
    msg = refused(ARM + f"workload: {{modes: [weird], sampling: {{weird: {mode}}}}}\n")
    assert f"workload.sampling.weird.{field}" in msg and "b.yaml:" in msg, msg


def test_no_float_of_a_bakeoff_file_takes_nan() -> None:
    msg = refused(ARM.replace("model: x", "model: x, speculative: {method: ngram, p_min: .nan}"))
    assert "arms[0].speculative.p_min" in msg, msg


@pytest.mark.parametrize("host", ["'::1'", "no-such-host.invalid", "''"])
def test_a_host_the_engine_cannot_bind_is_refused_before_launch(host: str) -> None:
    msg = refused(ARM.replace("model: x", f"model: x, settings: {{host: {host}}}"))
    assert "b.yaml:2: arms[0].settings.host" in msg and "IPv4 address" in msg, msg


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "0.0.0.0", "localhost"])
def test_bindable_hosts_pass(host: str) -> None:
    assert parse_bakeoff(ARM.replace("model: x", f"model: x, settings: {{host: '{host}'}}")).arms[0].settings.host \
        == host


def test_sampling_defaults_still_pass() -> None:
    config = parse_bakeoff(ARM + "workload: {modes: [greedy, sampled, cold], "
                                 "sampling: {cold: {temperature: 0, top_k: -1, top_p: 1}}}\n")
    assert config.workload.modes == ["greedy", "sampled", "cold"]


@pytest.mark.parametrize("content", ["[1, 2, 3]", "[[\"backend\", \"cuda\"]]", "\"cpu\"", "null"])
def test_a_build_json_that_is_not_an_object_is_ignored(tmp_path: Path, content: str) -> None:
    (tmp_path / "bin").mkdir()
    binary = tmp_path / "bin" / "llama-server"
    binary.write_text("#!/bin/sh\n")
    (tmp_path / "BUILD.json").write_text(content)
    (tmp_path / "bin" / "libggml-cpu.so").write_text("")
    assert build_info(binary)["backend"] == "cpu"  # what the directory shows, as with no BUILD.json


def test_a_build_json_object_is_read(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    (tmp_path / "BUILD.json").write_text(json.dumps({"backend": "cuda", "commit": "abc"}))
    assert build_info(binary) == {"backend": "cuda", "commit": "abc"}
