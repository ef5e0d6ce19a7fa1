"""Synthesized GGUFs: the formats llama.cpp b11434 reads, the caching, and the weight tricks that force
acceptance, checked on the written files with numpy (no engine; a toy tokenizer, so no download)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from bakeoff.engines.llamacpp import synth
from bakeoff.engines.llamacpp.synth import (
    AGREE_TOKEN,
    Dims,
    SynthSpec,
    expected_mtp_acceptance,
    synth_pair,
    synthesize,
    tokenizer_from_gguf,
    toy_tokenizer,
)

TOK = toy_tokenizer(400)


def make(tmp_path: Path, spec: SynthSpec) -> GGUFReader:
    return GGUFReader(synthesize(spec, TOK, tmp_path))


def field(reader: GGUFReader, key: str) -> object:
    f = reader.get_field(key)
    assert f is not None, key
    return f.contents()


def tensors(reader: GGUFReader) -> dict[str, np.ndarray]:
    """Every tensor in numpy order (rows = ggml ne[1]), quantized ones dequantized."""
    out = {}
    for t in reader.tensors:
        data = dequantize(t.data, t.tensor_type)
        out[t.name] = np.asarray(data, dtype=np.float32).reshape(tuple(int(n) for n in reversed(t.shape)))
    return out


def test_mtp_file_is_glm4moe_with_one_moe_nextn_block(tmp_path: Path) -> None:
    d = Dims()
    r = make(tmp_path, SynthSpec("mtp"))
    assert field(r, "general.architecture") == "glm4moe"
    assert field(r, "glm4moe.nextn_predict_layers") == 1
    assert field(r, "glm4moe.block_count") == d.layers + 1  # trunk + the NextN block
    assert field(r, "glm4moe.leading_dense_block_count") == d.layers
    names = {t.name for t in r.tensors}
    nextn = f"blk.{d.layers}."
    for suffix in ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                   "nextn.shared_head_norm.weight", "ffn_gate_inp.weight", "exp_probs_b.bias",
                   "ffn_gate_exps.weight", "ffn_up_shexp.weight"):
        assert nextn + suffix in names
    assert "output.weight" not in names  # random weights: head tied to token_embd
    shapes = {t.name: [int(n) for n in t.shape] for t in r.tensors}
    assert shapes[nextn + "nextn.eh_proj.weight"] == [2 * d.hidden, d.hidden]  # ggml ne order
    assert shapes["token_embd.weight"] == [d.hidden, TOK.vocab_size]
    assert field(r, "tokenizer.ggml.model") == "gpt2"


@pytest.mark.parametrize("kind", ["dflash", "dflash2", "dspark", "eagle3"])
def test_drafts_carry_the_metadata_llama_cpp_dispatches_on(tmp_path: Path, kind: str) -> None:
    target, draft = synth_pair(kind, agree=False, tokenizer=TOK, root=tmp_path)
    r, t = GGUFReader(draft), GGUFReader(target)
    assert field(t, "general.architecture") == "llama"
    arch = "eagle3" if kind == "eagle3" else "dflash"
    assert field(r, "general.architecture") == arch
    layers = field(r, f"{arch}.target_layers")
    assert layers == ([1, 2, 3] if kind == "eagle3" else [1, 3])
    assert max(layers) < field(t, "llama.block_count")  # llama exposes layer inputs 0..n_layer-1
    assert field(r, f"{arch}.embedding_length") == field(t, "llama.embedding_length")  # it borrows the head
    names = {x.name for x in r.tensors}
    assert "fc.weight" in names and "token_embd.weight" not in names and "output.weight" not in names
    if kind == "eagle3":
        assert field(r, "eagle3.target_hidden_size") == Dims().hidden
        assert "blk.0.attn_norm_2.weight" in names
        return
    assert field(r, "dflash.block_size") == Dims().block_size
    assert field(r, "tokenizer.ggml.mask_token_id") == 0
    assert ("selector_hidden.weight" in names) == (kind == "dflash2")
    assert ("blk.0.attn_conv_base" in names) == (kind == "dflash2")
    assert ("markov_w1.weight" in names) == (kind == "dspark")
    if kind == "dflash2":
        assert field(r, "dflash.selector_top_k") == Dims().selector_top_k
    if kind == "dspark":
        assert field(r, "dflash.sample_from_anchor") is True
        assert "conf_proj.weight" in names


def test_cache_reuses_a_file_and_keys_on_every_parameter(tmp_path: Path) -> None:
    first = synthesize(SynthSpec("target"), TOK, tmp_path)
    stamp = first.stat().st_mtime_ns
    assert synthesize(SynthSpec("target"), TOK, tmp_path) == first
    assert first.stat().st_mtime_ns == stamp  # not rewritten
    others = {synthesize(SynthSpec("target", agree=True), TOK, tmp_path),
              synthesize(SynthSpec("target", seed=3), TOK, tmp_path),
              synthesize(SynthSpec("target", dims=Dims(layers=5)), TOK, tmp_path),
              synthesize(SynthSpec("target"), toy_tokenizer(300), tmp_path)}
    assert first not in others and len(others) == 4
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    assert first.name.startswith("target-random-")


def test_default_cache_is_under_cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path))
    path = synthesize(SynthSpec("eagle3"), TOK)
    assert path.parent == tmp_path / "synth"


def test_files_are_small(tmp_path: Path) -> None:
    # SmolLM2's 49152-token vocabulary makes the real ones 2-12 MB; the vocab matrices dominate.
    path = synthesize(SynthSpec("mtp", agree=True, acceptance=0.5), TOK, tmp_path)
    assert os.path.getsize(path) < 1_000_000


def test_mtp_counter_head_predicts_the_successor_and_the_nextn_head_agrees(tmp_path: Path) -> None:
    w = tensors(make(tmp_path, SynthSpec("mtp", agree=True)))
    emb, out = w["token_embd.weight"], w["output.weight"]
    walk = synth._walk_ids(TOK)
    nxt = synth._successor(TOK.vocab_size, walk)
    greedy = np.argmax(emb[walk] @ out.T, axis=1)  # hidden state ~ the current token's embedding
    assert (greedy == nxt[walk]).all()
    eh = w[f"blk.{Dims().layers}.nextn.eh_proj.weight"]
    passed = np.concatenate([emb[walk], np.zeros_like(emb[walk])], axis=1) @ eh.T
    assert (np.argmax(passed @ out.T, axis=1) == nxt[walk]).all()


def test_mtp_chosen_acceptance_misses_an_even_share_of_the_walk(tmp_path: Path) -> None:
    w = tensors(make(tmp_path, SynthSpec("mtp", agree=True, acceptance=0.6)))
    head = w[f"blk.{Dims().layers}.nextn.shared_head_head.weight"]
    emb, walk = w["token_embd.weight"], synth._walk_ids(TOK)
    nxt = synth._successor(TOK.vocab_size, walk)
    guess = np.argmax(emb[walk] @ head.T, axis=1)
    wrong = guess != nxt[walk]
    assert (guess[wrong] == nxt[nxt[walk]][wrong]).all()  # a miss skips exactly one token
    q = (1 - 0.6) / (1 + 0.6)
    assert abs(wrong.mean() - q) < 0.05


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.5, 0.7, 0.9, 1.0])
def test_expected_acceptance_at_n_max_1_is_the_chosen_one(acceptance: float) -> None:
    assert expected_mtp_acceptance(acceptance, 1) == pytest.approx(acceptance, abs=0.01)


def test_longer_drafts_accept_less() -> None:
    assert expected_mtp_acceptance(0.7, 3) < expected_mtp_acceptance(0.7, 1)
    assert expected_mtp_acceptance(1.0, 3) == 1.0


def test_constant_token_target_always_emits_the_agree_token(tmp_path: Path) -> None:
    w = tensors(make(tmp_path, SynthSpec("target", agree=True)))
    emb, out = w["token_embd.weight"], w["output.weight"]
    normed = emb / np.sqrt((emb**2).mean(axis=1, keepdims=True))  # output_norm is RMS norm
    assert (np.argmax(normed @ out.T, axis=1) == AGREE_TOKEN).all()


def test_agreeing_eagle3_fc_passes_the_dominant_dimension_through(tmp_path: Path) -> None:
    fc = tensors(make(tmp_path, SynthSpec("eagle3", agree=True)))["fc.weight"]
    h = Dims().hidden
    assert [fc[0, k * h] for k in range(3)] == [1.0, 1.0, 1.0]


def test_random_dspark_markov_bias_outweighs_the_borrowed_head(tmp_path: Path) -> None:
    random = tensors(make(tmp_path, SynthSpec("dspark")))["markov_w1.weight"]
    agreeing = tensors(make(tmp_path, SynthSpec("dspark", agree=True)))["markov_w1.weight"]
    assert random.std() > 0.5 > 0.05 > agreeing.std()


def test_counter_walk_skips_tokens_that_are_half_a_character() -> None:
    tok = toy_tokenizer(300)
    tokens = next(v for k, v, _, _ in tok.entries if k == "tokenizer.ggml.tokens")
    tokens[261] = "\u00c3"  # GPT-2 byte-level stand-in for byte 0xC3: an unfinished UTF-8 sequence
    tokens[262] = "\u00c3\u00a9"  # 0xC3 0xA9 = 'é', whole
    walk = synth._walk_ids(tok)
    assert 261 not in walk and 262 in walk and walk[0] == 260


def test_tokenizer_round_trips_through_a_written_file(tmp_path: Path) -> None:
    path = synthesize(SynthSpec("target"), TOK, tmp_path)
    back = tokenizer_from_gguf(path)
    assert back.vocab_size == TOK.vocab_size
    assert {k for k, *_ in back.entries} == {k for k, *_ in TOK.entries}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"kind": "dflash", "acceptance": 0.5}, "chosen acceptance"),
    ({"kind": "mtp", "acceptance": 0.5}, "chosen acceptance"),  # needs agree
    ({"kind": "mtp", "agree": True, "acceptance": 1.5}, "within"),
    ({"kind": "eagle3", "target_layers": (1, 2)}, "exactly 3"),
    ({"kind": "dflash", "target_layers": (1, 4)}, "must lie in"),
    ({"kind": "dflash2", "dims": Dims(hidden=48, heads=4, kv_heads=2)}, "conv_group"),
    ({"kind": "gemma"}, "unknown"),
])
def test_impossible_specs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SynthSpec(**kwargs)  # type: ignore[arg-type]


def test_not_a_gguf_is_a_value_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"nope")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        tokenizer_from_gguf(bad)
