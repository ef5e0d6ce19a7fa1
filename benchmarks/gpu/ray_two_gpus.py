"""One paired block per GPU through --executor ray, for a machine with two GPUs (not yet run: no two-GPU
machine was lent when this was written).

Two Ray nodes on this machine, each started with one GPU visible (CUDA_VISIBLE_DEVICES=0 or 1) and offering
the custom resource gpu-0 or gpu-1. The same block (spec-off, ngram, draft on a CUDA llama-server) repeats on
both "hosts"; Ray is told not to touch CUDA_VISIBLE_DEVICES, so each engine sees only its node's GPU. The
report compares every arm with the baseline on its own GPU, and the two GPUs as hardware.

    bakeoff engines install llamacpp --backend cuda
    python3 benchmarks/gpu/ray_two_gpus.py [MODEL.gguf] [OUT_DIR]

Checks, printed at the end and reflected in the exit status: every stored arm has samples, run.json records
both hosts with their GPU and driver, and each host's engines ran on a different GPU (hosts[*].gpus).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ray.cluster_utils import Cluster

FILE = """\
name: ray-two-gpus
arms:
  - {{name: spec-off, engine: llamacpp, model: {model}, settings: {{ctx: 4096, gpu_layers: 999}}}}
  - {{name: ngram, engine: llamacpp, model: {model}, speculative: {{method: ngram, variant: mod}},
     settings: {{ctx: 4096, gpu_layers: 999}}}}
  - {{name: draft, engine: llamacpp, model: {model}, speculative: {{method: draft, draft_model: {model}, n_max: 3}},
     settings: {{ctx: 4096, gpu_layers: 999}}}}
workload: {{prompts: [code_python, prose], max_tokens: 128, reps: 3, passes: 2}}
hosts:
  - {{name: gpu0, resources: {{gpu-0: 1}}}}
  - {{name: gpu1, resources: {{gpu-1: 1}}}}
"""


def main() -> int:
    model = sys.argv[1] if len(sys.argv) > 1 else "smollm2"
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "runs-ray-two-gpus")
    file = Path(tempfile.mkdtemp()) / "ray-two-gpus.yaml"
    file.write_text(FILE.format(model=model))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False})
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        for gpu in (0, 1):  # a node inherits this process's environment when it starts
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
            cluster.add_node(num_cpus=4, num_gpus=1, resources={f"gpu-{gpu}": 1})
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
        cluster.wait_for_nodes()
        proc = subprocess.run([sys.executable, "-P", "-c", "from bakeoff.core.cli import main; main()", "run",
                               str(file), "--executor", "ray", "--address", cluster.address, "--out", str(out)])
    finally:
        cluster.shutdown()
    [run] = sorted(out.iterdir())[-1:]
    record = json.loads((run / "run.json").read_text())
    hosts = record.get("hosts", {})
    gpus = {name: [g.get("name") for g in host.get("host", {}).get("gpus", [])] for name, host in hosts.items()}
    print(f"run {run}: exit {proc.returncode}; hosts {sorted(hosts)}; GPUs seen per host {gpus}")
    ok = proc.returncode == 0 and set(hosts) == {"gpu0", "gpu1"} and all(gpus.values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
