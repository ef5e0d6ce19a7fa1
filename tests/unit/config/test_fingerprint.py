"""The configuration fingerprint (core/config/fingerprint.py, core/engine/fingerprint.py): aliases resolved,
defaults dropped, values normalized, the build and the name left out, and what differs said by key."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.config.fingerprint import FINGERPRINT_SCHEME, canonical_arm, fingerprint_differences
from bakeoff.core.config.schema import Arm, Workload
from bakeoff.core.engine.fingerprint import arm_fingerprint, model_identity
from bakeoff.engines.llamacpp import LlamaCppAdapter
from bakeoff.engines.vllm import VllmAdapter


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "a" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF" + bytes(range(256)) * 100)
    return path


def _fp(arm: dict[str, Any], workload: Workload | None = None, adapter: Any = None) -> Any:
    return arm_fingerprint(adapter or LlamaCppAdapter(), Arm.model_validate(arm), workload or Workload())


def test_aliases_and_defaults_resolve_to_one_fingerprint(gguf: Path) -> None:
    base = {"name": "a", "engine": "llamacpp", "model": str(gguf), "speculative": {"method": "ngram"}}
    spelled_out = {**base, "name": "b", "speculative": {"method": "ngram", "variant": "mod"},
                   "settings": {"parallel": 1, "host": "127.0.0.1", "port": 8081},
                   "options": {"verbosity": None}}
    assert _fp(base).id == _fp(spelled_out).id  # default variant, -np 1, bind address, name: the same setup
    assert _fp(base).canonical["speculative"] == {"method": "ngram", "variant": "mod"}
    assert _fp(base).canonical["scheme"] == FINGERPRINT_SCHEME


def test_the_build_is_not_the_configuration(gguf: Path, tmp_path: Path) -> None:
    a = {"name": "a", "engine": "llamacpp", "model": str(gguf), "options": {"binary": "/opt/old/llama-server"}}
    b = {**a, "options": {"binary": "/opt/new/llama-server", "build_version": "11434.0.0"}}
    assert _fp(a).id == _fp(b).id
    v1 = {"name": "v", "engine": "vllm", "model": str(gguf), "options": {"python": "/venvs/a/bin/python"}}
    v2 = {**v1, "options": {"python": "/venvs/b/bin/python", "venv_version": "0.33.0"}}
    assert _fp(v1, adapter=VllmAdapter()).id == _fp(v2, adapter=VllmAdapter()).id
    # an option that changes how the engine runs is configuration
    v3 = {**v1, "options": {"prefix_caching": True}}
    assert _fp(v3, adapter=VllmAdapter()).canonical["options"] == {"prefix_caching": True}


def test_normalized_values(gguf: Path) -> None:
    a = {"name": "a", "engine": "llamacpp", "model": str(gguf),
         "settings": {"tensor_split": [1, 1], "gpus": [2, 3], "kv_type": "Q8_0"}, "extra_args": ["--poll=50"]}
    b = {**a, "settings": {"tensor_split": [0.5, 0.5], "gpus": [0, 1], "kv_type": "q8_0"},
         "extra_args": ["--poll", "50"]}
    assert _fp(a).id == _fp(b).id
    assert _fp(a).canonical["settings"] == {"tensor_split": [0.5, 0.5], "gpus": 2, "kv_type": "q8_0"}


def test_the_same_model_under_two_paths_is_one_model(gguf: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "model.gguf"
    copy.parent.mkdir()
    shutil.copy(gguf, copy)
    assert model_identity(str(gguf)) == model_identity(str(copy))
    assert _fp({"name": "a", "engine": "llamacpp", "model": str(gguf)}).id == \
        _fp({"name": "a", "engine": "llamacpp", "model": str(copy)}).id
    copy.write_bytes(b"GGUF" + bytes(range(255, -1, -1)) * 100)  # same name and size, other weights
    assert model_identity(str(gguf)) != model_identity(str(copy))
    assert model_identity("served-model-id") == "served-model-id"  # nothing local: kept as written


def test_what_each_request_asks_is_part_of_it(gguf: Path) -> None:
    arm = {"name": "a", "engine": "llamacpp", "model": str(gguf)}
    plain = _fp(arm, Workload(max_tokens=128, prompts=["code_python"]))
    assert plain.id != _fp(arm, Workload(max_tokens=256, prompts=["code_python"])).id
    assert plain.id != _fp(arm, Workload(max_tokens=128, prompts=["prose"])).id
    assert plain.id != _fp(arm, Workload(max_tokens=128, prompts=["code_python"], modes=["sampled"])).id
    # the design of the run (how precisely it is measured) is not
    assert plain.id == _fp(arm, Workload(max_tokens=128, prompts=["code_python"], reps=9, passes=4, seed=7)).id


def test_env_values_never_enter_in_clear(gguf: Path) -> None:
    fp = _fp({"name": "a", "engine": "llamacpp", "model": str(gguf), "env": {"HF_TOKEN": "hf_secret_value_123"}})
    assert "hf_secret_value_123" not in fp.model_dump_json()
    assert fp.canonical["env"]["HF_TOKEN"].startswith("sha256:")
    other = _fp({"name": "a", "engine": "llamacpp", "model": str(gguf), "env": {"HF_TOKEN": "another_value_456"}})
    assert other.id != fp.id


def test_differences_are_named_by_key(gguf: Path) -> None:
    a = _fp({"name": "a", "engine": "llamacpp", "model": str(gguf), "settings": {"threads": 2}})
    b = _fp({"name": "b", "engine": "llamacpp", "model": str(gguf), "settings": {"threads": 1, "ctx": 4096}})
    assert fingerprint_differences(a.canonical, b.canonical) == ["settings.ctx: unset → 4096",
                                                                 "settings.threads: 2 → 1"]
    assert fingerprint_differences(a.canonical, a.canonical) == []


def test_canonical_arm_without_an_engine_knows_only_the_file(gguf: Path) -> None:
    """The config layer alone: no adapter declarations, so nothing engine-specific is resolved."""
    arm = Arm(name="x", engine="custom", model="m", speculative={"method": "ngram"})  # type: ignore[arg-type]
    doc = canonical_arm(arm, Workload(), [], engine_options={"kind": "custom", "flag": True})
    assert doc["speculative"] == {"method": "ngram"} and doc["options"] == {"flag": True} and doc["model"] == "m"
