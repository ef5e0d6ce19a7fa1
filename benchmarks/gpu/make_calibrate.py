#!/usr/bin/env python3
"""Write the H200 calibration file: a ``calibrate:`` section for llama.cpp MTP on a 3B-shaped model, with its
arms already resolved, and synthesize their models.

The section's ``shape`` takes whole numbers only, so it cannot ask for what a 3B-shaped model needs: F16 vocab
matrices, weights N(0, 0.01²) (28 agreeing layers keep their structure better than at the default 0.02) and
random matrices drawn on the GPU (numpy takes about a minute per 6 GB file). This script therefore synthesizes
every point's model itself, through bakeoff's own planner (``calibration_arms``) with those three settings
added, and writes the arms into the file beside the section. ``bakeoff run`` then adds nothing (a section whose
arms are all present is expanded no further, as when a run resumes from run.json) and analyses the section as
usual: points, speedup intervals, verify-step cost and break-even per n_max.

The files are 6.3-6.6 GB each; a grid of acceptance 0, 0.5, 0.85, 1 x n_max 1, 2, 3 needs 8 of them. Each goes
to the first folder of ``--models`` with room for it (say the disk, then /dev/shm).

usage: make_calibrate.py --tokenizer smollm2_tokenizer.json.gz --out FILE.yaml --models DIR [DIR ...]
                         [--small] [--n-max 1,2,3] [--acceptance 0,0.5,0.85,1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import yaml

from bakeoff.core.config.calibration import calibration_arms, plan_points
from bakeoff.core.config.schema import CalibrateSection, Settings
from bakeoff.engines.llamacpp.synth import SynthSpec, cache_key, synthesize, tokenizer_from_dump

# Llama-3.2-3B: hidden 3072, 28 layers, 24 heads, 8 KV heads, FFN 8192 (SmolLM2's vocabulary of 49152)
SHAPE_3B = {"hidden": 3072, "layers": 28, "heads": 24, "kv_heads": 8, "ffn": 8192, "ctx": 4096}
SHAPE_SMALL = {"hidden": 256, "layers": 4, "heads": 4, "kv_heads": 2, "ffn": 512, "ctx": 4096}
MARGIN = 4 << 30  # bytes left free in a folder after a file


def _rng() -> Literal["numpy", "torch"]:
    try:
        import torch

        return "torch" if torch.cuda.is_available() else "numpy"
    except ImportError:
        return "numpy"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--label", default=os.environ.get("GPU_TAG", "gpu"), help="the card it runs on, in the run "
                    "name (benchmarks/gpu/gpu_tag.sh)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--models", required=True, nargs="+", type=Path, help="folders for the models, in order")
    ap.add_argument("--small", action="store_true", help="tiny models (a CPU try of the pipeline)")
    ap.add_argument("--n-max", default="1,2,3")
    ap.add_argument("--acceptance", default="0,0.5,0.85,1")
    ap.add_argument("--gpu-layers", type=int, default=99)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    a = ap.parse_args()

    tok = tokenizer_from_dump(a.tokenizer)
    rng = _rng()
    settings: dict[str, Any] = {"ctx": 4096, "parallel": 1, "gpu_layers": a.gpu_layers}
    if a.gpu_layers:
        settings["flash_attn"] = "on"
    section = CalibrateSection(engine="llamacpp", method="mtp", n_max=[int(n) for n in a.n_max.split(",")],
                               acceptance=[float(x) for x in a.acceptance.split(",")],
                               shape=SHAPE_SMALL if a.small else SHAPE_3B,
                               settings=Settings.model_validate(settings))
    for d in a.models:
        d.mkdir(parents=True, exist_ok=True)

    def synth(spec: SynthSpec) -> Path:
        spec = replace(spec, dims=replace(spec.dims, vocab_dtype="f16", scale=0.01, rng=rng))
        for d in a.models:  # a file made earlier is reused wherever it lies
            made: Path = d / f"{spec.name}-{cache_key(spec, tok)}.gguf"
            if made.is_file():
                return made
        params = spec.dims.hidden * (2 * spec.dims.hidden + 3 * spec.dims.ffn) * (spec.dims.layers + 1)
        need = 2 * (params + 3 * tok.vocab_size * spec.dims.hidden) + MARGIN
        root = next((d for d in a.models if shutil.disk_usage(d).free > need), a.models[-1])
        t0 = time.monotonic()
        path = synthesize(spec, tok, root=root)
        print(f"{path}: {path.stat().st_size / 1e9:.2f} GB in {time.monotonic() - t0:.1f} s ({rng}); "
              f"{shutil.disk_usage(root).free / 2**30:.1f} GiB left there", flush=True)
        return path

    arms = calibration_arms(section, synth)
    names = [p.arm for p in plan_points(section)]
    assert [arm.name for arm in arms] == names
    doc = {
        "name": f"calibrate-{a.label}-mtp-3b" if not a.small else "calibrate-small-mtp",
        "calibrate": [section.model_dump(mode="json", exclude_unset=True)],
        "arms": [arm.model_dump(mode="json", exclude_unset=True) for arm in arms],
        "workload": {"prompts": ["code_python", "prose"], "max_tokens": a.max_tokens, "modes": ["greedy"],
                     "reps": a.reps, "passes": 1, "warmup": 1, "gates": [], "gpu_sample_interval_s": 0.1},
    }
    header = ("# Forced-acceptance calibration of llama.cpp MTP on a 3B-shaped model (written by\n"
              "# benchmarks/gpu/make_calibrate.py): the arms are the section's own, resolved, with models\n"
              f"# synthesized at vocab_dtype f16, scale 0.01, rng {rng} (the section's shape takes integers only).\n")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    print(f"{a.out}: {len(arms)} arms, {len({arm.model for arm in arms})} model files")


if __name__ == "__main__":
    main()
