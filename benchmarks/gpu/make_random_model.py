"""Write a random-weight Llama model directory (safetensors, bf16) with SmolLM2's tokenizer.

Why random: the GPU machine has no network and SmolLM2-135M's weights (98 MB as a GGUF, 257 MB as
bf16) do not fit the 64 MiB that travels there. SmolLM2's own shapes (hidden 576, 3 KV heads of 64)
are not multiples of 128, which EXL3's quantizer wants, so this model keeps SmolLM2's tokenizer and
chat template and its size class (~150 M parameters) with 128-aligned shapes. Speed depends on shapes,
not on weight values; acceptance does, which docs/exllama-h200.md says.

    python benchmarks/gpu/make_random_model.py .gpu/tokenizer /root/models/rand-llama-150m
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

SHAPE = {"hidden": 768, "intermediate": 2048, "layers": 12, "heads": 6, "kv_heads": 2, "head_dim": 128,
         "vocab": 49152}


def build(tokenizer_dir: Path, out: Path, seed: int = 1234) -> None:
    h, inter, n, heads, kv, hd, vocab = (SHAPE[k] for k in ("hidden", "intermediate", "layers", "heads",
                                                              "kv_heads", "head_dim", "vocab"))
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": normal(vocab, h), "lm_head.weight": normal(vocab, h),
               "model.norm.weight": torch.ones(h, dtype=torch.bfloat16)}
    for i in range(n):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": normal(heads * hd, h),
            p + "self_attn.k_proj.weight": normal(kv * hd, h),
            p + "self_attn.v_proj.weight": normal(kv * hd, h),
            p + "self_attn.o_proj.weight": normal(h, heads * hd),
            p + "mlp.gate_proj.weight": normal(inter, h),
            p + "mlp.up_proj.weight": normal(inter, h),
            p + "mlp.down_proj.weight": normal(h, inter),
            p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        })
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": n, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "torch_dtype": "bfloat16",
        "attention_bias": False, "mlp_bias": False,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2]}))
    for name in ("tokenizer.json", "chat_template.jinja"):
        shutil.copy(tokenizer_dir / name, out / name)
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "add_bos_token": False, "add_eos_token": False,
        "model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2))
    params = sum(t.numel() for t in tensors.values())
    print(f"random llama: {params / 1e6:.1f} M parameters -> {out}")


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
