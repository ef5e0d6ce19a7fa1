"""llama.cpp preflight on both sides, with synthesized GGUFs: what it must refuse before a launch, what it
must let through, and the normal draft memory-fitting E line that must not count as a startup failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.common.errors import CapabilityNotSupported, PreflightError
from bakeoff.core.config.schema import Arm
from bakeoff.core.engine.checks import check_arm_capabilities
from bakeoff.engines.llamacpp import LlamaCppAdapter
from bakeoff.engines.llamacpp.gguf_meta import read_gguf_facts
from bakeoff.engines.llamacpp.synth import SynthSpec, synth_pair, synthesize, toy_tokenizer

FIX = Path(__file__).parent.parent.parent / "fixtures" / "llamacpp"
TOK = toy_tokenizer(300)
adapter = LlamaCppAdapter()


def arm(model: Path, **spec: Any) -> Arm:
    return Arm.model_validate({"name": "a", "engine": "llamacpp", "model": str(model), "speculative": spec,
                               "options": {"binary": "/opt/llama-server"}})  # preflight never runs it


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {"mtp": synthesize(SynthSpec("mtp"), TOK, tmp_path),
           "mtp-agree": synthesize(SynthSpec("mtp", agree=True, acceptance=0.5), TOK, tmp_path)}
    for kind in ("dflash", "dflash2", "dspark", "eagle3"):
        out["target"], out[kind] = synth_pair(kind, agree=False, tokenizer=TOK, root=tmp_path)
    return out


def test_mtp_is_refused_on_a_model_without_nextn_layers(files: dict[str, Path]) -> None:
    # The llama target stands in for SmolLM2: llama architecture, no NextN block (the integration tier
    # refuses MTP on the real SmolLM2 GGUF too).
    with pytest.raises(PreflightError, match=r"llama\.nextn_predict_layers = 0"):
        adapter.preflight(arm(files["target"], method="mtp"))


@pytest.mark.parametrize("name", ["mtp", "mtp-agree"])
def test_mtp_is_accepted_on_the_synthesized_nextn_model(files: dict[str, Path], name: str) -> None:
    adapter.preflight(arm(files[name], method="mtp", n_max=2))
    facts = read_gguf_facts(files[name])
    assert facts.architecture == "glm4moe" and facts.nextn_layers == 1 and facts.has_mtp


@pytest.mark.parametrize("kind", ["dflash", "dflash2", "dspark", "eagle3"])
def test_drafts_are_recognised_by_their_metadata(files: dict[str, Path], kind: str) -> None:
    assert read_gguf_facts(files[kind]).draft_kind == kind
    assert read_gguf_facts(files["target"]).draft_kind == "plain"
    assert read_gguf_facts(files["mtp"]).draft_kind == "mtp"


@pytest.mark.parametrize(("method", "kind"), [("dflash", "dflash"), ("dflash", "dflash2"), ("dspark", "dspark"),
                                              ("eagle3", "eagle3")])
def test_a_draft_of_the_right_type_passes(files: dict[str, Path], method: str, kind: str) -> None:
    adapter.preflight(arm(files["target"], method=method, draft_model=str(files[kind])))


@pytest.mark.parametrize(("method", "kind"), [("dflash", "eagle3"), ("dflash", "dspark"), ("dspark", "dflash"),
                                              ("dspark", "dflash2"), ("eagle3", "dflash"), ("eagle3", "dspark"),
                                              ("draft", "dflash"), ("draft", "eagle3"), ("draft", "mtp")])
def test_a_draft_of_another_type_is_refused(files: dict[str, Path], method: str, kind: str) -> None:
    with pytest.raises(PreflightError, match=f"is a '{kind}' model"):
        adapter.preflight(arm(files["target"], method=method, draft_model=str(files[kind])))


@pytest.mark.parametrize("method", ["dflash", "dspark", "eagle3", "draft"])
def test_a_draft_type_without_a_draft_is_refused(files: dict[str, Path], method: str) -> None:
    # llama-server would start and silently run without speculation
    with pytest.raises(CapabilityNotSupported, match=r"needs speculative\.draft_model"):
        check_arm_capabilities(adapter, arm(files["target"], method=method))


def test_a_draft_with_speculation_off_is_refused(files: dict[str, Path]) -> None:
    with pytest.raises(CapabilityNotSupported, match="draft_model has no effect on llamacpp method 'none'"):
        check_arm_capabilities(adapter, arm(files["target"], method="none", draft_model=str(files["dflash"])))


@pytest.mark.parametrize("capture", ["startup_dflash_ok.log", "startup_eagle3_ok.log"])
def test_draft_memory_fitting_error_line_is_not_a_startup_failure(capture: str) -> None:
    # Real logs of healthy starts: llama.cpp logs an E line while it measures the draft's memory.
    log = (FIX / capture).read_text()
    assert " E llama_init_from_model: failed to initialize the context:" in log
    assert "requires ctx_other to be set (this warning is normal during memory fitting)" in log
    assert adapter.classify_startup_failure(log) is None


def test_a_real_failure_after_the_fitting_line_is_still_classified() -> None:
    log = (FIX / "startup_dflash_ok.log").read_text().splitlines()[:8]
    log.append("0.00.300.000 E llama_model_load: error loading model: vocab type must match")
    err = adapter.classify_startup_failure("\n".join(log))
    assert err is not None and err.reason == "incompatible-draft-vocab"
    assert err.log_line is not None and "vocab type must match" in err.log_line


def test_a_header_count_that_is_not_an_integer_is_an_unreadable_gguf(tmp_path: Path) -> None:
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "odd.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_string("llama.nextn_predict_layers", "two")
    writer.add_tensor("token_embd.weight", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"odd\.gguf is not a readable GGUF file: llama\.nextn_predict_layers is "
                                         r"'two', not an integer"):
        read_gguf_facts(path)
    with pytest.raises(PreflightError, match="not an integer"):
        adapter.preflight(arm(path, method="mtp"))

