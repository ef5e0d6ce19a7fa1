"""How close each arm runs to the memory-bandwidth limit: bytes read per decoded token ÷ bandwidth.

Single-stream decoding reads every weight once per step, so ``bandwidth / bytes per token`` is the
most tokens per second plain decoding can reach (the *floor* time per token, as a rate). Speculation
beats that floor by verifying several tokens per weight pass; its arms also show accepted tokens per
pass. This holds on a GPU and on a CPU alike (llama.cpp on a CPU is bandwidth-bound too), which is
how CI tests it.

Bytes per token come from the model's tensor sizes, a GGUF file or a directory of safetensors files
(Hugging Face or EXL3; the KV-cache shape then comes from its config.json):

- ``token_embd`` (``embed_tokens``) contributes one row (a token reads its own embedding), unless the model
  has no ``output.weight`` (``lm_head.*``): then the tied LM head reads all of it;
- MoE expert tensors (``*_exps``) count ``expert_used_count / expert_count`` of their bytes;
- MTP/NextN blocks (the last ``nextn_predict_layers`` blocks) are left out: only the MTP draft reads them;
- the KV cache adds ``2 × layers × kv_heads × head_dim × bytes`` per position of context, taken at the
  prompt depth plus half the output (the mean position of a decoded token).

Bandwidth: a measured copy where it can run (torch or CuPy on the GPU in a subprocess; numpy on the
host), counting bytes read plus written, and NVML's theoretical figure (bus width × max memory clock × 2).
The summary says which one each figure used.
"""

from __future__ import annotations

import json
import re
import statistics
import struct
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..common.gguf_header import read_gguf_header

__all__ = [
    "KV_BYTES",
    "ModelBytes",
    "Roofline",
    "gpu_copy_bandwidth_gbs",
    "host_copy_bandwidth_gbs",
    "model_bytes",
    "roofline_for",
]

# bytes per element of llama.cpp's KV cache types (block formats: block bytes / block elements)
KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
            "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}
_BLOCK = re.compile(r"^blk\.(\d+)\.")


class ModelBytes(BaseModel):
    """What one decoded token reads from a model file."""

    weights: int = Field(description="Weight bytes read per token (see the module docstring).")
    kv_per_position: float = Field(description="KV-cache bytes read per token per position of context.")
    file_bytes: int = Field(description="All tensor bytes in the file.")
    layers: int = Field(0, description="Repeating layers a token passes through (MTP blocks not counted).")
    notes: list[str] = Field(default_factory=list)

    def at_depth(self, positions: float) -> float:
        return self.weights + self.kv_per_position * max(0.0, positions)


class Roofline(BaseModel):
    """An arm's place against the bandwidth limit (summary.json ``arms[i].roofline``)."""

    bytes_per_token: float
    bandwidth_gbs: float
    bandwidth_source: str
    floor_tps: float = Field(description="bandwidth / bytes_per_token: plain decoding cannot beat it.")
    efficiency: float | None = Field(None, description="Median decode tok/s / floor_tps.")
    depth: float | None = Field(None, description="Context positions the KV-cache term was taken at.")
    tokens_per_weight_pass: float | None = Field(None, description="Speculative arms: 1 + accepted / drafts.")
    theoretical_bandwidth_gbs: float | None = Field(None, description="NVML bus width × max memory clock × 2.")
    theoretical_floor_tps: float | None = None
    theoretical_efficiency: float | None = None


def model_bytes(path: str | Path, kv_type: str | None = None) -> ModelBytes:
    """Bytes per decoded token of a GGUF model or a safetensors model directory (cached per file version).

    :raises ValueError: not a readable GGUF file or safetensors directory.
    """
    p = Path(path).resolve()
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"))
        stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
        return _safetensors_bytes(p, stamp, kv_type or "f16")
    try:
        st = p.stat()
    except OSError as exc:
        raise ValueError(f"{p} is not a readable GGUF file: {exc.strerror}") from exc
    return _model_bytes(p, st.st_size, st.st_mtime_ns, kv_type or "f16")


def _safetensors_header(path: Path) -> dict[str, Any]:
    """A safetensors file's header: an 8-byte little-endian length, then that many bytes of JSON."""
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    return header


@lru_cache(maxsize=32)
def _safetensors_bytes(p: Path, stamp: tuple[tuple[str, int, int], ...], kv_type: str) -> ModelBytes:
    if not stamp:
        raise ValueError(f"{p} holds no *.safetensors file")
    try:
        tensors = {name: (info["data_offsets"][1] - info["data_offsets"][0], info["shape"])
                   for name, _, _ in stamp for name, info in _safetensors_header(p / name).items()}
        config = json.loads((p / "config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
        raise ValueError(f"{p} is not a readable safetensors model directory: {exc}") from exc
    config = config.get("text_config", config)
    experts = int(config.get("num_local_experts") or config.get("num_experts") or 0)
    used = int(config.get("num_experts_per_tok") or 0)
    has_head = any(n.startswith("lm_head.") for n in tensors)
    notes, weights, total, expert_tensors = [], 0.0, 0, 0
    for name, (nbytes, shape) in tensors.items():
        total += nbytes
        if name.endswith("embed_tokens.weight") and has_head:
            weights += nbytes / max(1, int(shape[0]) if shape else 1)
        elif ".experts." in name and experts and used:
            weights += nbytes * used / experts
            expert_tensors += 1
        else:
            weights += nbytes
    if expert_tensors:
        notes.append(f"MoE: {used} of {experts} experts per token")
    layers = int(config.get("num_hidden_layers") or 0)
    heads = int(config.get("num_attention_heads") or 0)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or (int(config.get("hidden_size") or 0) // heads if heads else 0))
    kv = 2 * layers * kv_heads * head_dim * KV_BYTES.get(kv_type, 2.0)
    return ModelBytes(weights=int(weights), kv_per_position=kv, file_bytes=total, layers=layers, notes=notes)


@lru_cache(maxsize=32)
def _model_bytes(p: Path, size: int, mtime_ns: int, kv_type: str) -> ModelBytes:
    header = read_gguf_header(p)  # raises ValueError naming the file
    arch = str(header.get("general.architecture") or "")
    blocks = int(header.get(f"{arch}.block_count") or 0)
    nextn = int(header.get(f"{arch}.nextn_predict_layers") or 0)
    experts = int(header.get(f"{arch}.expert_count") or 0)
    used = int(header.get(f"{arch}.expert_used_count") or 0)
    names = {t.name for t in header.tensors}
    notes, weights, total, expert_tensors = [], 0.0, 0, 0
    for t in header.tensors:
        nbytes = int(t.n_bytes)
        total += nbytes
        m = _BLOCK.match(t.name)
        if m and nextn and int(m[1]) >= blocks - nextn:
            continue  # MTP block: read by the draft only
        if t.name == "token_embd.weight" and "output.weight" in names:
            rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
            weights += nbytes / max(1, rows)
        elif "_exps." in t.name and experts and used:
            weights += nbytes * used / experts
            expert_tensors += 1
        else:
            weights += nbytes
    if nextn:
        notes.append(f"{nextn} MTP block(s) left out")
    if expert_tensors:
        notes.append(f"MoE: {used} of {experts} experts per token")
    trunk = blocks - nextn
    heads = header.get(f"{arch}.attention.head_count")
    kv_heads = header.get(f"{arch}.attention.head_count_kv")
    hidden = int(header.get(f"{arch}.embedding_length") or 0)
    head_dim = header.get(f"{arch}.attention.key_length")

    def per_layer(value: Any) -> list[int]:
        if isinstance(value, list):
            return [int(v) for v in value][:trunk]
        return [int(value or 0)] * trunk

    heads_l, kv_l = per_layer(heads), per_layer(kv_heads if kv_heads is not None else heads)
    kv = 0.0
    for h, k in zip(heads_l, kv_l, strict=True):
        dim = int(head_dim) if head_dim else (hidden // h if h else 0)
        kv += 2 * k * dim * KV_BYTES.get(kv_type, 2.0)
    return ModelBytes(weights=int(weights), kv_per_position=kv, file_bytes=total, layers=trunk, notes=notes)


# -- bandwidth ---------------------------------------------------------------------------------------

def host_copy_bandwidth_gbs(mib: int = 256, reps: int = 7) -> float:
    """Host memory bandwidth from a numpy copy of ``mib`` MiB (bytes read + written), median of ``reps``."""
    import numpy as np

    src = np.ones(mib * 2**20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch the pages first
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return 2 * src.nbytes / statistics.median(times) / 1e9


# Runs in a child process, so bakeoff itself never holds a CUDA context or GPU memory.
_GPU_COPY = r"""
import json, statistics, sys
n = int(sys.argv[1]) * 2**20
try:
    import torch
    assert torch.cuda.is_available()
    a = torch.empty(n, dtype=torch.uint8, device="cuda"); a.fill_(1); b = torch.empty_like(a)
    def once():
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); b.copy_(a); e.record(); e.synchronize(); return s.elapsed_time(e) / 1e3
    lib = "torch"
except Exception:
    import cupy
    a = cupy.ones(n, dtype=cupy.uint8); b = cupy.empty_like(a)
    def once():
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record(); b[...] = a; e.record(); e.synchronize(); return cupy.cuda.get_elapsed_time(s, e) / 1e3
    lib = "cupy"
for _ in range(3): once()
t = statistics.median(once() for _ in range(20))
print(json.dumps({"gbs": 2 * n / t / 1e9, "lib": lib}))
"""


def gpu_copy_bandwidth_gbs(device: int = 0, mib: int = 2048, timeout_s: float = 120) -> tuple[float, str] | None:
    """Device-to-device copy bandwidth of one GPU (bytes read + written) through torch or CuPy, or None
    when neither can run a copy there."""
    import os

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(device), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    try:
        out = subprocess.run([sys.executable, "-c", _GPU_COPY, str(mib)], capture_output=True, text=True,
                             timeout=timeout_s, env=env, check=True)
        data = json.loads(out.stdout.strip().splitlines()[-1])
        return float(data["gbs"]), str(data["lib"])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError):
        return None


def roofline_for(model: ModelBytes, bandwidth: dict[str, Any], decode_tps: float | None, depth: float | None,
                 tokens_per_pass: float | None = None) -> Roofline | None:
    """An arm's roofline from its model bytes and the run's bandwidth record.

    :param bandwidth: ``{"gbs", "source", "theoretical_gbs"?}`` as run.json records it for the arm's device.
    """
    gbs = bandwidth.get("gbs") or bandwidth.get("theoretical_gbs")
    if not gbs:
        return None
    source = bandwidth.get("source") if bandwidth.get("gbs") else "NVML theoretical (bus width × max memory clock)"
    per_token = model.at_depth(depth or 0.0)
    floor = gbs * 1e9 / per_token
    roof = Roofline(bytes_per_token=per_token, bandwidth_gbs=gbs, bandwidth_source=str(source), floor_tps=floor,
                    efficiency=decode_tps / floor if decode_tps else None, depth=depth,
                    tokens_per_weight_pass=tokens_per_pass)
    theory = bandwidth.get("theoretical_gbs")
    if theory:
        roof.theoretical_bandwidth_gbs = theory
        roof.theoretical_floor_tps = theory * 1e9 / per_token
        roof.theoretical_efficiency = decode_tps / roof.theoretical_floor_tps if decode_tps else None
    return roof
