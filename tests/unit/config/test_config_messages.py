"""Messages a newcomer gets from a wrong bakeoff file (issue 32): "did you mean" for keys, engines, prompts and
arms; YAML syntax errors as file:line:column; an engine's ``options:`` errors with their line; and relative
model paths read from the file's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.core.common.errors import ConfigError, UnknownEngineError
from bakeoff.core.config.loader import load_bakeoff, parse_bakeoff
from bakeoff.core.engine.registry import load_engine


def refused(text: str, tmp_path: Path) -> str:
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        config = load_bakeoff(path)
        for i, arm in enumerate(config.arms):
            load_engine(arm.engine).options(arm, i)
    return str(err.value).replace(str(tmp_path) + "/", "")


ARM = "arms:\n  - {name: base, engine: sim, model: x}\n"


def test_a_mistyped_key_suggests_the_field(tmp_path: Path) -> None:
    assert refused(ARM + "workload: {max_token: 8}\n", tmp_path) == (
        "b.yaml:3: workload.max_token: unknown key (not a field here; check the spelling); did you mean 'max_tokens'?")
    assert "did you mean 'settings'?" in refused("arms:\n  - {name: a, engine: sim, model: x, setings: {}}\n",
                                                 tmp_path)


def test_a_mistyped_prompt_suggests_the_prompt_with_its_line(tmp_path: Path) -> None:
    msg = refused(ARM + "workload:\n  prompts: [python_code]\n", tmp_path)
    assert msg.startswith("b.yaml:4: workload.prompts: python_code not in the suite")
    assert msg.endswith("did you mean 'code_python'?")


def test_a_baseline_that_names_no_arm_suggests_one_on_its_own_line(tmp_path: Path) -> None:
    msg = refused(ARM + "  - {name: fast, engine: sim, model: x}\nworkload: {}\nbaseline: bsae\n", tmp_path)
    assert msg == ("b.yaml:5: baseline: 'bsae' is not an arm name (arms: base, fast); did you mean 'base'?")


def test_engine_names_suggest_the_registered_one_or_the_plugin_to_install() -> None:
    with pytest.raises(UnknownEngineError, match=r"unknown engine 'llama\.cpp'; did you mean 'llamacpp'\?"):
        load_engine("llama.cpp")
    with pytest.raises(UnknownEngineError, match=r"unknown engine 'vLLM'; did you mean 'vllm'\?"):
        load_engine("vLLM")


def test_an_engine_option_error_names_its_line_and_suggests(tmp_path: Path) -> None:
    text = "name: t\narms:\n  - {name: base, engine: sim, model: x}\n  - name: fast\n    engine: sim\n" \
           "    model: x\n    options: {itl: 5}\n"
    assert refused(text, tmp_path) == ("b.yaml:7: arms[1].options.itl: unknown key (not a field here; check the "
                                       "spelling); did you mean 'itl_ms'?")


@pytest.mark.parametrize("text, where, words", [
    ("name: t\narms:\n  - name: a\n   engine: sim\n", "b.yaml:4:4", "expected <block end>"),
    ("name: t\narms:\n\t- name: a\n", "b.yaml:3:1", "indent with spaces, not tabs"),
])
def test_yaml_syntax_errors_are_file_line_column(tmp_path: Path, text: str, where: str, words: str) -> None:
    msg = refused(text, tmp_path)
    assert msg.startswith(f"{where}: not valid YAML: ") and words in msg
    assert "<unicode string>" not in msg and "\n" not in msg


def test_relative_model_paths_are_read_from_the_files_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "bench"
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "m.gguf").write_bytes(b"GGUF")
    (folder / "d.gguf").write_bytes(b"GGUF")
    (folder / "b.yaml").write_text(
        "arms:\n"
        "  - {name: a, engine: llamacpp, model: ./models/m.gguf}\n"
        "  - {name: b, engine: llamacpp, model: models/m.gguf, speculative: {method: draft, draft_model: d.gguf}}\n"
        "  - {name: c, engine: vllm, model: Qwen/Qwen3-0.6B}\n"
        "  - {name: d, engine: llamacpp, model: smollm2}\n")
    monkeypatch.chdir(tmp_path)  # the file's parent folder, as in the review
    arms = {a.name: a for a in load_bakeoff("bench/b.yaml").arms}
    assert arms["a"].model == arms["b"].model == str(folder / "models" / "m.gguf")
    assert arms["b"].speculative.draft_model == str(folder / "d.gguf")
    assert arms["c"].model == "Qwen/Qwen3-0.6B" and arms["d"].model == "smollm2"  # a hub id, a built-in
    text = (folder / "b.yaml").read_text()
    assert parse_bakeoff(text).arms[0].model == "./models/m.gguf"  # text without a file: left as written
