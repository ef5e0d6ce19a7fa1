"""Roofline: bytes per decoded token from real (synthesized) GGUF files, bandwidth, floor and efficiency."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fake_nvml import fake_nvml

from bakeoff.core.host.roofline import host_copy_bandwidth_gbs, model_bytes, roofline_for
from bakeoff.engines.llamacpp.synth import Dims, SynthSpec, synthesize, toy_tokenizer

DIMS = Dims(hidden=64, layers=3, heads=4, kv_heads=2, ffn=128, experts=4, experts_used=2, expert_ffn=32,
            vocab_dtype="f16")


def _tensors(path: Path) -> dict[str, int]:
    from gguf import GGUFReader

    return {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}


def test_dense_llama_reads_one_embedding_row_all_layers_and_the_head(tmp_path: Path) -> None:
    tok = toy_tokenizer(300)
    path = synthesize(SynthSpec("target", agree=True, dims=DIMS), tok, tmp_path)
    sizes = _tensors(path)
    facts = model_bytes(path)
    embd_row = sizes["token_embd.weight"] / 300
    assert facts.weights == int(sum(sizes.values()) - sizes["token_embd.weight"] + embd_row)
    assert facts.file_bytes == sum(sizes.values())
    # K and V, 3 layers, 2 KV heads of 16 dims, f16
    assert facts.kv_per_position == 2 * 3 * 2 * 16 * 2
    assert model_bytes(path, "q8_0").kv_per_position == pytest.approx(2 * 3 * 2 * 16 * 34 / 32)
    assert facts.at_depth(100) == facts.weights + 100 * facts.kv_per_position
    assert facts.layers == 3


def test_mtp_block_is_left_out_of_the_target_pass(tmp_path: Path) -> None:
    path = synthesize(SynthSpec("mtp", agree=True, dims=DIMS), toy_tokenizer(300), tmp_path)
    sizes = _tensors(path)
    facts = model_bytes(path)
    mtp_block = sum(v for k, v in sizes.items() if k.startswith(f"blk.{DIMS.layers}."))
    assert mtp_block > 0
    trunk = sum(sizes.values()) - mtp_block - sizes["token_embd.weight"] + sizes["token_embd.weight"] / 300
    assert facts.weights == int(trunk)
    assert "1 MTP block(s) left out" in facts.notes
    assert facts.kv_per_position == 2 * DIMS.layers * 2 * 16 * 2  # the MTP block's cache is not read either


def test_moe_counts_only_the_active_experts(tmp_path: Path) -> None:
    """A glm4moe file whose routed-expert tensors sit in the trunk (one MoE layer, no MTP block)."""
    from gguf import GGUFWriter

    path = tmp_path / "moe.gguf"
    w = GGUFWriter(str(path), "glm4moe")
    w.add_block_count(1)
    w.add_expert_count(8)
    w.add_expert_used_count(2)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_tensor("blk.0.ffn_up_exps.weight", np.zeros((8, 32, 64), dtype=np.float16))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    w.add_tensor("output.weight", np.zeros((10, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    facts = model_bytes(path)
    assert facts.weights == 8 * 32 * 64 * 2 * 2 // 8 + 64 * 64 * 2 + 10 * 64 * 2
    assert "MoE: 2 of 8 experts per token" in facts.notes


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A safetensors file of zero bytes per tensor: name -> (dtype, shape, bytes)."""
    import json
    import struct

    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_safetensors_directory_counts_like_a_gguf(tmp_path: Path) -> None:
    """An EXL3-style directory (quantized trellis tensors, an f16 embedding, a quantized head) in two shards."""
    import json

    model = tmp_path / "exl3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                                                   "num_key_value_heads": 2, "hidden_size": 64, "head_dim": 32}))
    _safetensors(model / "model-00001-of-00002.safetensors",
                 {"model.embed_tokens.weight": ("F16", [100, 64], 12_800),
                  "model.layers.0.self_attn.q_proj.trellis": ("I16", [4, 4, 256], 8_192)})
    _safetensors(model / "model-00002-of-00002.safetensors",
                 {"model.layers.1.self_attn.q_proj.trellis": ("I16", [4, 4, 256], 8_192),
                  "lm_head.trellis": ("I16", [4, 7, 384], 21_504)})
    facts = model_bytes(model)
    assert facts.weights == 128 + 8_192 * 2 + 21_504  # one embedding row, both layers, the head
    assert facts.file_bytes == 12_800 + 8_192 * 2 + 21_504
    assert facts.kv_per_position == 2 * 2 * 2 * 32 * 2 and facts.layers == 2

    tied = tmp_path / "tied"
    tied.mkdir()
    (tied / "config.json").write_text(json.dumps({"num_hidden_layers": 1, "num_attention_heads": 2,
                                                  "hidden_size": 64}))
    _safetensors(tied / "model.safetensors", {"model.embed_tokens.weight": ("F16", [100, 64], 12_800)})
    assert model_bytes(tied).weights == 12_800  # no lm_head: the tied head reads the whole table
    assert model_bytes(tied).kv_per_position == 2 * 1 * 2 * 32 * 2

    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \*\.safetensors"):
        model_bytes(tmp_path / "empty")


def test_not_a_gguf_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"nope")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        model_bytes(bad)


def test_floor_and_efficiency_match_the_h200_facts() -> None:
    """3.3B F16 (6.24 GB/token): ~673 tok/s floor at 4.2 TB/s measured, ~771 at NVML's 4.81 TB/s;
    334 tok/s measured is then ~50 % and ~43 %."""
    from bakeoff.core.host.roofline import ModelBytes

    facts = ModelBytes(weights=6_240_000_000, kv_per_position=0.0, file_bytes=6_240_000_000)
    roof = roofline_for(facts, {"gbs": 4200.0, "source": "measured device copy", "theoretical_gbs": 4814.3}, 334.0,
                        depth=0.0, tokens_per_pass=None)
    assert roof is not None
    assert roof.floor_tps == pytest.approx(673.1, abs=0.1)
    assert roof.efficiency == pytest.approx(0.496, abs=0.001)
    assert roof.theoretical_efficiency == pytest.approx(0.433, abs=0.001)
    assert roof.bandwidth_source == "measured device copy"
    only_nvml = roofline_for(facts, {"theoretical_gbs": 4814.3}, 334.0, depth=0.0)
    assert only_nvml is not None and only_nvml.bandwidth_source.startswith("NVML theoretical")
    assert roofline_for(facts, {}, 334.0, depth=0.0) is None


def test_host_copy_bandwidth_is_measured() -> None:
    gbs = host_copy_bandwidth_gbs(mib=16, reps=3)
    assert 0.1 < gbs < 10_000  # a real copy of this machine's memory, in GB/s


def test_hardware_record_picks_host_or_gpu_bandwidth_per_arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.config.schema import Arm, Settings
    from bakeoff.core.engine import hardware
    from bakeoff.core.host import telemetry

    path = synthesize(SynthSpec("target", dims=DIMS), toy_tokenizer(300), tmp_path)
    cpu_arm = Arm(name="cpu", engine="llamacpp", model=str(path))
    gpu_arm = Arm(name="gpu", engine="llamacpp", model=str(path), settings=Settings(gpu_layers=99))
    monkeypatch.setattr(telemetry, "_load_nvml", lambda: None)  # this machine: no GPU
    rec = hardware.hardware_record([cpu_arm, gpu_arm])
    assert rec["gpus"] == [] and set(rec["bandwidth"]) == {"host"}
    assert {m["device"] for m in rec["roofline_models"].values()} == {"host"}  # gpu_layers without a GPU: host
    assert rec["roofline_models"]["cpu"]["weights"] == model_bytes(path).weights

    monkeypatch.setattr(telemetry, "_load_nvml", lambda: fake_nvml())
    monkeypatch.setattr(hardware, "gpu_copy_bandwidth_gbs", lambda *a, **k: None)  # no torch/CuPy copy possible
    rec = hardware.hardware_record([gpu_arm, Arm(name="off", engine="llamacpp", model=str(path),
                                                 settings=Settings(gpu_layers=0))])
    assert rec["roofline_models"]["gpu"]["device"] == "gpu" and rec["roofline_models"]["off"]["device"] == "host"
    assert rec["bandwidth"]["gpu"] == {"theoretical_gbs": pytest.approx(4814.3, abs=0.1)}  # says which: NVML only

    exl3 = tmp_path / "exl3"
    exl3.mkdir()
    (exl3 / "config.json").write_text('{"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 64}')
    _safetensors(exl3 / "model.safetensors", {"model.embed_tokens.weight": ("F16", [100, 64], 12_800)})
    rec = hardware.hardware_record([Arm(name="exl3", engine="exllama", model=str(exl3))])
    assert rec["roofline_models"]["exl3"]["device"] == "gpu"
    assert rec["roofline_models"]["exl3"]["weights"] == 12_800


def test_engine_holding_too_little_gpu_memory_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from bakeoff.core.config.schema import Arm, Settings
    from bakeoff.core.engine import hardware
    from bakeoff.core.host.telemetry import open_monitor
    monitor = open_monitor(nvml=fake_nvml())  # pid 4242 holds 6 GiB
    assert monitor is not None
    arm = Arm(name="a", engine="llamacpp", model="m.gguf", settings=Settings(gpu_layers=99))
    monkeypatch.setattr(hardware, "engine_pids", lambda pgid: {4242})
    held, problem = hardware.offload_mismatch(monitor, arm, os.getpid(), weights=6 * 2**30)
    assert held == 6 * 1024 and problem is None
    held, problem = hardware.offload_mismatch(monitor, arm, os.getpid(), weights=20 * 2**30)
    assert problem == ("settings.gpu_layers 99 asked, but the engine holds only 6144 MiB on the GPU for 20480 MiB "
                       "of weights on those layers")
    partial = Arm(name="a", engine="llamacpp", model="m.gguf", settings=Settings(gpu_layers=10))
    assert hardware.offload_mismatch(monitor, partial, os.getpid(), 20 * 2**30, layers=28)[1] is None  # as asked
    monkeypatch.setattr(hardware, "engine_pids", lambda pgid: {1})
    assert hardware.offload_mismatch(monitor, arm, os.getpid(), weights=6 * 2**30)[1] is not None  # holds nothing
