"""Every speculative knob an adapter declares changes what it launches or sends; every other one is refused.

Walks each adapter's declared ``speculative`` table (llama.cpp, vLLM, exllama, the SGLang and ik_llama.cpp
plugins, openai, sim): for every method and variant, each declared knob, set to two values, gives two launch
fingerprints that differ from each other and from the arm without it; each undeclared knob is refused before
launch with a message naming the knob, the method (and variant) and the knobs the method takes instead.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff.core import KNOBS, EngineAdapter, Workload
from bakeoff.core.common.errors import CapabilityNotSupported
from bakeoff.core.config.schema import Arm
from bakeoff.core.engine.checks import check_arm_capabilities
from bakeoff.core.engine.launch import launch_identity

for _src in sorted((Path(__file__).resolve().parents[3] / "plugins").glob("*/src")):
    if str(_src) not in sys.path:
        sys.path.insert(0, str(_src))

from bakeoff.engines.exllama import ExllamaAdapter  # noqa: E402
from bakeoff.engines.llamacpp import LlamaCppAdapter  # noqa: E402
from bakeoff.engines.openai import OpenAICompatAdapter  # noqa: E402
from bakeoff.engines.sim import SimAdapter  # noqa: E402
from bakeoff.engines.vllm import VllmAdapter  # noqa: E402
from bakeoff_ikllama.adapter import IkLlamaAdapter  # noqa: E402
from bakeoff_sglang.adapter import SglangAdapter  # noqa: E402

VALUES: dict[str, tuple[Any, Any]] = {"n_max": (3, 5), "n_min": (1, 2), "p_min": (0.25, 0.5), "lookup_min": (2, 3),
                                      "lookup_max": (4, 6)}
BASE = {"n_max": 4, "n_min": 0, "p_min": 0.1, "lookup_min": 1, "lookup_max": 5}  # for knobs an arm must set
WORKLOAD = Workload()


def _gguf(path: Path) -> str:
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.zeros((2, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def _hf_dir(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return str(path)


ArmMaker = Callable[[dict[str, Any]], Arm]


def _maker(name: str, tmp: Path) -> tuple[EngineAdapter, ArmMaker]:
    """The adapter and a function making a launchable arm of it with a given ``speculative`` section."""
    if name == "llamacpp":
        model, draft = _gguf(tmp / "m.gguf"), _gguf(tmp / "d.gguf")
        base: dict[str, Any] = {"model": model, "options": {"binary": "/opt/llama-server"}}
        adapter: EngineAdapter = LlamaCppAdapter()
    elif name == "ikllama":
        model, draft = _gguf(tmp / "m.gguf"), _gguf(tmp / "d.gguf")
        base, adapter = {"model": model, "options": {"binary": "/opt/ik/llama-server"}}, IkLlamaAdapter()
    elif name == "vllm":
        model, draft = _hf_dir(tmp / "target"), _hf_dir(tmp / "draft")
        base, adapter = {"model": model, "options": {"python": "/opt/vllm/bin/python"}}, VllmAdapter()
    elif name == "exllama":
        model, draft = _hf_dir(tmp / "models" / "target"), _hf_dir(tmp / "drafts" / "draft")
        (tmp / "tabby").mkdir()
        (tmp / "tabby" / "main.py").write_text("")
        base = {"model": model, "options": {"tabby_dir": str(tmp / "tabby"), "python": "/opt/py"}}
        adapter = ExllamaAdapter()
    elif name == "sglang":
        model, draft = _hf_dir(tmp / "target"), _hf_dir(tmp / "draft")
        base, adapter = {"model": model, "options": {"python": "/opt/sglang/bin/python"}}, SglangAdapter()
    else:
        draft = "unused"
        base, adapter = ({"url": "http://127.0.0.1:9"}, OpenAICompatAdapter()) if name == "openai" else \
            ({"model": "sim"}, SimAdapter())

    def make(spec: dict[str, Any]) -> Arm:
        if spec.get("draft_model") == "<draft>":
            spec = {**spec, "draft_model": draft}
        return Arm.model_validate({"name": "a", "engine": name, **base, "speculative": spec})

    return adapter, make


def _base_spec(adapter: EngineAdapter, key: str) -> dict[str, Any]:
    method, _, variant = key.partition("/")
    declared = adapter.capabilities.speculative[key]
    spec: dict[str, Any] = {"method": method, **({"variant": variant} if variant else {})}
    if declared.draft_model == "required":
        spec["draft_model"] = "<draft>"
    spec.update({k: BASE[k] for k in declared.required})
    return spec


CLASSES: dict[str, type[EngineAdapter]] = {"llamacpp": LlamaCppAdapter, "vllm": VllmAdapter, "exllama": ExllamaAdapter,
                                            "sglang": SglangAdapter, "ikllama": IkLlamaAdapter,
                                            "openai": OpenAICompatAdapter, "sim": SimAdapter}


def _cases() -> list[tuple[str, str]]:
    return [(name, key) for name, cls in CLASSES.items() for key in cls.capabilities.speculative]


@pytest.mark.parametrize(("engine", "key"), _cases())
def test_every_declared_knob_changes_the_launch_or_the_request(tmp_path: Path, engine: str, key: str) -> None:
    adapter, make = _maker(engine, tmp_path)
    declared = adapter.capabilities.speculative[key]
    base = make(_base_spec(adapter, key))
    check_arm_capabilities(adapter, base)
    seen = {launch_identity(adapter, base, WORKLOAD): "without"}
    for knob in declared.knobs:
        for value in VALUES[knob]:
            a = make({**_base_spec(adapter, key), knob: value})
            check_arm_capabilities(adapter, a)
            fingerprint = launch_identity(adapter, a, WORKLOAD)
            assert fingerprint not in seen, f"{engine} {key}: {knob}={value} launches as {seen.get(fingerprint)}"
            seen[fingerprint] = f"{knob}={value}"
    if declared.draft_model == "optional":
        a = make({**_base_spec(adapter, key), "draft_model": "<draft>"})
        check_arm_capabilities(adapter, a)
        assert launch_identity(adapter, a, WORKLOAD) not in seen, f"{engine} {key}: draft_model has no effect"


@pytest.mark.parametrize(("engine", "key"), _cases())
def test_every_undeclared_knob_is_refused_naming_the_method_and_what_it_takes(tmp_path: Path, engine: str,
                                                                               key: str) -> None:
    adapter, make = _maker(engine, tmp_path)
    declared = adapter.capabilities.speculative[key]
    method, _, variant = key.partition("/")
    undeclared = [k for k in KNOBS if k not in declared.knobs]
    for knob in undeclared:
        with pytest.raises(CapabilityNotSupported) as refused:
            check_arm_capabilities(adapter, make({**_base_spec(adapter, key), knob: VALUES[knob][0]}))
        message = str(refused.value)
        assert f"speculative.{knob} has no effect on {adapter.name}" in message
        assert f"method {method!r}" in message and (not variant or f"variant {variant!r}" in message)
        assert f"it takes: {', '.join(declared.knobs) or 'no knobs'}" in message
    if declared.draft_model == "forbidden":
        with pytest.raises(CapabilityNotSupported, match=f"draft_model has no effect on {adapter.name}"):
            check_arm_capabilities(adapter, make({**_base_spec(adapter, key), "draft_model": "/some/draft"}))
    if declared.draft_model == "required" and not make({"method": "none"}).attached:
        with pytest.raises(CapabilityNotSupported, match=r"needs speculative\.draft_model"):
            spec = _base_spec(adapter, key)
            spec.pop("draft_model")
            check_arm_capabilities(adapter, make(spec))


def test_the_llamacpp_message_names_knob_variant_and_what_it_takes(tmp_path: Path) -> None:
    adapter, make = _maker("llamacpp", tmp_path)
    with pytest.raises(CapabilityNotSupported) as refused:
        check_arm_capabilities(adapter, make({"method": "ngram", "variant": "simple", "n_min": 2}))
    assert str(refused.value) == (
        "arm 'a': speculative.n_min has no effect on llamacpp ngram-simple (method 'ngram', variant 'simple'); "
        "it takes: n_max, lookup_max (n_min is taken by: mtp, dflash, dspark, eagle3, draft, ngram-mod)")


@pytest.mark.parametrize(("spec", "match"), [
    ({"method": "draft", "draft_model": "<draft>", "variant": "mod"},
     "variant has no effect on llamacpp method 'draft'"),
    ({"method": "ngram", "variant": "suffix"}, "'suffix' is not a llamacpp ngram variant; it offers: mod, simple"),
    ({"method": "ngram", "variant": "cache", "n_max": 4}, r"it takes: no knobs \(n_max is taken by"),
    ({"method": "ngram", "lookup_max": 4}, r"ngram-mod \(method 'ngram', variant 'mod'\); it takes: n_max, n_min, "
                                           "lookup_min"),  # no variant: the default, mod
])
def test_llamacpp_variant_refusals(tmp_path: Path, spec: dict[str, Any], match: str) -> None:
    adapter, make = _maker("llamacpp", tmp_path)
    with pytest.raises(CapabilityNotSupported, match=match):
        check_arm_capabilities(adapter, make(spec))


def test_capabilities_declare_nothing_core_never_reads() -> None:
    """AUDIT L1: tokenize_endpoint was declared and never read; declaring it now is an error, as is the old
    flat knob list (which let every knob through for every method)."""
    from pydantic import ValidationError

    from bakeoff.core import Capabilities

    for stale in ({"tokenize_endpoint": "/tokenize"}, {"speculative_knobs": ("n_max",)}):
        with pytest.raises(ValidationError):
            Capabilities.model_validate(stale)
