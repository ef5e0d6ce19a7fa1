#!/usr/bin/env python3
"""Synthesize the speculation-table models with bakeoff's own synthesizer and write the two bakeoff files.

3B-shaped (Llama-3.2-3B: hidden 3072, 28 layers, 24 heads, 8 KV heads, FFN 8192; SmolLM2's vocabulary of
49152, F16 throughout, weights N(0, 0.01²)):

- ``mtp-agree``: glm4moe trunk + one MTP block whose drafts are always accepted;
- ``mtp-agree-a0.70``: the same with a head that misses, so acceptance is 0.70 at n-max 1;
- ``target-agree`` + ``dflash-agree`` (block 16): a llama target and a DFlash draft that always agree.

It writes ``mtp.yaml``, ``dflash.yaml``, ``structured.yaml`` (tool calls and JSON schemas with speculation off,
n-gram and MTP at 1, 4 and 16 streams: issue 29), ``load.yaml`` (the load frontier, issue 30), ``split.yaml``
(the target on one GPU vs split over two in each llama.cpp split mode: for a machine with two GPUs) and
``sessions.yaml`` (agent sessions to ~32k tokens: the same as benchmarks/gpu/sessions-h200.yaml, with this
machine's model paths).

Random matrices are drawn on the GPU with torch where it is there (about 20 s a model), else numpy.
``--small`` makes tiny models of the same kinds, so the whole pipeline can be tried on a CPU.

usage: make_spec_models.py --tokenizer smollm2_tokenizer.json.gz --out DIR [--small] [--gpu-layers 99]
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import yaml

from bakeoff.engines.llamacpp.synth import (
    Dims,
    SynthSpec,
    synthesize,
    tokenizer_from_dump,
)

SHAPE_3B = Dims(hidden=3072, layers=28, heads=24, kv_heads=8, ffn=8192, ctx=4096, draft_layers=2, block_size=16,
                vocab_dtype="f16", scale=0.01)
SHAPE_SMALL = Dims(hidden=256, layers=4, heads=4, kv_heads=2, ffn=512, ctx=4096, draft_layers=2, block_size=16,
                   vocab_dtype="f16", scale=0.01)


# 8 turns of ~4000-token tool results: the last turn's prompt is ~33k tokens (SmolLM2's tokenizer; the engine's own
# counts are in every sample). The sessions get their own models with a trained context of 65536: llama-server
# b11434 caps a slot at the model's trained context (a 4096 model served 4096 of the asked 49152, and every turn
# past it failed with HTTP 400 on the H200, 2026-12-03).
SESSION_CTX = 65536
SESSION_SETTINGS: dict[str, object] = {"ctx": 49152, "parallel": 1, "flash_attn": "on"}
SESSION_WORKLOAD: dict[str, object] = {
    "sessions": {"synthetic": {"sessions": 2, "turns": 8, "tool_result_tokens": 4000, "reply_tokens": 64,
                               "seed": 1}},
    "max_tokens": 64, "reps": 1, "passes": 2, "warmup": 1, "gates": [], "gpu_sample_interval_s": 0.1}


TUNE_WORKLOAD = {"prompts": ["code_python"], "max_tokens": 128, "reps": 2, "warmup": 1, "modes": ["greedy"],
                 "gates": [], "gpu_sample_interval_s": 0.1}


def _rng() -> str:
    try:
        import torch

        return "torch" if torch.cuda.is_available() else "numpy"
    except ImportError:
        return "numpy"


def _arm(name: str, model: Path, settings: dict[str, object], spec: dict[str, object] | None = None,
         sweep: dict[str, list[object]] | None = None) -> dict[str, object]:
    arm: dict[str, object] = {"name": name, "engine": "llamacpp", "model": str(model), "settings": settings}
    if spec:
        arm["speculative"] = spec
    if sweep:
        arm["sweep"] = sweep
    return arm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path, help="directory for the bakeoff files")
    ap.add_argument("--small", action="store_true", help="tiny models (a CPU try of the pipeline)")
    ap.add_argument("--gpu-layers", default="99")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--label", default=os.environ.get("GPU_TAG", "gpu"), help="the card the files run on, "
                    "first in each run name (benchmarks/gpu/gpu_tag.sh: h100-80gb-hbm3, h200, ...)")
    ap.add_argument("--tune-budget", type=int, default=240, help="tune.budget_s of tune-mtp and tune-dflash "
                    "(the race only; verification comes after it)")
    a = ap.parse_args()

    dims = replace(SHAPE_SMALL if a.small else SHAPE_3B, rng=_rng())  # type: ignore[arg-type]
    tok = tokenizer_from_dump(a.tokenizer)
    paths = {}
    for label, spec in (("mtp", SynthSpec("mtp", agree=True, dims=dims)),
                        ("mtp70", SynthSpec("mtp", agree=True, acceptance=0.7, dims=dims)),
                        ("target", SynthSpec("target", agree=True, dims=dims)),
                        ("dflash", SynthSpec("dflash", agree=True, seed=1, dims=dims))):
        t0 = time.monotonic()
        paths[label] = synthesize(spec, tok)
        print(f"{label}: {paths[label]} ({paths[label].stat().st_size / 1e9:.2f} GB, rng {dims.rng}, "
              f"{time.monotonic() - t0:.1f} s)", flush=True)
    long = replace(dims, ctx=SESSION_CTX)
    for label, spec in (("s-target", SynthSpec("target", agree=True, dims=long)),
                        ("s-mtp", SynthSpec("mtp", agree=True, dims=long)),
                        ("s-dflash", SynthSpec("dflash", agree=True, seed=1, dims=long))):
        t0 = time.monotonic()
        paths[label] = synthesize(spec, tok)
        print(f"{label} (trained ctx {SESSION_CTX}): {paths[label]} ({paths[label].stat().st_size / 1e9:.2f} GB, "
              f"{time.monotonic() - t0:.1f} s)", flush=True)

    gpu_layers: object = int(a.gpu_layers) if a.gpu_layers.isdigit() else a.gpu_layers
    settings = {"ctx": 4096, "parallel": 1, "gpu_layers": gpu_layers, "flash_attn": "on"}
    load_settings = {**settings, "ctx": 512, "parallel": 64}  # ctx is per slot: 32768 in all
    workload = {"prompts": ["code_python", "prose", "code_bash"], "max_tokens": a.max_tokens, "reps": a.reps,
                "passes": a.passes, "warmup": 1, "modes": ["greedy"], "gpu_sample_interval_s": 0.1}
    files = {
        "mtp": {"name": f"{a.label}-mtp", "baseline": "mtp-off", "workload": workload, "arms": [
            _arm("mtp-off", paths["mtp"], settings),
            _arm("mtp", paths["mtp"], settings, {"method": "mtp"}, {"speculative.n_max": [1, 2, 3, 4]}),
            _arm("mtp70", paths["mtp70"], settings, {"method": "mtp"}, {"speculative.n_max": [1, 2, 3]}),
        ]},
        "dflash": {"name": f"{a.label}-dflash", "baseline": "target-off", "workload": workload, "arms": [
            _arm("target-off", paths["target"], settings),
            _arm("dflash", paths["target"], settings, {"method": "dflash", "draft_model": str(paths["dflash"])},
                 {"speculative.n_max": [3, 7, 15]}),
        ]},
        # agent sessions to ~32k tokens (docs/sessions.md): the headline is session time, beside decode rate
        "sessions": {"name": f"{a.label}-sessions", "baseline": "target-off", "arms": [
            _arm("target-off", paths["s-target"], SESSION_SETTINGS | {"gpu_layers": gpu_layers}),
            _arm("dflash", paths["s-target"], SESSION_SETTINGS | {"gpu_layers": gpu_layers},
                 {"method": "dflash", "draft_model": str(paths["s-dflash"]), "n_max": 7}),
            _arm("ngram", paths["s-target"], SESSION_SETTINGS | {"gpu_layers": gpu_layers},
                 {"method": "ngram", "variant": "mod"}),
            _arm("mtp-off", paths["s-mtp"], SESSION_SETTINGS | {"gpu_layers": gpu_layers}),
            _arm("mtp", paths["s-mtp"], SESSION_SETTINGS | {"gpu_layers": gpu_layers}, {"method": "mtp", "n_max": 3}),
        ], "workload": SESSION_WORKLOAD},
        # issue 29: tool calls and JSON-schema outputs on the MTP model, spec off vs n-gram vs MTP, 1/4/16 streams
        # (16 slots of 2048 tokens each); benchmarks/gpu/structured-h200.yaml is this file as committed
        "structured": {"name": f"{a.label}-structured", "baseline": "spec-off", "workload": {
            "prompts": ["code_python"], "structured": {"kinds": ["json_schema", "tool_call"]},
            "concurrency": [1, 4, 16], "max_tokens": a.max_tokens, "reps": 1, "passes": a.passes, "warmup": 1,
            "modes": ["greedy"], "gates": [], "gpu_sample_interval_s": 0.1}, "arms": [
            _arm("spec-off", paths["mtp"], {**settings, "ctx": 2048, "parallel": 16}),
            _arm("ngram", paths["mtp"], {**settings, "ctx": 2048, "parallel": 16},
                 {"method": "ngram", "variant": "mod", "n_max": 4}),
            _arm("mtp", paths["mtp"], {**settings, "ctx": 2048, "parallel": 16}, {"method": "mtp", "n_max": 2}),
        ]},
        # issue 30: where speculation stops paying as the load grows (closed loop 1-64 streams, open loop 4 and
        # 16 req/s), each method against its own spec-off model (`bakeoff report RUN --baseline target-off` for
        # DFlash's crossover); 64 slots of 512 tokens each
        "load": {"name": f"{a.label}-load", "baseline": "mtp-off", "workload": {
            "prompts": ["code_python"], "max_tokens": 128, "reps": 2, "passes": 1, "warmup": 1, "modes": ["greedy"],
            "gates": [], "gpu_sample_interval_s": 0.1, "concurrency": [1, 4, 16, 64],
            "arrival": {"rates": [4, 16], "distribution": "poisson", "requests": 24, "seed": 1},
            "slo": {"interactive": {"ttft_s": 0.5, "tpot_s": 0.02}, "relaxed": {"ttft_s": 2.0, "tpot_s": 0.05}}},
            "arms": [
                _arm("mtp-off", paths["mtp"], load_settings),
                _arm("mtp-n3", paths["mtp"], load_settings, {"method": "mtp", "n_max": 3}),
                _arm("target-off", paths["target"], load_settings),
                _arm("dflash-n7", paths["target"], load_settings,
                     {"method": "dflash", "draft_model": str(paths["dflash"]), "n_max": 7}),
            ]},
        # issue 31: `bakeoff tune` races MTP n_max (and DFlash n_max, against its own target) at 1 and 4 streams
        # within --tune-budget seconds (240), then replays the named setting at 1, 16 and 4 streams (docs/tune.md);
        # RUNS="tune-mtp tune-dflash" runs them with `bakeoff tune` instead of `bakeoff run`
        "tune-mtp": {"name": f"{a.label}-tune-mtp", "baseline": "mtp-off", "workload": TUNE_WORKLOAD, "arms": [
            _arm("mtp-off", paths["mtp"], {**settings, "ctx": 2048, "parallel": 16})],
            "tune": {"space": {"speculative.method": ["mtp"], "speculative.n_max": [1, 2, 3, 4]},
                     "streams": [1, 4], "budget_s": a.tune_budget, "max_passes": 6, "verify_streams": [1, 16, 4]}},
        "tune-dflash": {"name": f"{a.label}-tune-dflash", "baseline": "target-off", "workload": TUNE_WORKLOAD, "arms": [
            _arm("target-off", paths["target"], {**settings, "ctx": 2048, "parallel": 16})],
            "tune": {"space": {"speculative.method": ["dflash"], "speculative.draft_model": [str(paths["dflash"])],
                               "speculative.n_max": [3, 7, 15]},
                     "streams": [1, 4], "budget_s": a.tune_budget, "max_passes": 6, "verify_streams": [1, 16, 4]}},
        # two GPUs (nvidia-h200-x2): the same target split over both, each llama.cpp split mode of this build
        "split": {"name": f"{a.label}-x2-split", "baseline": "one-gpu", "workload": workload, "arms": [
            _arm("one-gpu", paths["target"], {**settings, "gpus": [0]}),
            _arm("two", paths["target"], {**settings, "gpus": [0, 1]}, None,
                 {"settings.split": ["layer", "row", "tensor"]}),
        ]},
    }
    a.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (a.out / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        print(f"wrote {a.out / f'{name}.yaml'}", flush=True)


if __name__ == "__main__":
    main()
